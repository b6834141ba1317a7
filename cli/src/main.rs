//! `llbus`: the command that reaches running llbus buses on this host.
//!
//! It reads the live counters files that every running bus publishes in shared memory (their
//! layout is defined once, in `llbus`: see `llbus::read_counters_file`), so it never slows a
//! bus down and needs no connection to it.
//!
//! - `llbus list`: the buses on this host, live or stale, with their users (`--prune` removes
//!   this user's stale files). Root sees every user's buses; others see their own.
//! - `llbus stat [BUS] [--watch] [--json] [--openmetrics]`: every edge, actor and named
//!   metric (bridge metrics among them) of one bus.
//! - `llbus top [BUS]`: a live full-screen view of the busiest edges (`q` quits).
//! - `llbus hz --topic NAME` and `llbus spy --topic NAME`: subscribe to a remote topic over
//!   the ll-udp wire protocol without its Rust type, and show its rate, sizes and sequence
//!   gaps, or every frame's header (and payload bytes with `--hex`, its fields with
//!   `--decode`).
//! - `llbus echo --topic NAME`: every message of a remote topic as a line of JSON, decoded
//!   from the schema its publisher serves. `--topic 'md.quote.*'`: every topic of the
//!   publisher that the pattern matches (asked of it once, at start, with a discovery query,
//!   which only a bridge with discovery on answers), each line naming its topic.
//! - `llbus record --topic NAME --output FILE.mcap`: remote topics into MCAP, one channel per
//!   topic, reliable exports through reliable imports; `--topic` may be a pattern too.
//! - `llbus play FILE.mcap --bind ADDR`: a recording served as a publisher, announced on the
//!   discovery group (`--no-announce`: not).
//! - `llbus topics [--watch] [--json]`: the topics bridges announce on the network (discovery,
//!   on every multicast-capable interface and loopback), with their fingerprints and
//!   publishers; the services they serve are listed as such.
//!
//! `hz`, `spy`, `echo` and `record` find the publisher of `--topic` by discovery (as `llbus
//! topics` does) unless `--publisher ADDR` names it; every command that speaks to bridges
//! takes their pre-shared key with `--psk-file`.
//! - `llbus call --publisher ADDR --service NAME '{"json": ...}'`: calls a remote service
//!   without its Rust types (its request and reply shapes come from its bridge) and prints the
//!   reply as one line of JSON; exit 1 when a call ends without its reply, 2 for a request
//!   that does not fit the service's request type.
#![deny(missing_docs)]

