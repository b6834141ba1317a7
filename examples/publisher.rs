//! A counter published over UDP: a feed actor publishes a counter topic at a fixed rate and a
//! network bridge serves it to remote subscribers (run `subscriber` to receive it). Prints a line
//! a second (published, subscribers) and the bus's report at the end.
//!
//! ```text
//! cargo run --release --example publisher -- [--bind ADDR] [--rate MSGS_PER_S] [--count N] ...
//! cargo run --release --example publisher -- --help
//! ```
//!
//! `--help` describes every flag. By default the feed and the bridge take turns on one thread
//! (backoff idle): on a two-core machine with a subscriber process beside it that is as fast as
//! spinning and leaves the cores alone when idle (docs/PERFORMANCE.md, "The examples as a user runs
//! them"); `--split` gives each its own thread, and `--idle` picks how the threads wait. With
//! `--announce` the bridge announces the counter on the discovery group, for
//! `subscriber --discover` and `llbus topics`; with `--multicast GROUP:PORT` its data goes to that
//! group once for every subscriber that receives it (the others get unicast).
//!
//! Ctrl-C or SIGTERM stops the bus gracefully (`RunningBus::stop_on_signals`): the report is
//! printed and the counters file removed; a second signal ends the process at once. What the
//! libraries log goes to stderr (warnings by default; `RUST_LOG=info` for more).
//!
//! In the default format each message is `Counter { n, sent_ns }`, `sent_ns` being
//! `CLOCK_REALTIME` when the feed published it, so the subscriber can print one-way latency.
//!
//! With `--transport zenoh` (a build with `--features zenoh`) the counter goes out through the
//! llbus-zenoh gateway on key `llbus/demo.counter` instead of the bridge:
//!
//! ```text
//! cargo run --release --features zenoh --example publisher -- --transport zenoh \
//!     --zenoh-listen tcp/127.0.0.1:7447 --count 10000 --wait-subscriber [--zenoh-encoding json]
//! ```

use examples::messages::{Count, Counter};
use examples::{cli, payload};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use cli::{Compat, IdleArg, Transport, ZenohArgs};
use llbus::{Actor, ActorBuilder, Backpressure, Bus, Context, Idle, Message, Out, Setup};
use llbus_net::{realtime_ns, Bridge, BridgeConfig};

/// Messages published in one tick at most (a catch-up after the thread was descheduled).
const BURST: u64 = 1024;
/// The feed-to-exporter ring when they share a thread: four bursts.
const RING: usize = 4 * BURST as usize;

/// What the feed shares with `main`.
#[derive(Default)]
struct Shared {
    /// Set by `main` once the feed may start (at once, or at the first subscription request).
    go: AtomicBool,
    /// Messages published so far.
    published: AtomicU64,
    /// Set once `--count` messages are published.
    done: AtomicBool,
}

/// Publishes `make(n, now, size)` for n = 0, 1, 2, ... at `rate` a second, up to `count`.
struct Feed<T> {
    out: Out<T>,
    make: fn(u64, i64, usize) -> T,
    size: usize,
    rate: u64,
    count: Option<u64>,
    sent: u64,
    started: Option<Instant>,
    shared: Arc<Shared>,
}

impl<T: Message + Clone> Actor for Feed<T> {
    type In = ();

    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if !self.shared.go.load(Ordering::Acquire) || self.shared.done.load(Ordering::Relaxed) {
            return;
        }
        let started = *self.started.get_or_insert(ctx.now());
        let due = if self.rate == 0 {
            self.sent + BURST
        } else {
            let elapsed = ctx.now().saturating_duration_since(started).as_nanos();
            // The first message goes at once, then one every 1/rate seconds.
            u64::try_from(elapsed * u128::from(self.rate) / 1_000_000_000).unwrap_or(u64::MAX) + 1
        };
        let mut target = due.min(self.sent + BURST);
        if let Some(count) = self.count {
            target = target.min(count);
        }
        while self.sent < target {
            let msg = (self.make)(self.sent, realtime_ns(), self.size);
            ctx.publish(self.out, msg);
            self.sent += 1;
        }
        self.shared.published.store(self.sent, Ordering::Relaxed);
        if self.count == Some(self.sent) {
            self.shared.done.store(true, Ordering::Release);
        }
    }
}

