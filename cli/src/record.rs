//! `llbus record`: remote topics into an MCAP file, through `llbus-record`'s writer (the same
//! files as the in-process recorder), subscribing like any remote subscriber (`remote`).
//!
//! One channel per topic: its shape as the Schema (`llbus-shape`) and bincode messages as on
//! the wire, or with `--encoding json` a JSON Schema made from the shape and each message as
//! JSON; the channel metadata holds topic id, fingerprint, the publisher's address and the
//! publisher session the recording started with. Each Message record's `sequence` is the
//! frame's sequence number (low 32 bits), `publish_time` the frame's send time, `log_time`
//! when it was received. The imports drop late (reordered) messages, so every number missing
//! between two recorded ones of a session is truly missing: each such gap is one message on
//! the `llbus.gaps` channel (JSON: topic, topic id, session, first, last), written when the
//! next message shows it.
//!
//! A `--topic` may be a pattern (`md.quote.*`, `pattern`): every topic of the publisher that
//! matches, found once at start, becomes a channel of its own.
//!
//! A topic the publisher exports reliably (as its discovery announcement or its answer to a
//! discovery query says) is subscribed reliably: losses are NAKed and repaired, so the file
//! has no gap the topic would have filled. Such a message's `publish_time` is 0 (a reliable
//! import delivers from its reorder buffer, which keeps no send times). A publisher with
//! discovery off cannot say: its topics are recorded best-effort (a note says so).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use llbus_net::{DropReason, Event, Origin, Sink};
use llbus_record::{
    Channel, ChannelSchema, FileOptions, FileWriter, GAPS_TOPIC, MESSAGE_ENCODING,
    META_FINGERPRINT, META_PUBLISHER, META_SESSION, META_TOPIC_ID, SCHEMA_ENCODING,
};

use crate::pattern::{parse_topic, TopicArg};
use crate::remote::{Opened, Subscription, Topic};
use crate::seconds;

/// How the messages are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Encoding {
    /// As on the wire (`llbus-bincode`), with the shape as the schema.
    Bincode,
    /// As JSON, with a JSON Schema made from the shape (Foxglove shows the fields).
    Json,
}

/// What `llbus record` is asked.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::pattern::PATTERN_HELP)]
pub(crate) struct Args {
    /// A topic to record (repeat for several), or a pattern of names (`md.quote.*`): every
    /// topic of the publisher that matches, found once at start (topics it adds later are not
    /// recorded), each on a channel of its own.
    #[arg(long = "topic", required = true, value_parser = parse_topic, value_name = "NAME|PATTERN")]
    topics: Vec<TopicArg>,
    /// Stops after this many messages, over all topics (else after `--duration-s`, or when
    /// killed: the file is then readable up to its last second).
    #[arg(long)]
    count: Option<u64>,
    /// How messages are written.
    #[arg(long, value_enum, default_value_t = Encoding::Bincode)]
    encoding: Encoding,
    /// The file (with rotation: `STEM-0000.EXT`, `STEM-0001.EXT`, ...).
    #[arg(long)]
    output: PathBuf,
    /// A new file once this many bytes of messages are in the current one.
    #[arg(long)]
    rotate_size: Option<u64>,
    /// A new file once the current one is this many seconds old.
    #[arg(long)]
    rotate_every_s: Option<f64>,
    /// Chunks without compression (zstd level 1 otherwise).
    #[arg(long)]
    uncompressed: bool,
    #[command(flatten)]
    subscription: Subscription,
}

/// The channels of `topics`, then the gaps channel.
fn channels(
    topics: &[Topic],
    sessions: &[u64],
    publisher: SocketAddr,
    encoding: Encoding,
) -> Vec<Channel> {
    let mut out: Vec<Channel> = topics
        .iter()
        .zip(sessions)
        .map(|(t, session)| {
            let metadata = BTreeMap::from([
                (META_TOPIC_ID.to_owned(), format!("{:#018x}", t.topic_id)),
                (
                    META_FINGERPRINT.to_owned(),
                    format!("{:#018x}", t.fingerprint),
                ),
                (META_PUBLISHER.to_owned(), publisher.to_string()),
                (META_SESSION.to_owned(), format!("{session:#018x}")),
            ]);
            let name = match &t.shape {
                llbus::schema::Shape::Struct { name, .. }
                | llbus::schema::Shape::Enum { name, .. } => name.clone(),
                _ => t.name.to_string(),
            };
            let (message_encoding, schema) = match encoding {
                Encoding::Bincode => (
                    MESSAGE_ENCODING,
                    t.shape.to_bytes().ok().map(|data| ChannelSchema {
                        name,
                        encoding: SCHEMA_ENCODING.to_owned(),
                        data,
                    }),
                ),
                Encoding::Json => (
                    "json",
                    Some(ChannelSchema {
                        name,
                        encoding: "jsonschema".to_owned(),
                        data: llbus::schema::json_schema(&t.shape)
                            .to_string()
                            .into_bytes(),
                    }),
                ),
            };
            Channel {
                topic: t.name.to_string(),
                message_encoding: message_encoding.to_owned(),
                metadata,
                schema,
            }
        })
        .collect();
    out.push(Channel {
        topic: GAPS_TOPIC.to_owned(),
        message_encoding: "json".to_owned(),
        metadata: BTreeMap::new(),
        schema: Some(ChannelSchema {
            name: "llbus.Gap".to_owned(),
            encoding: "jsonschema".to_owned(),
            data: GAP_SCHEMA.as_bytes().to_vec(),
        }),
    });
    out
}

