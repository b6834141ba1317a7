//! Receives the `publisher` example's counter over UDP through a network bridge and prints what
//! arrived: messages received, gaps (lost), duplicates, reordered, invalid datagrams, publisher
//! restarts and one-way latency percentiles. Exits 0 once it has `--count` messages; exits 1 on
//! timeout and 3 if the publisher refuses the subscription for good (unknown topic, fingerprint
//! mismatch) or the bridge reports an error, with the reason on stderr. A publisher whose table
//! or topic is full is retried with backoff (printed as a warning).
//!
//! ```text
//! cargo run --release --example subscriber -- [--bind ADDR] [--publisher ADDR] [--count N] ...
//! cargo run --release --example subscriber -- --help
//! ```
//!
//! With `--discover` it needs no `--publisher`: it follows every publisher that announces the
//! counter (`publisher --announce`), all at once, and prints each as it is found or lost
//! (several publishers' counters interleave, so `out_of_order` then counts their mix).
//!
//! `--help` describes every flag. By default the bridge and the sink take turns on one thread
//! (backoff idle): on a two-core machine with a publisher process beside it that is as fast as
//! spinning and leaves the cores alone when idle (docs/PERFORMANCE.md, "The examples as a user runs
//! them"); `--split` gives each its own thread, and `--idle` picks how the threads wait. With
//! `--reliable` it exits 4 if any message could not be recovered (`unrecovered > 0`), arrived out
//! of order (`out_of_order > 0`) or corrupted (`corrupt > 0`, the `--size` content check).
//!
//! The last line is machine-readable: `RESULT received=.. lost=.. duplicates=.. reordered=..
//! stale=.. invalid=.. publisher_restarts=.. first=.. highest=.. ring_dropped=.. datagrams_in=..
//! bad_source=.. bad_nonce=.. replayed=.. bad_mac=.. unknown_session=.. resubscribes=.. control_duplicates=..
//! control_stale=.. send_dropped=.. errors=.. unrecovered=.. out_of_order=.. corrupt=.. incomplete=.. nak_sent=.. p50_us=.. p99_us=..
//! p999_us=.. max_us=..` (`out_of_order` counts counter values that did not exceed the one before)
//! (`first` and `highest` are the counter values that opened and lead the
//! current run of the publisher; `ring_dropped` counts messages the bridge could not hand to the
//! sink because its ring was full; the latency fields are `na` in compat mode).
//!
//! One-way latency compares the publisher's `CLOCK_REALTIME` with this host's, so across two
//! hosts it is only as good as their clock synchronisation.
//!
//! With `--transport zenoh` (a build with `--features zenoh`) the counter comes in through the
//! llbus-zenoh gateway from key `llbus/demo.counter`, in either encoding; the RESULT line is the
//! same, with `lost` the gateway's gaps by sequence number, `reordered` its late samples,
//! `invalid` its malformed and refused samples, `datagrams_in` the samples received, and a
//! mismatched fingerprint exiting 3 with the gateway's error:
//!
//! ```text
//! cargo run --release --features zenoh --example subscriber -- --transport zenoh \
//!     --zenoh-connect tcp/127.0.0.1:7447 --count 10000
//! ```

use examples::messages::{Count, Counter};
use examples::{cli, payload};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use cli::{Compat, IdleArg, Transport, ZenohArgs};
use hdrhistogram::Histogram;
use llbus::{Actor, ActorBuilder, Bus, Context, Idle, Message};
use llbus_net::{realtime_ns, Bridge, LatePolicy, LossCounts, SeqTracker, WINDOW};

/// What the sink saw, handed to `main` when the bus stops.
struct Summary {
    received: u64,
    /// Gaps, duplicates and reordering by counter value (the only source in compat mode).
    by_counter: LossCounts,
    /// The counter value that opened the current run of the publisher, and the highest since.
    first: Option<u64>,
    highest: Option<u64>,
    /// Counter values that did not exceed the previous one.
    out_of_order: u64,
    /// Messages whose payload failed the content check.
    corrupt: u64,
    latency_ns: Histogram<u64>,
}

/// What the sink shares with `main` while it runs.
struct Shared {
    received: AtomicU64,
    done: AtomicBool,
    summary: Mutex<Option<Summary>>,
}

