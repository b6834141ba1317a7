//! How llbus topics map onto MCAP records, in one place (docs/RECORDING.md explains it):
//! the encodings' names, the channel metadata keys, and the reading side, [`read`], which
//! turns the bytes of a recording (whole or cut off) back into frames.

use std::collections::BTreeMap;

use llbus::schema::Shape;
use llbus::TopicSpec;

/// The Schema record's encoding: its data is [`Shape::to_bytes`] of the topic's type.
pub const SCHEMA_ENCODING: &str = "llbus-shape";
/// The Channel's message encoding: each Message record's data is the value in bincode 1 layout
/// (bincode 2 `config::legacy()`), as the network bridge puts it on the wire.
pub const MESSAGE_ENCODING: &str = "llbus-bincode";
/// Channel metadata: the topic id, `0x` and 16 hex digits.
pub const META_TOPIC_ID: &str = "llbus.topic_id";
/// Channel metadata: the schema fingerprint, `0x` and 16 hex digits.
pub const META_FINGERPRINT: &str = "llbus.fingerprint";
/// Channel metadata: the Rust type's name, for people.
pub const META_TYPE: &str = "llbus.type";
/// The name of the Metadata record written last in each file: what the recorder saw.
pub const RECORDER_METADATA: &str = "llbus.recorder";
/// Channel metadata, recorded from the network: the publisher's address.
pub const META_PUBLISHER: &str = "llbus.publisher";
/// Channel metadata, recorded from the network: the publisher session when the recording
/// started (`0x` and 16 hex digits; a restart shows on [`GAPS_TOPIC`]).
pub const META_SESSION: &str = "llbus.session";
/// The channel on which a recording from the network marks what its subscriptions lost: one
/// JSON message per gap (docs/RECORDING.md).
pub const GAPS_TOPIC: &str = "llbus.gaps";

/// The Channel metadata of a topic.
pub(crate) fn channel_metadata(spec: &TopicSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (META_TOPIC_ID.to_owned(), format!("{:#018x}", spec.id)),
        (
            META_FINGERPRINT.to_owned(),
            format!("{:#018x}", spec.fingerprint),
        ),
        (META_TYPE.to_owned(), spec.type_name.to_owned()),
    ])
}

/// The Schema record's name: the type's name as the shape has it, else the Rust type name.
pub(crate) fn schema_name(spec: &TopicSpec, shape: &Shape) -> String {
    match shape {
        Shape::Struct { name, .. } | Shape::Enum { name, .. } => name.clone(),
        _ => spec.type_name.to_owned(),
    }
}

/// Parses a `0x`-prefixed hexadecimal `u64` from channel metadata.
fn hex(value: Option<&String>) -> Option<u64> {
    let digits = value?.strip_prefix("0x")?;
    u64::from_str_radix(digits, 16).ok()
}

/// One recorded topic, from its Channel and Schema records.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedTopic {
    /// The topic name.
    pub topic: String,
    /// The topic id from the channel metadata, if it is there and well formed.
    pub topic_id: Option<u64>,
    /// The fingerprint from the channel metadata, if it is there and well formed.
    pub fingerprint: Option<u64>,
    /// The shape from the Schema record, if it is an llbus shape that decodes.
    pub shape: Option<Shape>,
    /// The message encoding.
    pub encoding: String,
}

/// One Message record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Index into [`Recording::topics`].
    pub topic: usize,
    /// The recorder's per-topic count of messages it took, from 0 (wrapping at 2^32): a gap
    /// is messages the recorder dropped.
    pub sequence: u32,
    /// When the recorder took the message, in nanoseconds since the UNIX epoch.
    pub log_time: u64,
    /// When the message was published, in nanoseconds since the UNIX epoch, as far as the
    /// recorder knows (in process: when it took it).
    pub publish_time: u64,
    /// The encoded message.
    pub data: Vec<u8>,
}

/// The messages of a recording, in file order (the order they were recorded in).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// Every topic with at least one message before the point reading stopped, in order of
    /// first message.
    pub topics: Vec<RecordedTopic>,
    /// The messages, in file order.
    pub frames: Vec<Frame>,
    /// Why the file is not complete, if it is not: a recording cut off by a crash ends inside a
    /// chunk or between records, without its summary and footer, and everything before the
    /// cut chunk is in `frames`.
    pub cut_off: Option<String>,
}

/// Reads every message of an MCAP recording held in memory, up to its end or up to the first
/// record that does not parse (the last complete chunk of a file cut off mid-write).
pub fn read(bytes: &[u8]) -> Recording {
    let mut recording = Recording::default();
    let options = mcap::read::Options::IgnoreEndMagic.into();
    let stream = match mcap::MessageStream::new_with_options(bytes, options) {
        Ok(stream) => stream,
        Err(error) => {
            recording.cut_off = Some(error.to_string());
            return recording;
        }
    };
    let mut by_channel: BTreeMap<u16, usize> = BTreeMap::new();
    for message in stream {
        let message = match message {
            Ok(message) => message,
            Err(error) => {
                recording.cut_off = Some(error.to_string());
                break;
            }
        };
        let channel = &message.channel;
        let topic = *by_channel.entry(channel.id).or_insert_with(|| {
            let shape = channel
                .schema
                .as_ref()
                .filter(|schema| schema.encoding == SCHEMA_ENCODING)
                .and_then(|schema| Shape::from_bytes(&schema.data).ok());
            recording.topics.push(RecordedTopic {
                topic: channel.topic.clone(),
                topic_id: hex(channel.metadata.get(META_TOPIC_ID)),
                fingerprint: hex(channel.metadata.get(META_FINGERPRINT)),
                shape,
                encoding: channel.message_encoding.clone(),
            });
            recording.topics.len() - 1
        });
        recording.frames.push(Frame {
            topic,
            sequence: message.sequence,
            log_time: message.log_time,
            publish_time: message.publish_time,
            data: message.data.into_owned(),
        });
    }
    // A file cut off between two records streams to its end cleanly: only the missing footer
    // tells it from a complete one.
    if recording.cut_off.is_none() {
        if let Err(error) = mcap::read::footer(bytes) {
            recording.cut_off = Some(format!(
                "no footer ({error}): the recording was cut off after a complete record"
            ));
        }
    }
    recording
}