/// The JSON Schema of a gap message.
const GAP_SCHEMA: &str = r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"llbus.Gap","type":"object","properties":{"topic":{"type":"string"},"topic_id":{"type":"string"},"session":{"type":"string"},"first":{"type":"integer"},"last":{"type":"integer"}},"required":["topic","topic_id","session","first","last"]}"#;

/// A message received before every subscription was established (the file is opened with
/// every channel's session then).
struct Pending {
    import: usize,
    origin: Origin,
    log_time: u64,
    payload: Vec<u8>,
}

/// Messages held at most before the file opens; beyond, dropped (they show as gaps).
const PENDING_MAX: usize = 1 << 16;
/// Payload bytes held at most before the file opens: a publisher that admits some
/// subscriptions and withholds another cannot make the wait hold more (the rest is dropped
/// and shows as gaps).
const PENDING_BYTES: usize = 32 << 20;

/// Writes what the subscriptions deliver.
struct Recorder {
    topics: Vec<Topic>,
    encoding: Encoding,
    file: Option<FileWriter>,
    pending: Vec<Pending>,
    /// The payload bytes in `pending`.
    pending_bytes: usize,
    /// The last (session, sequence number) written per topic.
    last: Vec<Option<(u64, u64)>>,
    recorded: u64,
    /// Nothing is written past this many messages (`--count`).
    limit: Option<u64>,
    gaps: u64,
    lost: u64,
    undecodable: u64,
    /// The first write error: recording stops.
    error: Option<String>,
}

fn wall_ns() -> u64 {
    u64::try_from(llbus_net::realtime_ns()).unwrap_or(0)
}

impl Recorder {
    /// Writes one message, and first the gap before it if there is one.
    fn write(
        &mut self,
        import: usize,
        origin: Origin,
        log_time: u64,
        payload: &[u8],
    ) -> Result<(), String> {
        let Some(topic) = self.topics.get(import) else {
            return Ok(());
        };
        let (name, topic_id) = (topic.name.clone(), topic.topic_id);
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let previous = self.last.get(import).copied().flatten();
        // The first number expected: after the last one of this session; from 1 in a new
        // session of the publisher (a restart); none at the start (a subscriber joins late).
        let expected = match previous {
            Some((session, seq)) if session == origin.session => seq.checked_add(1),
            Some(_) => Some(1),
            None => None,
        };
        if let Some(first) = expected.filter(|&first| origin.seq > first) {
            let last = origin.seq - 1;
            let gap = serde_json::json!({
                "topic": &*name,
                "topic_id": format!("{topic_id:#018x}"),
                "session": format!("{:#018x}", origin.session),
                "first": first,
                "last": last,
            });
            let gaps_channel = self.topics.len();
            file.write(
                gaps_channel,
                self.gaps as u32,
                log_time,
                log_time,
                gap.to_string().as_bytes(),
            )?;
            self.gaps += 1;
            // Numbers come from the network: near u64::MAX they saturate, never wrap.
            self.lost = self.lost.saturating_add((last - first).saturating_add(1));
        }
        // It arrived, whether or not it decodes: the next number is not a gap.
        if let Some(slot) = self.last.get_mut(import) {
            *slot = Some((origin.session, origin.seq));
        }
        let data = match self.encoding {
            Encoding::Bincode => payload.to_vec(),
            Encoding::Json => match crate::echo::json_line(payload, &topic.shape) {
                Ok(line) => line.into_bytes(),
                Err(e) => {
                    if self.undecodable == 0 {
                        eprintln!(
                            "llbus record: a message of '{}' does not fit its schema: {}",
                            crate::text::clean(&topic.name),
                            crate::text::clean(&e)
                        );
                    }
                    self.undecodable += 1;
                    return Ok(());
                }
            },
        };
        let publish_time = u64::try_from(origin.timestamp_ns).unwrap_or(0);
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        file.write(import, origin.seq as u32, log_time, publish_time, &data)?;
        self.recorded += 1;
        Ok(())
    }