/// Counts what arrives, tracks the counter values and records one-way latency.
struct Sink<T> {
    /// The counter value and, when the format carries it, the publisher's send time.
    read: fn(&T) -> (u64, Option<i64>),
    /// Whether a message's payload is intact (the `--size` content check).
    intact: fn(&T, Option<usize>) -> bool,
    size: Option<usize>,
    count: u64,
    /// Drop duplicate and stale copies. Only the compat format lets those through the bridge
    /// (native imports drop them by sequence number), so only compat mode asks for it.
    dedup: bool,
    received: u64,
    /// Counter values as sequence numbers (value + 1), one "session" per run of the publisher.
    tracker: SeqTracker,
    session: u64,
    first: Option<u64>,
    previous: Option<u64>,
    out_of_order: u64,
    corrupt: u64,
    latency_ns: Histogram<u64>,
    shared: Arc<Shared>,
}

impl<T> Sink<T> {
    fn new(
        read: fn(&T) -> (u64, Option<i64>),
        intact: fn(&T, Option<usize>) -> bool,
        size: Option<usize>,
        count: u64,
        dedup: bool,
        shared: Arc<Shared>,
    ) -> Self {
        Sink {
            read,
            intact,
            size,
            count,
            dedup,
            received: 0,
            tracker: SeqTracker::new(LatePolicy::Deliver),
            session: 1,
            first: None,
            previous: None,
            out_of_order: 0,
            corrupt: 0,
            latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("static histogram bounds are valid"),
            shared,
        }
    }
}

impl<T: Message + Clone> Actor for Sink<T> {
    type In = T;

    fn on_message(&mut self, msg: T, ctx: &mut Context<'_>) {
        let (n, sent_ns) = (self.read)(&msg);
        if !(self.intact)(&msg, self.size) {
            self.corrupt += 1;
        }
        if let Some(sent_ns) = sent_ns {
            let one_way = realtime_ns().saturating_sub(sent_ns).max(1);
            let _ = self.latency_ns.record(one_way as u64);
        }
        let seq = n.saturating_add(1);
        // A counter that falls back to the start (within one window of 0) from more than two
        // windows ahead means the publisher started counting again; one merely far behind (a
        // datagram reordered by more than the window: a link that stalls and then releases a
        // burst does that early in a stream too) is stale, and the tracker says so.
        if self
            .tracker
            .position()
            .is_some_and(|(_, highest)| seq <= WINDOW && seq.saturating_add(2 * WINDOW) < highest)
        {
            self.session += 1;
            self.first = None;
        }
        if self.previous.is_some_and(|p| n <= p) {
            self.out_of_order += 1;
        }
        self.previous = Some(n);
        let verdict = self.tracker.observe(self.session, seq);
        if self.dedup && !verdict.is_deliver() {
            return;
        }
        self.first.get_or_insert(n);
        self.received += 1;
        self.shared.received.store(self.received, Ordering::Relaxed);
        if self.received == self.count {
            self.shared.done.store(true, Ordering::Release);
            ctx.request_stop();
        }
    }

    fn on_stop(&mut self, _ctx: &mut Context<'_>) {
        let summary = Summary {
            received: self.received,
            by_counter: *self.tracker.counts(),
            first: self.first,
            highest: self.tracker.position().map(|(_, h)| h - 1),
            out_of_order: self.out_of_order,
            corrupt: self.corrupt,
            latency_ns: self.latency_ns.clone(),
        };
        *self
            .shared
            .summary
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(summary);
    }
}

