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
        (
            META_TOPIC_ID.to_owned(),
            format!("{:#018x}", spec.name.id()),
        ),
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
    /// The Rust type's name from the channel metadata ([`META_TYPE`]), if it is there.
    pub type_name: Option<String>,
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

/// The largest record [`read`] takes beyond the file's own size: a record inside a compressed
/// chunk may be larger than the file, but none that a recorder writes is larger than this (a
/// message is at most 16 MiB by default), and a claim beyond it is refused before any memory is
/// reserved for it.
pub const MAX_RECORD: usize = 64 << 20;

/// Reads every message of an MCAP recording held in memory, up to its end or up to the first
/// record that does not parse (the last complete chunk of a file cut off mid-write). A record
/// claiming more than the file's length plus [`MAX_RECORD`] bytes ends the reading there, as a
/// corrupt one does: no claim reserves memory beyond that bound.
pub fn read(bytes: &[u8]) -> Recording {
    let mut recording = Recording::default();
    let mut reader = mcap::sans_io::LinearReader::new_with_options(
        mcap::sans_io::LinearReaderOptions::default()
            .with_record_length_limit(bytes.len().saturating_add(MAX_RECORD))
            .with_skip_end_magic(true),
    );
    let mut rest = bytes;
    let mut schemas: BTreeMap<u16, Option<Shape>> = BTreeMap::new();
    let mut channels: BTreeMap<u16, usize> = BTreeMap::new();
    while let Some(event) = reader.next_event() {
        let (opcode, data) = match event {
            Ok(mcap::sans_io::LinearReadEvent::ReadRequest(need)) => {
                let n = need.min(rest.len());
                reader.insert(n).copy_from_slice(&rest[..n]);
                reader.notify_read(n);
                rest = &rest[n..];
                continue;
            }
            Ok(mcap::sans_io::LinearReadEvent::Record { opcode, data }) => (opcode, data),
            Err(error) => {
                recording.cut_off = Some(error.to_string());
                break;
            }
        };
        let record = match mcap::parse_record(opcode, data) {
            Ok(record) => record,
            Err(error) => {
                recording.cut_off = Some(error.to_string());
                break;
            }
        };
        match record {
            mcap::records::Record::Schema { header, data } => {
                let shape = (header.encoding == SCHEMA_ENCODING)
                    .then(|| Shape::from_bytes(&data).ok())
                    .flatten();
                schemas.insert(header.id, shape);
            }
            mcap::records::Record::Channel(channel) => {
                if channels.contains_key(&channel.id) {
                    continue;
                }
                let shape = schemas.get(&channel.schema_id).cloned().flatten();
                recording.topics.push(RecordedTopic {
                    topic: channel.topic.clone(),
                    topic_id: hex(channel.metadata.get(META_TOPIC_ID)),
                    fingerprint: hex(channel.metadata.get(META_FINGERPRINT)),
                    type_name: channel.metadata.get(META_TYPE).cloned(),
                    shape,
                    encoding: channel.message_encoding.clone(),
                });
                channels.insert(channel.id, recording.topics.len() - 1);
            }
            mcap::records::Record::Message { header, data } => {
                let Some(&topic) = channels.get(&header.channel_id) else {
                    recording.cut_off = Some(format!(
                        "a message of channel {} before that channel's record",
                        header.channel_id
                    ));
                    break;
                };
                recording.frames.push(Frame {
                    topic,
                    sequence: header.sequence,
                    log_time: header.log_time,
                    publish_time: header.publish_time,
                    data: data.into_owned(),
                });
            }
            mcap::records::Record::DataEnd(_) => break,
            _ => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(op: u8, content: &[u8]) -> Vec<u8> {
        let mut r = vec![op];
        r.extend_from_slice(&(content.len() as u64).to_le_bytes());
        r.extend_from_slice(content);
        r
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(s.as_bytes());
        b
    }

    /// A recording whose zstd chunk (one raw block, 9 bytes inside) holds a Message record
    /// claiming `claim` bytes.
    fn claiming(claim: u64) -> Vec<u8> {
        let mut file = b"\x89MCAP0\r\n".to_vec();
        let mut header = string("llbus");
        header.extend(string("test"));
        file.extend(record(0x01, &header));
        let mut inner = vec![0x05];
        inner.extend_from_slice(&claim.to_le_bytes());
        let mut zstd = 0xFD2F_B528u32.to_le_bytes().to_vec();
        zstd.extend([0x20, inner.len() as u8]);
        zstd.extend_from_slice(&(1 | ((inner.len() as u32) << 3)).to_le_bytes()[..3]);
        zstd.extend_from_slice(&inner);
        let mut chunk = Vec::new();
        chunk.extend_from_slice(&0u64.to_le_bytes());
        chunk.extend_from_slice(&0u64.to_le_bytes());
        chunk.extend_from_slice(&(inner.len() as u64).to_le_bytes());
        chunk.extend_from_slice(&0u32.to_le_bytes());
        chunk.extend(string("zstd"));
        chunk.extend_from_slice(&(zstd.len() as u64).to_le_bytes());
        chunk.extend(zstd);
        file.extend(record(0x06, &chunk));
        file
    }

    #[test]
    fn a_record_claiming_a_terabyte_inside_a_chunk_ends_the_reading_without_reserving_it() {
        let recording = read(&claiming(1 << 40));
        assert!(recording.frames.is_empty());
        let why = recording.cut_off.expect("reported as cut off");
        assert!(
            why.to_lowercase().contains("too large") || why.contains("limit"),
            "{why}"
        );
        // A claim within the bound is only cut off (the chunk ends before it).
        let recording = read(&claiming(1 << 10));
        assert!(recording.frames.is_empty() && recording.cut_off.is_some());
    }
}