    /// Opens the file and writes what waited for it.
    fn open(
        &mut self,
        path: &std::path::Path,
        channels: Vec<Channel>,
        options: &FileOptions,
    ) -> Result<(), String> {
        self.file = Some(FileWriter::create(path, channels, options)?);
        self.pending_bytes = 0;
        for p in std::mem::take(&mut self.pending) {
            self.write(p.import, p.origin, p.log_time, &p.payload)?;
        }
        Ok(())
    }
}

impl Sink for Recorder {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        // The endpoint calls `deliver_from`.
        Err(DropReason::UnknownTopic)
    }

    fn deliver_from(
        &mut self,
        import: usize,
        origin: Origin,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        let log_time = wall_ns();
        let full = self
            .limit
            .is_some_and(|c| self.recorded + self.pending.len() as u64 >= c);
        if self.error.is_some() || full {
            return Ok(());
        }
        if self.file.is_none() {
            if self.pending.len() < PENDING_MAX
                && self.pending_bytes + payload.len() <= PENDING_BYTES
            {
                self.pending_bytes += payload.len();
                self.pending.push(Pending {
                    import,
                    origin,
                    log_time,
                    payload: payload.to_vec(),
                });
            }
            return Ok(());
        }
        if let Err(e) = self.write(import, origin, log_time, payload) {
            self.error = Some(e);
        }
        Ok(())
    }
}

/// Runs `llbus record`.
pub(crate) fn run(args: &Args) -> Result<(), String> {
    let Opened {
        mut link,
        until,
        setup_timeout,
        announced,
    } = args.subscription.open(&args.topics)?;
    let options = FileOptions {
        zstd_level: (!args.uncompressed).then_some(1),
        rotate_size: args.rotate_size,
        rotate_every: args
            .rotate_every_s
            .map(|s| seconds(s, "--rotate-every-s"))
            .transpose()?,
        ..FileOptions::default()
    };
    // A topic named twice (or matched by two patterns) is recorded once: one subscription
    // per topic and publisher.
    // A reliable export is recorded through a reliable import (its gaps repaired): the
    // announcement that found the publisher says which are, else the publisher is asked.
    let resolved =
        crate::pattern::resolve(&args.topics, &mut link, setup_timeout, announced.is_empty())?;
    let mut topics = link.schemas(&resolved.names, setup_timeout)?;
    for (topic, reliable) in topics.iter_mut().zip(&resolved.reliable) {
        topic.reliable =
            *reliable || (announced.iter()).any(|a| a.reliable && *a.name == *topic.name);
    }
    let mut endpoint = link.subscribe(&topics)?;
    let mut sessions: Vec<Option<u64>> = vec![None; topics.len()];
    let mut recorder = Recorder {
        last: vec![None; topics.len()],
        topics,
        encoding: args.encoding,
        file: None,
        pending: Vec::new(),
        pending_bytes: 0,
        recorded: 0,
        limit: args.count,
        gaps: 0,
        lost: 0,
        undecodable: 0,
        error: None,
    };
    let setup_deadline = Instant::now() + setup_timeout;
    loop {
        if until.is_some_and(|u| Instant::now() >= u)
            || args.count.is_some_and(|c| recorder.recorded >= c)
        {
            break;
        }
        if recorder.file.is_none() && Instant::now() >= setup_deadline {
            return Err(format!(
                "not every subscription at {} was admitted within {setup_timeout:?}: does the \
                 publisher's allowlist admit this host?",
                link.publisher()
            ));
        }
        link.drive(&mut endpoint, &mut recorder)?;
        while let Some(event) = endpoint.poll_event() {
            match event {
                Event::Established {
                    import, session, ..
                } => {
                    if let Some(slot) = sessions.get_mut(import) {
                        slot.get_or_insert(session);
                    }
                }
                Event::Refused { import, refusal } => {
                    let name = recorder.topics.get(import).map_or("?", |t| &*t.name);
                    return Err(format!(
                        "topic '{}' at {}: {refusal}",
                        crate::text::clean(name),
                        link.publisher()
                    ));
                }
                _ => {}
            }
        }
        if recorder.file.is_none() && sessions.iter().all(Option::is_some) {
            let sessions: Vec<u64> = sessions.iter().map(|s| s.unwrap_or(0)).collect();
            let channels = channels(&recorder.topics, &sessions, link.publisher(), args.encoding);
            recorder.open(&args.output, channels, &options)?;
        }
        if let Some(file) = recorder.file.as_mut() {
            file.tick()?;
        }
        if let Some(e) = recorder.error.take() {
            return Err(format!(
                "cannot write {}: {e}",
                crate::text::path(&args.output)
            ));
        }
    }
    link.close(&mut endpoint);
    let files = recorder.file.as_ref().map_or(0, FileWriter::files);
    if let Some(file) = recorder.file.take() {
        file.finish()?;
    }
    println!(
        "RECORDED messages={} gaps={} lost={} undecodable={} files={files}",
        recorder.recorded, recorder.gaps, recorder.lost, recorder.undecodable
    );
    Ok(())
}