/// Receives the `publisher` example's counter and reports loss, order and one-way latency.
#[derive(Parser, Debug)]
#[command(name = "subscriber", version, about, allow_negative_numbers = true)]
struct Args {
    /// The topic's name [default: the counter's own, demo.counter]. The whole program runs
    /// the counter under it (the bus's remap): the bridge, shared memory and zenoh carry that
    /// name and its id. Not with --compat, whose format has no topic names.
    #[arg(long, value_name = "NAME", value_parser = cli::parse_topic, conflicts_with = "compat")]
    topic: Option<llbus::TopicName>,
    /// This bridge's socket (in --compat mode: that format's socket).
    #[arg(long, default_value = "127.0.0.1:7001", value_name = "ADDR")]
    bind: SocketAddr,
    /// The publisher's bridge.
    #[arg(long, default_value = "127.0.0.1:7000", value_name = "ADDR")]
    publisher: SocketAddr,
    /// Messages to receive before exiting.
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// Give up when S seconds pass without a new message, or without the first one (exit 1).
    #[arg(long = "timeout-s", default_value = "10", value_name = "S", value_parser = cli::parse_secs)]
    timeout: Duration,
    /// Subscribe in the ll-udp-pubsub v0.1 format to an i64 counter. That format has no
    /// sequence numbers and no send time: gaps, duplicates and reordering are inferred from the
    /// counter values, and no latency is shown.
    #[arg(long, value_enum)]
    compat: Option<Compat>,
    /// How the bus threads wait when they have nothing to do.
    #[arg(long, value_enum, default_value_t = IdleArg::Backoff)]
    idle: IdleArg,
    /// Run the bridge and the sink on a thread each instead of taking turns on one.
    #[arg(long)]
    split: bool,
    /// The publisher's pre-shared key (64 hex digits).
    #[arg(long, value_name = "HEX64", value_parser = cli::parse_psk)]
    psk: Option<[u8; 32]>,
    /// Import the counter as a reliable topic (the publisher needs --reliable): gaps are NAKed
    /// and retransmitted, messages arrive in order.
    #[arg(long, conflicts_with = "compat")]
    reliable: bool,
    /// The payload size the publisher was given (its --size): every message's payload must be
    /// that long and carry the bytes derived from its counter value, else it counts as
    /// `corrupt`. Without it the content is checked at whatever length arrives. With
    /// --reliable, the reorder buffer holds at least four messages' fragments.
    #[arg(long, value_name = "BYTES")]
    size: Option<usize>,
    /// udp: through the network bridge; shm: from a `publisher --transport shm` on this host
    /// through shared memory (llbus-ipc channel `demo.counter` in this user's channel directory).
    #[arg(long, value_enum, default_value_t = Transport::Udp)]
    transport: Transport,
    /// Find the publishers by their announcements on the discovery group GROUP:PORT instead of
    /// --publisher (they need --announce), receiving from all of them at once, and print each
    /// one found [default group: 239.255.76.76:7476].
    #[arg(long, value_name = "GROUP:PORT", num_args = 0..=1,
          default_missing_value = "239.255.76.76:7476", conflicts_with_all = ["compat", "publisher"])]
    discover: Option<SocketAddr>,
    /// Which networks' announcements `--discover` believes, comma-separated CIDRs [default:
    /// loopback only]; name the publishers' networks to discover them on other hosts.
    #[arg(long, value_name = "CIDRS", value_parser = cli::parse_allow)]
    allow: Option<llbus_net::Allowlist>,
    #[command(flatten)]
    zenoh: ZenohArgs,
}

/// The thread the example's actors share unless `--split`.
const GROUP: &str = "subscriber";

/// Places an actor: on the shared thread, or on a thread of its own with the idle strategy.
fn place<'b, A: Actor>(actor: ActorBuilder<'b, A>, args: &Args) -> ActorBuilder<'b, A> {
    if args.split {
        actor.idle(args.idle.into())
    } else {
        actor.group(GROUP)
    }
}

fn metric(report: &llbus::Report, name: &str) -> u64 {
    report
        .actor("bridge")
        .and_then(|a| a.metric(name))
        .unwrap_or(0)
}

/// Datagrams the bridge dropped as malformed or unexpected: the sum of its `drop.*` figures.
fn invalid(report: &llbus::Report) -> u64 {
    report
        .actor("bridge")
        .map(|a| {
            a.metrics
                .iter()
                .filter(|(name, _)| name.starts_with("drop."))
                .map(|(_, v)| v)
                .sum()
        })
        .unwrap_or(0)
}

/// Prints the publishers discovery found, lost or established since `shown`.
fn print_discovered(shown: &mut Vec<llbus_net::Discovered>, now: Vec<llbus_net::Discovered>) {
    if *shown == now {
        return;
    }
    for d in now.iter().filter(|d| !shown.contains(d)) {
        println!(
            "discovered: publisher {} (session {:#018x}) of topic '{}'{}",
            d.publisher,
            d.session,
            d.topic,
            if d.established {
                ", subscribed"
            } else {
                ", subscribing"
            }
        );
    }
    for d in shown
        .iter()
        .filter(|d| !now.iter().any(|n| n.publisher == d.publisher))
    {
        println!("discovered: publisher {} is gone", d.publisher);
    }
    *shown = now;
}