/// Publishes a counter topic over UDP (or shared memory) for the `subscriber` example.
#[derive(Parser, Debug)]
#[command(name = "publisher", version, about, allow_negative_numbers = true)]
struct Args {
    /// The topic's name [default: the counter's own, demo.counter]. The whole program runs
    /// the counter under it (the bus's remap): the bridge, shared memory and zenoh carry that
    /// name and its id. Not with --compat, whose format has no topic names.
    #[arg(long, value_name = "NAME", value_parser = cli::parse_topic, conflicts_with = "compat")]
    topic: Option<llbus::TopicName>,
    /// Where the bridge listens for subscriptions (in --compat mode: that format's socket).
    #[arg(long, default_value = "127.0.0.1:7000", value_name = "ADDR")]
    bind: SocketAddr,
    /// Messages a second; 0 publishes as fast as the bus takes them.
    #[arg(long, default_value_t = 1000, value_name = "MSGS_PER_S")]
    rate: u64,
    /// Stop after N messages and a grace period (`--grace-ms`) in which heartbeats tell
    /// subscribers the last sequence number [default: unlimited, until Ctrl-C].
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Serve an i64 counter in the ll-udp-pubsub v0.1 format instead (16-byte datagrams, `data`
    /// then `sent_ts`), so ll-udp-pubsub's own subscribers can receive it.
    #[arg(long, value_enum)]
    compat: Option<Compat>,
    /// The networks that may subscribe, comma-separated, e.g. 10.0.0.0/8
    /// [default: loopback only, 127.0.0.0/8,::1/128].
    #[arg(long, value_name = "CIDRS", value_parser = cli::parse_allow)]
    allow: Option<llbus_net::Allowlist>,
    /// Start counting only once the first subscriber is admitted (nothing is published into
    /// the void).
    #[arg(long)]
    wait_subscriber: bool,
    /// With --count, how long the publisher keeps running after the last message. Over native
    /// UDP its bridge's heartbeats (ten a second) tell subscribers the last sequence number, NAKs
    /// are still answered, and it ends sooner once every subscriber it had has left (a
    /// subscriber that stops cleanly unsubscribes); --compat has no heartbeats.
    #[arg(long = "grace-ms", default_value_t = 1000, value_name = "MS")]
    grace_ms: u64,
    /// Forget a subscriber not heard from for S seconds [default: 60]; subscribers renew every
    /// second, and one that stops cleanly unsubscribes at once.
    #[arg(long = "subscriber-timeout-s", value_name = "S", value_parser = cli::parse_secs)]
    subscriber_timeout: Option<Duration>,
    /// How the bus threads wait when they have nothing to do.
    #[arg(long, value_enum, default_value_t = IdleArg::Backoff)]
    idle: IdleArg,
    /// Run the feed and the bridge on a thread each instead of taking turns on one (on a
    /// two-core machine with `--idle spin` that is four spinning threads with the subscriber:
    /// milliseconds of latency).
    #[arg(long)]
    split: bool,
    /// A pre-shared key (64 hex digits): every datagram is sealed with the replay-resistant
    /// MAC, and unsealed or replayed ones are dropped. The subscriber needs the same key.
    #[arg(long, value_name = "HEX64", value_parser = cli::parse_psk)]
    psk: Option<[u8; 32]>,
    /// Export the counter as a reliable topic: the last 1024 messages are kept and
    /// retransmitted to a subscriber (started with --reliable too) that NAKs a gap.
    #[arg(long)]
    reliable: bool,
    /// Each message carries a payload of BYTES bytes derived from its counter value, which the
    /// subscriber checks. A message larger than a datagram is sent as fragments (up to 16 MiB);
    /// with --reliable a lost fragment is retransmitted alone, and the history holds at least
    /// four messages' fragments.
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    size: usize,
    /// The most subscribers the topic serves [default: 64].
    #[arg(long, value_name = "N")]
    subscribers_per_topic: Option<usize>,
    /// The most subscriber slots of the topic one host (IP address, any port) may hold
    /// [default: 4].
    #[arg(long, value_name = "N")]
    subscribers_per_host: Option<usize>,
    /// With --reliable: the bytes per second retransmitted to one subscriber host, all its
    /// ports together, late-join bursts included [default: 64 MiB/s]; the burst is a
    /// sixteenth of it.
    #[arg(long, value_name = "BYTES_PER_S")]
    retransmit_rate: Option<u64>,
    /// udp: through the network bridge; shm: through shared memory (llbus-ipc channel
    /// `demo.counter` in this user's channel directory) to a `subscriber --transport shm` of the
    /// same user on this host.
    #[arg(long, value_enum, default_value_t = Transport::Udp)]
    transport: Transport,
    /// Announce the counter on the discovery group GROUP:PORT (so that `subscriber --discover`
    /// and `llbus topics` find it) [default group: 239.255.76.76:7476].
    #[arg(long, value_name = "GROUP:PORT", num_args = 0..=1,
          default_missing_value = "239.255.76.76:7476", conflicts_with = "compat")]
    announce: Option<SocketAddr>,
    /// Also send the counter's data to multicast group GROUP:PORT: one datagram per batch for
    /// every subscriber that receives the group, unicast to the others.
    #[arg(long, value_name = "GROUP:PORT", conflicts_with = "compat")]
    multicast: Option<SocketAddr>,
    #[command(flatten)]
    zenoh: ZenohArgs,
}

