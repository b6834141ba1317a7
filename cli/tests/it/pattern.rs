//! `llbus echo` and `llbus record` with a `--topic` pattern, against a bridge of this process
//! that exports two venues of one type (`md.quote.nyse`, `md.quote.nasdaq`) and a trade
//! (`md.trade.nyse`), with discovery on by unicast only (no multicast needed): the command
//! asks the bridge which topics it serves, subscribes to those that match, and prints (or
//! records) each under its own name and shape, and nothing of the others. A pattern that
//! matches nothing, a bad pattern, and a bridge with discovery off fail at once, saying why.

use std::net::SocketAddr;
use std::process::Output;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup, Topic};
use llbus_net::{Bridge, DiscoveryConfig};
use serde::{Deserialize, Serialize};
use tests::cli::CountersDir;

use crate::llbus;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "pattern.quote")]
struct Quote {
    n: u64,
    venue: String,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "pattern.trade")]
struct Trade {
    n: u64,
    qty: u32,
}

const NYSE: &str = "md.quote.nyse";
const NASDAQ: &str = "md.quote.nasdaq";
const TRADE: &str = "md.trade.nyse";

fn topic<T: Message>(name: &str) -> Topic<T> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Publishes, every tick, the next quote of each venue and the next trade.
struct Feed {
    nyse: Out<Quote>,
    nasdaq: Out<Quote>,
    trade: Out<Trade>,
    next: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let n = self.next;
        for (out, venue) in [(self.nyse, "nyse"), (self.nasdaq, "nasdaq")] {
            ctx.publish(
                out,
                Quote {
                    n,
                    venue: venue.to_owned(),
                },
            );
        }
        ctx.publish(self.trade, Trade { n, qty: 7 });
        self.next += 1;
    }
}

/// A bus whose bridge exports the three topics, with discovery on (unicast only: it answers
/// queries) or off, and the key `psk` if given; the bridge's address.
fn serve(discovery: bool, psk: Option<[u8; 32]>) -> (RunningBus, SocketAddr) {
    let (nyse, nasdaq, trade) = (topic(NYSE), topic(NASDAQ), topic(TRADE));
    let mut bridge = Bridge::bind("127.0.0.1:0").expect("binds");
    if discovery {
        bridge = bridge.discovery(DiscoveryConfig {
            group: None,
            ..DiscoveryConfig::default()
        });
    }
    if let Some(key) = psk {
        bridge = bridge.psk(key, true);
    }
    let addr = bridge.local_addr();
    let mut b = Bus::builder();
    let outputs = (nyse.clone(), nasdaq.clone(), trade.clone());
    b.actor("feed", move |s: &mut Setup<'_>| Feed {
        nyse: s.output_on(&outputs.0),
        nasdaq: s.output_on(&outputs.1),
        trade: s.output_on(&outputs.2),
        next: 0,
    })
    .tick_every(Duration::from_millis(10))
    .publishes_to(&nyse)
    .publishes_to(&nasdaq)
    .publishes_to(&trade);
    b.add(bridge.export_on(&nyse).export_on(&nasdaq).export_on(&trade));
    (b.start().expect("starts"), addr)
}

