//! `llbus play`: a recording served as a publisher. Every recorded topic (bincode messages
//! with an `llbus-shape` schema: what `llbus record` and the in-process recorder write) becomes
//! an export of an `llbus_net::Endpoint` on `--bind`, with the recorded
//! fingerprint and topic id and the recorded shape served on request, so any llbus subscriber
//! subscribes to it as to the original publisher, with no Rust type here. Messages go out in
//! file order at the recorded pace (`log_time`), scaled by `--speed`, or as fast as possible
//! (`--speed 0`), as a new publisher session numbered from 1.
//!
//! The player announces its topics on the discovery group (`--group`, the bridges' default
//! group unless given) as a bridge with discovery on does, so that a subscriber that discovers
//! its topics (`Bridge::discover`, `subscriber --discover`, `llbus topics`, `llbus echo
//! --topic` alone) finds the recording as it found the original publisher; `--no-announce`
//! plays without, for subscribers that name the address.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use llbus_net::{Allowlist, DropReason, EncodedShape, ExportSpec, Sink};
use llbus_record::{Frame, GAPS_TOPIC, MESSAGE_ENCODING};

use crate::remote::{read_psk, Link};

/// What `llbus play` is asked.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The recording (an MCAP file; one cut off by a crash plays up to its last chunk).
    file: PathBuf,
    /// Where to take subscriptions.
    #[arg(long, default_value = "127.0.0.1:7000")]
    bind: SocketAddr,
    /// The pace: 1 as recorded, 2 twice as fast, 0 as fast as possible.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Plays again from the start after the end, until killed.
    #[arg(long = "loop")]
    repeat: bool,
    /// Plays only this topic (repeat for several; default: every recorded topic).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// Starts only once a subscriber is admitted (nothing is played into the void).
    #[arg(long)]
    wait_subscriber: bool,
    /// The networks that may subscribe, comma-separated CIDRs [default: loopback only].
    #[arg(long)]
    allow: Option<String>,
    /// A pre-shared key subscribers must hold: a file of 64 hex digits (or 32 bytes).
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// The discovery group the topics are announced on.
    #[arg(long, default_value_t = llbus_net::DEFAULT_DISCOVERY_GROUP)]
    group: SocketAddr,
    /// Does not announce the topics (subscribers must name --bind's address).
    #[arg(long)]
    no_announce: bool,
}

/// Takes nothing: a player imports nothing.
struct NoImports;

impl Sink for NoImports {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        Err(DropReason::UnknownTopic)
    }
}

/// The exports of a recording's topics (the ones asked for), and for each recorded topic
/// the export it plays on (`None`: not played).
fn exports(
    recording: &llbus_record::Recording,
    wanted: &[String],
) -> Result<(Vec<ExportSpec>, Vec<Option<usize>>), String> {
    let mut specs = Vec::new();
    let mut by_topic = Vec::with_capacity(recording.topics.len());
    for t in &recording.topics {
        let asked = if wanted.is_empty() {
            t.topic != GAPS_TOPIC
        } else {
            wanted.contains(&t.topic)
        };
        if !asked {
            by_topic.push(None);
            continue;
        }
        if t.encoding != MESSAGE_ENCODING {
            return Err(format!(
                "topic '{}' is recorded as '{}': only '{MESSAGE_ENCODING}' recordings play",
                crate::text::clean(&t.topic),
                crate::text::clean(&t.encoding)
            ));
        }
        let shape = t.shape.as_ref().ok_or_else(|| {
            format!(
                "topic '{}' has no llbus schema in the recording",
                crate::text::clean(&t.topic)
            )
        })?;
        // A subscriber checks a served shape against the fingerprint served with it: a
        // recording whose channel states another fingerprint than its schema hashes to would
        // be served as nobody can use it.
        let fingerprint = t.fingerprint.unwrap_or_else(|| shape.fingerprint());
        if fingerprint != shape.fingerprint() {
            return Err(format!(
                "topic '{}': the recording's channel states fingerprint {fingerprint:#018x}, but its schema hashes to {:#018x}: the file is damaged or was not written by llbus",
                crate::text::clean(&t.topic),
                shape.fingerprint()
            ));
        }
        let shape = EncodedShape::new(shape).map_err(|e| e.to_string())?;
        specs.push(ExportSpec {
            topic: t.topic.as_str().into(),
            topic_id: t.topic_id.unwrap_or_else(|| llbus::topic_id(&t.topic)),
            fingerprint,
            allow: None,
            reliable: false,
            late_join: 0,
            shape: Some(shape),
            group: None,
        });
        by_topic.push(Some(specs.len() - 1));
    }
    for name in wanted {
        if !recording.topics.iter().any(|t| &t.topic == name) {
            return Err(format!(
                "the recording has no topic '{}'",
                crate::text::clean(name)
            ));
        }
    }
    if specs.is_empty() {
        return Err("nothing to play: the recording has no topic".to_owned());
    }
    Ok((specs, by_topic))
}