/// The thread the example's actors share unless `--split`.
const GROUP: &str = "publisher";

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

fn main() -> std::process::ExitCode {
    examples::logger();
    let args = Args::parse();
    if args.reliable && args.compat.is_some() {
        eprintln!("publisher: error: --reliable needs the native format (not --compat)");
        return std::process::ExitCode::from(2);
    }
    if args.transport == Transport::Zenoh && (args.compat.is_some() || args.reliable) {
        eprintln!("publisher: error: --transport zenoh carries the native counter only (no --compat, no --reliable: zenoh's own reliability applies)");
        return std::process::ExitCode::from(2);
    }
    #[cfg(not(feature = "zenoh"))]
    if args.transport == Transport::Zenoh {
        eprintln!("publisher: error: {}", cli::NO_ZENOH);
        return std::process::ExitCode::from(2);
    }
    cli::report_errors("publisher", || run(&args))
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let compat = args.compat.is_some();
    let shm_transport = args.transport == Transport::Shm;
    let zenoh_transport = args.transport == Transport::Zenoh;

    let shared = Arc::new(Shared::default());
    shared.go.store(!args.wait_subscriber, Ordering::Release);
    // Ticks at the message interval, but no faster than 10 us and no slower than 1 ms (as fast
    // as possible, `--rate 0`, is the fastest).
    let tick = Duration::from_nanos(1_000_000_000u64.checked_div(args.rate).unwrap_or(0))
        .clamp(Duration::from_micros(10), Duration::from_millis(1));

    let mut bus = Bus::builder();
    // The counter's topic as this program runs it: `--topic` renames it everywhere.
    let counter_topic = args.topic.as_ref().map_or(Counter::TOPIC, |t| t.as_str());
    if let Some(name) = &args.topic {
        bus.remap(Counter::TOPIC, name.as_str());
    }
    if !args.split {
        bus.group(GROUP).idle(Idle::from(args.idle));
    }
    let mut config = BridgeConfig::default();
    if let Some(timeout) = args.subscriber_timeout {
        config.subscriber_timeout = timeout;
    }
    if let Some(allow) = &args.allow {
        config.allow = allow.clone();
    }
    config.psk = args.psk;
    config.reliable = payload::reliable_config(Some(args.size));
    if let Some(n) = args.subscribers_per_topic {
        config.subscribers_per_topic = n;
    }
    if let Some(n) = args.subscribers_per_host {
        config.subscribers_per_host = n;
    }
    if let Some(rate) = args.retransmit_rate {
        config.reliable.retransmit_rate = (rate, rate / 16);
    }
    if let Some(group) = args.announce {
        config.discovery = Some(llbus_net::DiscoveryConfig {
            group: Some(group),
            ..llbus_net::DiscoveryConfig::default()
        });
    }
    let bridge = if compat {
        // The native socket is unused in compat mode: bind it to any port of the same address.
        Bridge::bind_with(SocketAddr::new(args.bind.ip(), 0), config)?
            .name("bridge")
            .export_compat::<Count>(args.bind)?
    } else if let (true, Some(group)) = (args.reliable, args.multicast) {
        Bridge::bind_with(args.bind, config)?
            .name("bridge")
            .export_reliable_multicast::<Counter>(group)
    } else if args.reliable {
        Bridge::bind_with(args.bind, config)?
            .name("bridge")
            .export_reliable::<Counter>()
    } else if let Some(group) = args.multicast {
        Bridge::bind_with(args.bind, config)?
            .name("bridge")
            .export_multicast::<Counter>(group)
    } else {
        Bridge::bind_with(args.bind, config)?
            .name("bridge")
            .export::<Counter>()
    };
    // Sharing the feed's thread, the exporter can never wait for the feed (nor the feed for
    // it): its rings drop when full. They hold several ticks' worth (a tick publishes at most
    // `BURST`), and every turn of the exporter empties its share of them.
    let shm = if shm_transport {
        let export = llbus_ipc::ShmExport::<Counter, llbus_ipc::Bincode>::on(
            &llbus::Topic::of(),
            &llbus_ipc::ChannelConfig::default(),
        );
        let status = export.status();
        let export = place(bus.add(export), args);
        if !args.split {
            export
                .backpressure::<Counter>(Backpressure::DropNewest)
                .capacity::<Counter>(RING);
        }
        Some(status)
    } else if zenoh_transport {
        None
    } else {
        let bridge = place(bus.add(bridge), args);
        match (args.split, compat) {
            (true, _) => {}
            (false, true) => {
                bridge
                    .backpressure::<Count>(Backpressure::DropNewest)
                    .capacity::<Count>(RING);
            }
            (false, false) => {
                bridge
                    .backpressure::<Counter>(Backpressure::DropNewest)
                    .capacity::<Counter>(RING);
            }
        }
        None
    };
    let feed_shared = Arc::clone(&shared);
    let (rate, count, size) = (args.rate, args.count, args.size);
    if compat {
        let feed = bus.actor("feed", move |s: &mut Setup<'_>| Feed {
            out: s.output(),
            make: |n, _, _| Count(n as i64),
            size,
            rate,
            count,
            sent: 0,
            started: None,
            shared: Arc::clone(&feed_shared),
        });
        place(feed, args).tick_every(tick).publishes::<Count>();
    } else {
        let feed = bus.actor("feed", move |s: &mut Setup<'_>| Feed {
            out: s.output(),
            make: |n, sent_ns, size| Counter {
                n,
                sent_ns,
                payload: payload::fill(n, size),
            },
            size,
            rate,
            count,
            sent: 0,
            started: None,
            shared: Arc::clone(&feed_shared),
        });
        place(feed, args).tick_every(tick).publishes::<Counter>();
    }

    let (format, topic) = if compat {
        ("ll-udp-pubsub v0.1 (i64 counter)", Count::TOPIC)
    } else {
        ("native (wire version 3)", counter_topic)
    };
    let rate = match args.rate {
        0 => "as fast as possible".to_string(),
        r => format!("{r}/s"),
    };
    let count = args
        .count
        .map_or("unlimited".to_string(), |c| c.to_string());
    println!(
        "publisher: topic '{topic}' in {format} on {}, rate {rate}, count {count}{}",
        args.bind,
        args.announce
            .map(|g| format!(", announced on {g}"))
            .unwrap_or_default()
            + &args
                .multicast
                .map(|g| format!(", data to multicast group {g}"))
                .unwrap_or_default()
    );
    #[cfg(feature = "zenoh")]
    let gateway_builder = zenoh_transport.then(|| {
        let mut gateway = llbus_zenoh::Gateway::builder();
        gateway.export::<Counter>(
            &mut bus,
            llbus_zenoh::Export::new()
                .encoding(args.zenoh.payload_encoding())
                .capacity(RING),
        );
        gateway
    });
    #[cfg_attr(not(feature = "zenoh"), allow(unused_mut))]
    let mut running = bus.start()?;
    // Ctrl-C or SIGTERM: the bus stops gracefully, and the report below is printed.
    running.stop_on_signals()?;
    #[cfg(feature = "zenoh")]
    let gateway = match gateway_builder {
        Some(g) => Some(g.start(&mut running, args.zenoh.zenoh_config()?)?),
        None => None,
    };
    #[cfg(feature = "zenoh")]
    if gateway.is_some() {
        println!(
            "publisher: through zenoh on key llbus/{} ({:?}), listening on {:?}, connecting to {:?}",
            counter_topic,
            args.zenoh.encoding,
            args.zenoh.listen,
            args.zenoh.connect
        );
    }
    // A zenoh put reaches the subscribers zenoh knows of when it is made: with
    // --wait-subscriber, counting starts once the gateway's key has one.
    #[cfg(feature = "zenoh")]
    let zenoh_matched = |wait: Duration| gateway.as_ref().is_some_and(|g| g.wait_matched(wait));
    #[cfg(not(feature = "zenoh"))]
    let zenoh_matched = |_: Duration| false;
    #[cfg(feature = "zenoh")]
    let zenoh_put = || gateway.as_ref().map_or(0, |g| g.counts().put);
    #[cfg(not(feature = "zenoh"))]
    let zenoh_put = || 0;

    let subscribers = format!("subscribers.{counter_topic}");
    let mut next_line = Instant::now() + Duration::from_secs(1);
    let mut done_at: Option<Instant> = None;
    let grace = Duration::from_millis(args.grace_ms);
    let mut last_published = 0;
    // Native UDP: a subscriber was admitted at some point (the grace ends once none is left).
    let mut had_subscriber = false;
    loop {
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        // Start once a subscriber is admitted (native: it proved its address with a cookie, which
        // takes a round trip or, if the challenge is lost, a renewal period); in compat mode,
        // which has no handshake, at its first Subscribe.
        let r = running.report();
        let subscribed = if let Some(shm) = &shm {
            shm.is_connected()
        } else if zenoh_transport {
            !shared.go.load(Ordering::Relaxed) && zenoh_matched(Duration::ZERO)
        } else if compat {
            metric(&r, "datagrams_in") > 0
        } else {
            metric(&r, &subscribers) > 0
        };
        if !shared.go.load(Ordering::Relaxed) && subscribed {
            println!("publisher: a subscriber is admitted; counting");
            shared.go.store(true, Ordering::Release);
        }
        if now >= next_line {
            next_line += Duration::from_secs(1);
            let r = running.report();
            let published = shared.published.load(Ordering::Relaxed);
            // The compat format has no subscriber gauge: its subscribers only ever send
            // `Subscribe` datagrams, so count those instead.
            let who = if zenoh_transport {
                format!("put on zenoh {}", zenoh_put())
            } else if compat {
                format!("subscribe datagrams {}", metric(&r, "datagrams_in"))
            } else {
                format!("subscribers {}", metric(&r, &subscribers))
            };
            println!(
                "published {published} (+{}), sent {}, {who}, no subscriber {}",
                published - last_published,
                metric(&r, "messages_out"),
                metric(&r, "no_subscriber"),
            );
            last_published = published;
        }
        if done_at.is_none() && shared.done.load(Ordering::Acquire) {
            done_at = Some(now);
            println!(
                "publisher: all {} published; serving for {} ms more",
                shared.published.load(Ordering::Relaxed),
                args.grace_ms
            );
        }
        let native_udp = shm.is_none() && !zenoh_transport && !compat;
        let subscribers_now = if native_udp {
            metric(&r, &subscribers)
        } else {
            0
        };
        had_subscriber |= subscribers_now > 0;
        let all_left = native_udp && had_subscriber && subscribers_now == 0;
        if done_at.is_some_and(|t| now - t >= grace || all_left) || running.is_stopping() {
            break;
        }
    }
    running.stop();
    let report = running.join()?;
    // Once the bus has exited, the gateway puts what its ring still held, then closes.
    #[cfg(feature = "zenoh")]
    if let Some(g) = gateway {
        // Zenoh sends in the background: let the last puts leave before the session closes.
        std::thread::sleep(Duration::from_millis(200));
        let c = g.close();
        let ring_dropped = report
            .edge(
                counter_topic,
                "feed",
                &format!("zenoh-export:{counter_topic}"),
            )
            .map_or(0, |e| e.dropped);
        println!(
            "ZENOH put={} put_failed={} ring_dropped={ring_dropped}",
            c.put, c.put_failed
        );
    }
    println!("\n{report}");
    println!(
        "PUBLISHED published={} messages_out={} datagrams_out={} no_subscriber={} too_large={} \
         send_dropped={} send_bad_destination={} bad_source={} bad_cookie={} rate_limited={} \
         challenges={} socket_failed={} replayed={} bad_mac={} retransmitted={} refused={}",
        shared.published.load(Ordering::Relaxed),
        metric(&report, "messages_out"),
        metric(&report, "datagrams_out"),
        metric(&report, "no_subscriber"),
        metric(&report, "too_large"),
        metric(&report, "send_dropped"),
        metric(&report, "send_bad_destination"),
        metric(&report, "drop.bad_source"),
        metric(&report, "drop.bad_cookie"),
        metric(&report, "drop.rate_limited"),
        metric(&report, "challenges"),
        metric(&report, "socket_failed"),
        metric(&report, "drop.replayed"),
        metric(&report, "drop.bad_mac"),
        metric(&report, "retransmitted"),
        metric(&report, "refused"),
    );
    if let Some(shm) = &shm {
        println!("SHM moved={} dropped={}", shm.moved(), shm.dropped());
    }
    Ok(())
}