fn stop(bus: RunningBus) {
    bus.stop();
    bus.join().expect("stops cleanly");
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The lines of a pattern's echo, as (topic, message), each checked to be one JSON object of
/// exactly those two keys, the topic first.
fn tagged(text: &str) -> Vec<(String, serde_json::Value)> {
    text.lines()
        .map(|line| {
            assert!(line.starts_with("{\"topic\":"), "{line}");
            let mut value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let object = value.as_object_mut().expect("an object");
            assert_eq!(object.len(), 2, "{line}");
            let topic = object["topic"].as_str().expect("a topic").to_owned();
            (topic, object.remove("message").expect("a message"))
        })
        .collect()
}

/// Each topic's message numbers, in the order printed.
fn numbers(lines: &[(String, serde_json::Value)], name: &str) -> Vec<u64> {
    lines
        .iter()
        .filter(|(t, _)| t == name)
        .map(|(_, m)| m["n"].as_u64().expect("n"))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_of_a_pattern_prints_every_topic_it_matches_under_its_name_and_no_other() {
    let (bus, addr) = serve(true, None);
    let dir = CountersDir::new("echo-pattern");
    let addr = addr.to_string();
    let echo = |topic: &str, count: &str| {
        let out = llbus(
            &dir,
            &[
                "echo",
                "--publisher",
                &addr,
                "--topic",
                topic,
                "--count",
                count,
                "--duration-s",
                "30",
            ],
        );
        assert!(
            out.status.success(),
            "echo {topic} failed: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
        stdout(&out)
    };

    // Both venues, each line named and decoded as a quote of that venue; no trade.
    let text = echo("md.quote.*", "40");
    let lines = tagged(&text);
    assert_eq!(lines.len(), 40, "{text}");
    for (t, m) in &lines {
        assert!(
            t == NYSE || t == NASDAQ,
            "a topic the pattern does not match: {t}"
        );
        let venue = t.rsplit('.').next().expect("a venue");
        assert_eq!(*m, serde_json::json!({"n": m["n"], "venue": venue}), "{t}");
    }
    for venue in [NYSE, NASDAQ] {
        let n = numbers(&lines, venue);
        assert!(!n.is_empty(), "nothing of {venue}:\n{text}");
        assert!(n.windows(2).all(|w| w[0] < w[1]), "{venue}: {n:?}");
    }

    // Two types under one pattern: each topic decoded with its own shape.
    let text = echo("md.**.nyse", "40");
    let lines = tagged(&text);
    assert_eq!(lines.len(), 40, "{text}");
    assert!(lines.iter().all(|(t, _)| t == NYSE || t == TRADE), "{text}");
    for (t, m) in &lines {
        let expected = if t == TRADE {
            serde_json::json!({"n": m["n"], "qty": 7})
        } else {
            serde_json::json!({"n": m["n"], "venue": "nyse"})
        };
        assert_eq!(*m, expected, "{t}");
    }
    assert!(!numbers(&lines, NYSE).is_empty(), "{text}");
    assert!(!numbers(&lines, TRADE).is_empty(), "{text}");

    // A name prints the message alone, as it always did.
    let text = echo(NASDAQ, "3");
    assert_eq!(text.lines().count(), 3, "{text}");
    for line in text.lines() {
        let m: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(
            m,
            serde_json::json!({"n": m["n"], "venue": "nasdaq"}),
            "{line}"
        );
    }
    stop(bus);
}

#[test]
#[cfg_attr(miri, ignore)]
fn record_of_a_pattern_writes_exactly_the_matching_topics_each_on_its_channel() {
    let (bus, addr) = serve(true, None);
    let dir = CountersDir::new("record-pattern");
    let path =
        std::env::temp_dir().join(format!("llbus-record-pattern-{}.mcap", std::process::id()));
    let (addr, file) = (addr.to_string(), path.to_string_lossy().into_owned());
    let out = llbus(
        &dir,
        &[
            "record",
            "--publisher",
            &addr,
            "--topic",
            "md.quote.*",
            "--count",
            "60",
            "--duration-s",
            "30",
            "--output",
            &file,
        ],
    );
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "record failed: {}\n{text}",
        stderr(&out)
    );
    stop(bus);
    assert!(text.contains("RECORDED messages=60 "), "{text}");
    let bytes = std::fs::read(&path).expect("the recording");
    let _ = std::fs::remove_file(&path);
    let recording = llbus_record::read(&bytes);
    assert_eq!(recording.cut_off, None);

    let mut channels: Vec<&str> = recording
        .topics
        .iter()
        .map(|t| t.topic.as_str())
        .filter(|t| *t != llbus_record::GAPS_TOPIC)
        .collect();
    channels.sort_unstable();
    assert_eq!(channels, [NASDAQ, NYSE]);
    let mut total = 0;
    for name in [NYSE, NASDAQ] {
        let index = recording
            .topics
            .iter()
            .position(|t| t.topic == name)
            .expect("its channel");
        let t = &recording.topics[index];
        assert_eq!(t.topic_id, Some(llbus::topic_id(name)));
        assert_eq!(t.fingerprint, Some(Quote::FINGERPRINT));
        assert_eq!(t.shape, Some(Quote::schema()));
        let quotes: Vec<Quote> = recording
            .frames
            .iter()
            .filter(|f| f.topic == index)
            .map(|f| llbus_net::decode_payload(&f.data).expect("a quote"))
            .collect();
        assert!(!quotes.is_empty(), "nothing on {name}");
        let venue = name.rsplit('.').next().expect("a venue");
        assert!(
            quotes.iter().all(|q| q.venue == venue),
            "{name}: {quotes:?}"
        );
        total += quotes.len();
    }
    // Every message recorded is on one of the two channels (gaps aside).
    let gaps = recording
        .frames
        .iter()
        .filter(|f| recording.topics[f.topic].topic == llbus_record::GAPS_TOPIC)
        .count();
    assert_eq!(total, 60);
    assert_eq!(recording.frames.len(), 60 + gaps);
}

/// Fails, and within `bound` although the setup timeout is 30 s: no silent wait.
fn fails_at_once(dir: &CountersDir, args: &[&str], bound: Duration) -> String {
    let started = Instant::now();
    let out = llbus(dir, &[args, &["--setup-timeout-s", "30"]].concat());
    let took = started.elapsed();
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "{args:?} succeeded: {}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert!(took < bound, "{args:?} took {took:?}: {err}");
    err
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_pattern_matching_nothing_fails_at_once_listing_what_the_publisher_serves() {
    let (bus, addr) = serve(true, None);
    let dir = CountersDir::new("pattern-none");
    let addr = addr.to_string();
    let path = std::env::temp_dir().join(format!("llbus-pattern-none-{}.mcap", std::process::id()));
    let file = path.to_string_lossy().into_owned();
    let bound = Duration::from_secs(10);
    let echo = ["echo", "--publisher", &addr, "--topic", "md.book.*"];
    let record = [
        "record",
        "--publisher",
        &addr,
        "--topic",
        NYSE,
        "--topic",
        "md.book.*",
        "--output",
        &file,
    ];
    for args in [&echo[..], &record[..]] {
        let err = fails_at_once(&dir, args, bound);
        assert!(err.contains("matches --topic 'md.book.*'"), "{err}");
        assert!(err.contains(&addr), "{err}");
        for served in [NYSE, NASDAQ, TRADE] {
            assert!(err.contains(served), "{served} not listed: {err}");
        }
    }
    assert!(!path.exists(), "a file was written");
    stop(bus);
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_bad_pattern_is_a_usage_error_naming_the_flag_and_the_problem() {
    let dir = CountersDir::new("pattern-bad");
    for (args, problem) in [
        (&["echo", "--topic", "md.*x"][..], "mixes `*`"),
        (&["echo", "--topic", ""][..], "empty"),
        (
            &["record", "--topic", "md..*", "--output", "never.mcap"][..],
            "empty segment",
        ),
    ] {
        let out = llbus(&dir, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--topic"), "{err}");
        assert!(err.contains("invalid topic pattern"), "{err}");
        assert!(err.contains(problem), "{args:?}: {err}");
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_bridge_with_discovery_off_is_named_as_the_cause_and_an_absent_one_times_out() {
    let (bus, addr) = serve(false, None);
    let dir = CountersDir::new("pattern-off");
    let addr = addr.to_string();
    let err = fails_at_once(
        &dir,
        &["echo", "--publisher", &addr, "--topic", "md.quote.*"],
        Duration::from_secs(10),
    );
    assert!(err.contains("discovery off"), "{err}");
    // The same bridge serves a name as before.
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &addr,
            "--topic",
            NYSE,
            "--count",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 2);
    stop(bus);

    // Nobody there: the setup timeout, then a clear error.
    let nobody = format!("127.0.0.1:{}", tests::example_bins::free_udp_port());
    let out = llbus(
        &dir,
        &[
            "echo",
            "--publisher",
            &nobody,
            "--topic",
            "md.quote.*",
            "--setup-timeout-s",
            "1",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no answer from") && err.contains(&nobody),
        "{err}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_pattern_is_resolved_with_the_publisher_s_key_and_not_without_it() {
    let key = [0x3c; 32];
    let (bus, addr) = serve(true, Some(key));
    let dir = CountersDir::new("pattern-psk");
    let keyfile = std::env::temp_dir().join(format!("llbus-pattern-{}.key", std::process::id()));
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&keyfile, hex).expect("key file");
    let keyfile_arg = keyfile.to_string_lossy().into_owned();
    let addr = addr.to_string();
    let args = ["echo", "--publisher", &addr, "--topic", "md.quote.*"];
    let out = llbus(
        &dir,
        &[&args[..], &["--psk-file", &keyfile_arg, "--count", "10"]].concat(),
    );
    let _ = std::fs::remove_file(&keyfile);
    let text = stdout(&out);
    assert!(out.status.success(), "{}\n{text}", stderr(&out));
    let lines = tagged(&text);
    assert_eq!(lines.len(), 10, "{text}");
    assert!(
        lines.iter().all(|(t, _)| t == NYSE || t == NASDAQ),
        "{text}"
    );
    // Without the key the bridge answers nothing, neither query nor schema request.
    let out = llbus(&dir, &[&args[..], &["--setup-timeout-s", "2"]].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no answer from"), "{err}");
    stop(bus);
}