fn main() -> std::process::ExitCode {
    examples::logger();
    let args = Args::parse();
    if args.transport == Transport::Zenoh && (args.compat.is_some() || args.reliable) {
        eprintln!("subscriber: error: --transport zenoh carries the native counter only (no --compat, no --reliable)");
        return std::process::ExitCode::from(2);
    }
    #[cfg(not(feature = "zenoh"))]
    if args.transport == Transport::Zenoh {
        eprintln!("subscriber: error: {}", cli::NO_ZENOH);
        return std::process::ExitCode::from(2);
    }
    cli::report_errors("subscriber", || run(&args))
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let compat = args.compat.is_some();
    let shared = Arc::new(Shared {
        received: AtomicU64::new(0),
        done: AtomicBool::new(false),
        summary: Mutex::new(None),
    });

    let mut bus = Bus::builder();
    // The counter's topic as this program runs it: `--topic` renames it everywhere.
    let counter_topic = args.topic.as_ref().map_or(Counter::TOPIC, |t| t.as_str());
    if let Some(name) = &args.topic {
        bus.remap(Counter::TOPIC, name.as_str());
    }
    if !args.split {
        bus.group(GROUP).idle(Idle::from(args.idle));
    }
    let bridge = if compat {
        // The compat import has a socket of its own at `--bind`; the native socket is unused.
        Bridge::bind(SocketAddr::new(args.bind.ip(), 0))?
            .name("bridge")
            .import_compat::<Count>(args.bind, args.publisher)?
    } else {
        let config = llbus_net::BridgeConfig {
            psk: args.psk,
            reliable: payload::reliable_config(args.size),
            discovery: args.discover.map(|group| llbus_net::DiscoveryConfig {
                group: Some(group),
                ..llbus_net::DiscoveryConfig::default()
            }),
            allow: args
                .allow
                .clone()
                .unwrap_or_else(llbus_net::Allowlist::loopback),
            ..llbus_net::BridgeConfig::default()
        };
        let bridge = Bridge::bind_with(args.bind, config)?.name("bridge");
        match (args.discover.is_some(), args.reliable) {
            (true, true) => bridge.discover_reliable::<Counter>(),
            (true, false) => bridge.discover::<Counter>(),
            (false, true) => bridge.import_reliable::<Counter>(args.publisher),
            (false, false) => bridge.import::<Counter>(args.publisher),
        }
    };
    let status = bridge.status();
    #[cfg(feature = "zenoh")]
    let gateway_builder = (args.transport == Transport::Zenoh).then(|| {
        let mut gateway = llbus_zenoh::Gateway::builder();
        gateway.import::<Counter>(&mut bus, llbus_zenoh::Import::new());
        gateway
    });
    if args.transport == Transport::Zenoh {
        // The gateway's import publishes into the sink from zenoh's threads.
    } else if args.transport == Transport::Shm {
        let import = llbus_ipc::ShmImport::<Counter, llbus_ipc::Bincode>::on(
            &llbus::Topic::of(),
            &llbus_ipc::ChannelConfig::default(),
        );
        place(bus.add(import), args);
    } else {
        place(bus.add(bridge), args);
    }
    let (count, sink_shared) = (args.count, Arc::clone(&shared));
    // The bridge never waits for the sink: a message that finds the sink's ring full is dropped
    // (and counted as `ring_dropped`). A deep ring (about 13 s at 5000/s) rides out a sink
    // thread descheduled on a busy machine.
    const SINK_RING: usize = 1 << 16;
    if compat {
        let read: fn(&Count) -> (u64, Option<i64>) = |c| (c.0 as u64, None);
        let sink = bus.actor("sink", move |_: &mut llbus::Setup<'_>| {
            Sink::new(
                read,
                |_, _| true,
                None,
                count,
                true,
                Arc::clone(&sink_shared),
            )
        });
        place(sink, args)
            .default_capacity(SINK_RING)
            .subscribes::<Count>();
    } else {
        let read: fn(&Counter) -> (u64, Option<i64>) = |c| (c.n, Some(c.sent_ns));
        let intact: fn(&Counter, Option<usize>) -> bool =
            |c, size| payload::check(c.n, &c.payload, size);
        let size = args.size;
        let sink = bus.actor("sink", move |_: &mut llbus::Setup<'_>| {
            Sink::new(read, intact, size, count, false, Arc::clone(&sink_shared))
        });
        let sink = place(sink, args)
            .default_capacity(SINK_RING)
            .subscribes::<Counter>();
        if !args.split {
            // The shm import shares the sink's thread: it must not wait for it either.
            sink.backpressure::<Counter>(llbus::Backpressure::DropNewest);
        }
    }

    let format = if compat {
        "ll-udp-pubsub v0.1 (i64 counter)"
    } else {
        "native (wire version 3)"
    };
    let from = match args.discover {
        Some(group) => format!("publishers discovered on {group}"),
        None => format!("publisher {}", args.publisher),
    };
    println!(
        "subscriber: {format} on {}, {from}, waiting for {} messages (timeout {:?})",
        args.bind, args.count, args.timeout
    );
    #[cfg_attr(not(feature = "zenoh"), allow(unused_mut))]
    let mut running = bus.start()?;
    #[cfg(feature = "zenoh")]
    let gateway = match gateway_builder {
        Some(g) => {
            let g = g.start(&mut running, args.zenoh.zenoh_config()?)?;
            println!(
                "subscriber: through zenoh from key llbus/{}, listening on {:?}, connecting to {:?}",
                counter_topic,
                args.zenoh.listen,
                args.zenoh.connect
            );
            Some(g)
        }
        None => None,
    };
    #[cfg(feature = "zenoh")]
    let zenoh_errors = || gateway.as_ref().map_or(Vec::new(), |g| g.errors());
    #[cfg(not(feature = "zenoh"))]
    let zenoh_errors = Vec::<String>::new;

    let started = Instant::now();
    let mut next_line = started + Duration::from_secs(1);
    // The last time a message arrived (or the start): `--timeout-s` counts from it, so a long
    // stream that keeps arriving never times out.
    let (mut seen, mut progress_at) = (0, started);
    let mut found = Vec::new();
    let outcome = loop {
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        if args.discover.is_some() {
            print_discovered(&mut found, status.discovered());
        }
        if shared.done.load(Ordering::Acquire) {
            break Ok(());
        }
        let errors = status.errors();
        if !errors.is_empty() {
            break Err((3, format!("the bridge reported: {}", errors.join("; "))));
        }
        let errors = zenoh_errors();
        if !errors.is_empty() {
            break Err((
                3,
                format!("the zenoh gateway reported: {}", errors.join("; ")),
            ));
        }
        let received = shared.received.load(Ordering::Relaxed);
        if received != seen {
            (seen, progress_at) = (received, now);
        }
        if now - progress_at >= args.timeout {
            let from = match args.transport {
                Transport::Udp => format!(
                    "the publisher at {}: is it running there, in the same format (--compat)?",
                    args.publisher
                ),
                Transport::Shm => format!(
                    "the shared-memory channel of {}: is a publisher with --transport shm running?",
                    counter_topic
                ),
                Transport::Zenoh => {
                    "zenoh: is a publisher with --transport zenoh running, and does --zenoh-connect reach it?"
                        .to_owned()
                }
            };
            break Err((
                1,
                format!(
                    "no message for {:?} ({received} of {} received) from {from}",
                    args.timeout, args.count,
                ),
            ));
        }
        if now >= next_line {
            next_line += Duration::from_secs(1);
            let r = running.report();
            println!(
                "received {}, datagrams {}, lost {}, duplicates {}, reordered {}, invalid {}",
                shared.received.load(Ordering::Relaxed),
                metric(&r, "datagrams_in"),
                metric(&r, "lost"),
                metric(&r, "duplicates"),
                metric(&r, "reordered"),
                invalid(&r),
            );
        }
    };
    running.stop();
    let report = running.join()?;
    println!("\n{report}");
    // The gateway's figures stand in for the bridge's: what zenoh delivered, what the gateway
    // counted lost by sequence number, late, malformed or refused.
    // (lost, late, invalid, received, errors)
    #[cfg(feature = "zenoh")]
    let zenoh = gateway.map(|g| {
        let errors = g.errors();
        let c = g.close();
        for e in &errors {
            println!("zenoh gateway error: {e}");
        }
        (
            c.lost,
            c.late,
            c.malformed + c.refused,
            c.received,
            errors.len(),
        )
    });
    #[cfg(not(feature = "zenoh"))]
    let zenoh: Option<(u64, u64, u64, u64, usize)> = None;

    let summary = shared
        .summary
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .ok_or("the sink never stopped")?;
    // The native format carries sequence numbers and sessions: the bridge's figures. Compat carries neither:
    // the sink's, from the counter values.
    let (lost, duplicates, reordered, stale, restarts) = if let Some((lost, late, ..)) = zenoh {
        (lost, 0, late, 0, 0)
    } else if compat {
        let c = &summary.by_counter;
        (
            c.lost,
            c.duplicates,
            c.reordered,
            c.stale,
            c.session_changes,
        )
    } else {
        (
            metric(&report, "lost"),
            metric(&report, "duplicates"),
            metric(&report, "reordered"),
            metric(&report, "stale"),
            metric(&report, "publisher_restarts"),
        )
    };
    let invalid = zenoh.map_or_else(|| invalid(&report), |z| z.2);
    let unrecovered = metric(&report, "unrecovered");
    let topic = if compat { Count::TOPIC } else { counter_topic };
    let from = if zenoh.is_some() {
        format!("zenoh-import:{topic}")
    } else {
        "bridge".to_owned()
    };
    let ring_dropped = report.edge(topic, &from, "sink").map_or(0, |e| e.dropped);
    let h = &summary.latency_ns;
    let us = |q: f64| -> String {
        if h.is_empty() {
            "na".into()
        } else {
            (h.value_at_quantile(q) / 1000).to_string()
        }
    };
    let max_us = if h.is_empty() {
        "na".into()
    } else {
        (h.max() / 1000).to_string()
    };
    let opt = |v: Option<u64>| v.map_or("na".to_string(), |v| v.to_string());
    println!(
        "received {} messages: lost {lost}, duplicates {duplicates}, reordered {reordered}, \
         stale {stale}, invalid datagrams {invalid}, publisher restarts {restarts}",
        summary.received
    );
    if h.is_empty() {
        println!("one-way latency: not available (the compat import does not pass sent_ts on)");
    } else {
        println!(
            "one-way latency over {} messages: p50 {} us, p99 {} us, p99.9 {} us, max {max_us} us",
            h.len(),
            us(0.50),
            us(0.99),
            us(0.999),
        );
    }
    for e in status.errors() {
        println!("bridge error: {e}");
    }
    for w in status.warnings() {
        println!("bridge warning: {w}");
    }
    println!(
        "RESULT received={} lost={lost} duplicates={duplicates} reordered={reordered} stale={stale} \
         invalid={invalid} publisher_restarts={restarts} first={} highest={} \
         ring_dropped={ring_dropped} datagrams_in={} bad_source={} bad_nonce={} replayed={} \
         bad_mac={} unknown_session={} resubscribes={} control_duplicates={} control_stale={} \
         send_dropped={} errors={} unrecovered={unrecovered} out_of_order={} corrupt={} \
         incomplete={} nak_sent={} bad_token={} unconfirmed={} counter_lost={} \
         p50_us={} p99_us={} p999_us={} max_us={max_us}",
        summary.received,
        opt(summary.first),
        opt(summary.highest),
        zenoh.map_or_else(|| metric(&report, "datagrams_in"), |z| z.3),
        metric(&report, "drop.bad_source"),
        metric(&report, "drop.bad_nonce"),
        metric(&report, "drop.replayed"),
        metric(&report, "drop.bad_mac"),
        metric(&report, "unknown_session"),
        metric(&report, "resubscribes"),
        metric(&report, "control_duplicates"),
        metric(&report, "control_stale"),
        metric(&report, "send_dropped"),
        status.errors().len() + zenoh.map_or(0, |z| z.4),
        summary.out_of_order,
        summary.corrupt,
        metric(&report, "drop.incomplete"),
        metric(&report, "nak_sent"),
        metric(&report, "drop.bad_token"),
        metric(&report, "unconfirmed"),
        summary.by_counter.lost,
        us(0.50),
        us(0.99),
        us(0.999),
    );
    if let Err((code, why)) = outcome {
        eprintln!("subscriber: {why}");
        std::process::exit(code);
    }
    if args.reliable && (unrecovered > 0 || summary.out_of_order > 0 || summary.corrupt > 0) {
        eprintln!(
            "subscriber: reliable topic: {unrecovered} messages unrecovered, {} out of order, \
             {} corrupted",
            summary.out_of_order, summary.corrupt
        );
        std::process::exit(4);
    }
    Ok(())
}