mod call;
mod echo;
mod pattern;
mod play;
mod record;
mod remote;
mod render;
mod select;
mod spy;
mod text;
mod top;
mod topics;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Reach running llbus buses, and the topics and services their bridges serve.
#[derive(Debug, Parser)]
#[command(name = "llbus", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The buses on this host (live and stale counters files).
    List {
        /// Prints JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Removes the files of buses whose process is gone.
        #[arg(long)]
        prune: bool,
    },
    /// The counters of one bus: edges, actors and their named metrics.
    Stat {
        /// The bus: its name, its process id, or its counters file. Needed when more than
        /// one bus runs.
        bus: Option<String>,
        /// Prints again every interval, with rates over the interval.
        #[arg(long)]
        watch: bool,
        /// The interval of `--watch`, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// With `--watch`: stops after this many prints.
        #[arg(long)]
        count: Option<u64>,
        /// Prints JSON.
        #[arg(long, conflicts_with = "openmetrics")]
        json: bool,
        /// Prints the OpenMetrics text format, for Prometheus.
        #[arg(long)]
        openmetrics: bool,
    },
    /// The rate, sizes and sequence gaps of a remote topic, every second.
    Hz {
        /// The topic's name (its id is derived from it, as the bus does).
        #[arg(required_unless_present = "topic", conflicts_with = "topic")]
        name: Option<String>,
        /// The topic's name (as the positional NAME).
        #[arg(long)]
        topic: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Every frame of a remote topic: its header, and its payload bytes with `--hex`.
    Spy {
        /// The topic's name.
        #[arg(long)]
        topic: String,
        /// Also prints each payload in hex.
        #[arg(long)]
        hex: bool,
        /// Also prints each message's fields, as JSON decoded from the schema the publisher
        /// serves.
        #[arg(long)]
        decode: bool,
        /// Stops after this many messages.
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Every message of a remote topic, or of the topics a pattern matches, as one line of
    /// JSON, decoded from the schema its publisher serves.
    Echo(echo::Args),
    /// Remote topics (named, or matched by a pattern) into an MCAP file, one channel each,
    /// with their schemas and the gaps the subscription saw.
    Record(record::Args),
    /// A recording served as a publisher, at the recorded pace or scaled.
    Play(play::Args),
    /// The topics bridges announce on the network (discovery): fingerprints and publishers,
    /// and the services they serve.
    Topics(topics::Options),
    /// Calls a service a remote bridge serves, with a request written as JSON, and prints the
    /// reply as one line of JSON (the types come from the server's bridge).
    Call(call::Args),
    /// A live full-screen view of a bus's busiest edges; `q` or Ctrl-C quits.
    Top {
        /// The bus (as for `stat`).
        bus: Option<String>,
        /// How often the view refreshes, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
}

/// Where a remote topic is published, and for how long to listen.
#[derive(Debug, clap::Args)]
struct Remote {
    /// The publisher's bridge address (where it takes subscriptions). Without it, the
    /// publisher is found by discovery: the one that announces the topic (see --group,
    /// --interface; with several, the first, and the others named).
    #[arg(long)]
    publisher: Option<std::net::SocketAddr>,
    #[command(flatten)]
    lookup: topics::Lookup,
    /// The publisher's pre-shared key: a file of 64 hex digits (or 32 bytes).
    #[arg(long)]
    psk_file: Option<std::path::PathBuf>,
    /// The topic's schema fingerprint (hex `0x..` or decimal); learned from the publisher if
    /// not given.
    #[arg(long, value_parser = parse_u64)]
    fingerprint: Option<u64>,
    /// Stops after this many seconds.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Gives up if the publisher has not admitted the subscription within this many seconds.
    #[arg(long, default_value_t = 10.0)]
    setup_timeout_s: f64,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("not a number: {e}"))
}

pub(crate) fn seconds(s: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|e| format!("{what}: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::List { json, prune } => list(json, prune),
        Command::Stat {
            bus,
            watch,
            interval_ms,
            count,
            json,
            openmetrics,
        } => stat(
            bus.as_deref(),
            watch,
            Duration::from_millis(interval_ms.max(10)),
            count,
            if json {
                render::Format::Json
            } else if openmetrics {
                render::Format::OpenMetrics
            } else {
                render::Format::Table
            },
        ),
        Command::Hz {
            name,
            topic,
            remote,
        } => match name.or(topic) {
            Some(topic) => hz(&topic, &remote),
            None => Err("give the topic's name".to_owned()),
        },
        Command::Spy {
            topic,
            hex,
            decode,
            count,
            remote,
        } => spy(&topic, hex, decode, count, &remote),
        Command::Echo(args) => echo::run(&args),
        Command::Record(args) => record::run(&args),
        Command::Play(args) => play::run(&args),
        Command::Topics(options) => topics::run(&options),
        Command::Call(args) => return call::main(&args),
        Command::Top { bus, interval_ms } => {
            top::run(bus.as_deref(), Duration::from_millis(interval_ms.max(50)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llbus: {}", text::clean(&e));
            ExitCode::FAILURE
        }
    }
}

fn list(json: bool, prune: bool) -> Result<(), String> {
    let buses = select::all()?;
    if prune {
        // Only this user's files: another user's stale bus is theirs to remove.
        let me = llbus::counters_dir();
        for b in buses
            .iter()
            .filter(|b| !b.live && b.path.parent() == Some(me.as_path()))
        {
            match std::fs::remove_file(&b.path) {
                Ok(()) => eprintln!("removed stale {}", text::path(&b.path)),
                Err(e) => eprintln!("cannot remove {}: {e}", text::path(&b.path)),
            }
        }
    }
    print!("{}", render::list(&buses, json));
    Ok(())
}

fn stat(
    bus: Option<&str>,
    watch: bool,
    interval: Duration,
    count: Option<u64>,
    format: render::Format,
) -> Result<(), String> {
    let found = select::one(bus)?;
    let mut prev = None;
    let mut printed = 0u64;
    loop {
        let snap = match select::read(&found.path, found.owner) {
            Ok(s) => s,
            // Gone while watching: the bus stopped.
            Err(e) if printed > 0 => {
                eprintln!("llbus: the bus stopped ({})", text::clean(&e));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let live = snap.is_live();
        print!(
            "{}",
            render::stat(&found.path, &snap, live, prev.as_ref(), format)
        );
        printed += 1;
        if !watch || count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        prev = Some(snap);
        std::thread::sleep(interval);
    }
}

impl Remote {
    /// The key, if a file names one.
    fn psk(&self) -> Result<Option<[u8; 32]>, String> {
        self.psk_file.as_deref().map(remote::read_psk).transpose()
    }

    /// The publisher of `topic`: as given, or found by discovery.
    fn publisher(&self, topic: &str) -> Result<std::net::SocketAddr, String> {
        if let Some(publisher) = self.publisher {
            return Ok(publisher);
        }
        let what = format!("'{}'", text::clean(topic));
        let timeout = seconds(self.setup_timeout_s, "--setup-timeout-s")?;
        let found = topics::find(&self.lookup, self.psk()?, &what, &|n| n == topic, timeout)?;
        remote::one_publisher(&found, &what)
    }
}

fn tap(
    topic: &str,
    publisher: std::net::SocketAddr,
    fingerprint: Option<u64>,
    remote: &Remote,
) -> Result<(spy::Tap, Option<std::time::Instant>), String> {
    let until = match remote.duration_s {
        Some(s) => Some(std::time::Instant::now() + seconds(s, "--duration-s")?),
        None => None,
    };
    let tap = spy::Tap::new(spy::Target {
        publisher,
        topic: topic.to_owned(),
        fingerprint,
        setup_timeout: seconds(remote.setup_timeout_s, "--setup-timeout-s")?,
        psk: remote.psk()?,
    })?;
    Ok((tap, until))
}

/// The last line of `hz` and `spy`: totals, for people and scripts.
fn summary(tag: &str, tap: &spy::Tap, messages: u64, bytes: u64) {
    let loss = tap.loss();
    println!(
        "{tag} messages={messages} bytes={bytes} lost={} duplicates={} reordered={} session_changes={} fingerprint={:#018x} malformed={} foreign={} dropped_frames={}",
        loss.lost,
        loss.duplicates,
        loss.reordered,
        loss.session_changes,
        tap.fingerprint,
        tap.counts.malformed,
        tap.counts.foreign,
        tap.counts.dropped_frames
    );
}

/// What `hz` has seen: in total, and in the current one-second window.
struct Rates {
    total: u64,
    total_bytes: u64,
    n: u64,
    bytes: u64,
    min: u64,
    max: u64,
    since: std::time::Instant,
}

impl Rates {
    fn add(&mut self, len: u64) {
        self.total += 1;
        self.total_bytes += len;
        self.n += 1;
        self.bytes += len;
        self.min = self.min.min(len);
        self.max = self.max.max(len);
    }

    /// Prints the window's figures once it is a second long, and starts the next.
    fn report(&mut self, topic: &str, lost: u64) {
        let dt = self.since.elapsed().as_secs_f64();
        if dt < 1.0 {
            return;
        }
        let avg = if self.n == 0 {
            0.0
        } else {
            self.bytes as f64 / self.n as f64
        };
        println!(
            "{topic}: {:.1} msg/s, {:.1} KB/s, size min/avg/max {}/{avg:.0}/{} B, lost {lost} so far",
            self.n as f64 / dt,
            self.bytes as f64 / dt / 1000.0,
            if self.n == 0 { 0 } else { self.min },
            self.max
        );
        self.n = 0;
        self.bytes = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.since = std::time::Instant::now();
    }
}

fn hz(topic: &str, remote: &Remote) -> Result<(), String> {
    let publisher = remote.publisher(topic)?;
    let (mut tap, until) = tap(topic, publisher, remote.fingerprint, remote)?;
    let rates = std::cell::RefCell::new(Rates {
        total: 0,
        total_bytes: 0,
        n: 0,
        bytes: 0,
        min: u64::MAX,
        max: 0,
        since: std::time::Instant::now(),
    });
    let lost = std::cell::Cell::new(0);
    tap.run(
        until,
        |_, payload| {
            let mut r = rates.borrow_mut();
            r.add(payload.len() as u64);
            r.report(topic, lost.get());
            true
        },
        |t| {
            lost.set(t.loss().lost);
            rates.borrow_mut().report(topic, lost.get());
        },
    )?;
    let r = rates.borrow();
    summary("HZ", &tap, r.total, r.total_bytes);
    Ok(())
}

fn spy(
    topic: &str,
    hex: bool,
    decode: bool,
    count: Option<u64>,
    remote: &Remote,
) -> Result<(), String> {
    let publisher = remote.publisher(topic)?;
    // With `--decode`, the schema's fingerprint is the one to subscribe with (no probe).
    let schema = if decode {
        let mut link = remote::Link::bind(publisher, remote.psk()?)?;
        let timeout = seconds(remote.setup_timeout_s, "--setup-timeout-s")?;
        link.schemas(&[topic.to_owned()], timeout)?
            .into_iter()
            .next()
    } else {
        None
    };
    let fingerprint = remote
        .fingerprint
        .or(schema.as_ref().map(|t| t.fingerprint));
    let (mut tap, until) = tap(topic, publisher, fingerprint, remote)?;
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut last: Option<(u64, u64)> = None; // session, seq
    tap.run(
        until,
        |h, payload| {
            n += 1;
            bytes += payload.len() as u64;
            let age_us = (llbus_net::realtime_ns() - h.timestamp_ns) as f64 / 1000.0;
            let gap = match last {
                Some((s, q)) if s == h.session && h.seq > q + 1 => {
                    format!("  GAP: {} missing", h.seq - q - 1)
                }
                Some((s, _)) if s != h.session => "  NEW SESSION".to_owned(),
                _ => String::new(),
            };
            last = Some((h.session, h.seq.max(last.map_or(0, |l| l.1))));
            println!(
                "FRAME topic={:#018x} fingerprint={:#018x} session={:#018x} seq={} len={} sent_ns={} age_us={age_us:.1}{gap}",
                h.topic_id, h.fingerprint, h.session, h.seq, payload.len(), h.timestamp_ns
            );
            if hex {
                print!("{}", spy::hex(payload));
            }
            if let Some(t) = &schema {
                match echo::json_line(payload, &t.shape) {
                    Ok(line) => println!("    {line}"),
                    Err(e) => println!("    undecodable: {}", text::clean(&e)),
                }
            }
            count.is_none_or(|c| n < c)
        },
        |_| {},
    )?;
    summary("SPY", &tap, n, bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `llbus --help` says what the command does: every subcommand is named in its text.
    #[test]
    fn the_top_level_help_names_every_command() {
        let mut cli = Cli::command();
        let help = cli.render_help().to_string();
        let about = cli.get_about().map(ToString::to_string).unwrap_or_default();
        for command in cli.get_subcommands().map(|c| c.get_name().to_owned()) {
            if command != "help" {
                assert!(about.contains(&command), "{command} is not in: {about}");
            }
        }
        assert!(help.starts_with(&about), "{help}");
    }
}