/// When `frame` is due, from the start of a round at `start` whose first frame was logged
/// at `first`.
fn due(frame: &Frame, first: u64, start: Instant, speed: f64) -> Instant {
    if speed <= 0.0 {
        return start;
    }
    let offset = frame.log_time.saturating_sub(first) as f64 / speed;
    start + Duration::from_nanos(offset.min(u64::MAX as f64) as u64)
}

/// Runs `llbus play`.
pub(crate) fn run(args: &Args) -> Result<(), String> {
    if !(args.speed >= 0.0 && args.speed.is_finite()) {
        return Err(format!(
            "--speed {}: give 0 or a positive number",
            args.speed
        ));
    }
    let bytes = std::fs::read(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", crate::text::path(&args.file)))?;
    let recording = llbus_record::read(&bytes);
    drop(bytes);
    if let Some(why) = &recording.cut_off {
        eprintln!(
            "llbus play: the recording is cut off ({}); playing what it holds",
            crate::text::clean(why)
        );
    }
    let (specs, by_topic) = exports(&recording, &args.topics)?;
    let frames: Vec<(usize, &Frame)> = recording
        .frames
        .iter()
        .filter_map(|f| Some((by_topic.get(f.topic).copied().flatten()?, f)))
        .collect();
    let psk = args.psk_file.as_deref().map(read_psk).transpose()?;
    let allow = match &args.allow {
        Some(list) => Some(Allowlist::parse(list.split(',')).map_err(|e| format!("--allow: {e}"))?),
        None => None,
    };
    let announce = (!args.no_announce).then_some(args.group);
    let mut link = Link::serve(args.bind, psk, allow, announce)?;
    let mut endpoint = link.publisher_endpoint(specs)?;
    let topic_ids: Vec<u64> = endpoint.exports().map(|e| e.topic_id).collect();
    let mut played = 0u64;
    let mut rounds = 0u64;
    if args.wait_subscriber {
        while !topic_ids
            .iter()
            .any(|&t| endpoint.destinations(t).next().is_some())
        {
            link.drive(&mut endpoint, &mut NoImports)?;
        }
    }
    let first = frames.first().map_or(0, |(_, f)| f.log_time);
    loop {
        let start = Instant::now();
        let mut next = 0;
        while next < frames.len() {
            let now = Instant::now();
            // Everything due goes now, topic by topic in runs, each run one batch.
            while let Some(&(export, frame)) = frames.get(next) {
                if due(frame, first, start, args.speed) > now {
                    break;
                }
                let run_end = frames[next..]
                    .iter()
                    .position(|&(e, f)| e != export || due(f, first, start, args.speed) > now)
                    .map_or(frames.len(), |k| next + k);
                let run = frames[next..run_end].iter().map(|(_, f)| f.data.as_slice());
                link.publish(&mut endpoint, export, run);
                played += (run_end - next) as u64;
                next = run_end;
            }
            link.drive(&mut endpoint, &mut NoImports)?;
        }
        rounds += 1;
        if !args.repeat {
            break;
        }
    }
    // A second of heartbeats tells the subscribers the last sequence number (a lost tail shows
    // as lost), then the subscriptions end with the player.
    let grace = Instant::now() + Duration::from_secs(1);
    while Instant::now() < grace {
        link.drive(&mut endpoint, &mut NoImports)?;
    }
    println!(
        "PLAYED messages={played} topics={} rounds={rounds}",
        topic_ids.len()
    );
    Ok(())
}
