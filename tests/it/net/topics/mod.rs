//! `llbus topics` as a process against bridges and forgers on a loopback discovery group
//! (cli/src/topics.rs, PROTOCOL.md "Discovery"): its lists stay bounded under a flood, hostile
//! names are escaped and a fingerprint mismatch is shouted, exports split over several
//! announcement parts are all discovered and listed, and with a key only the bridges holding it
//! are followed. `groups` checks the multicast group listed for each export.

mod groups;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Out, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::bridges::discovery::{
    announce, discovery, group, group_sender, subscriber, Counter, Feed, Quote, Silent,
};
use tests::cli::llbus_bin;
use tests::wait_for;

/// Runs `llbus topics` on `group` (loopback) for `listen_ms`, with `extra` arguments, while
/// `during` sends; returns its stdout, whether it succeeded, and how long it ran.
fn topics_during(
    group: SocketAddr,
    listen_ms: u64,
    extra: &[&str],
    during: impl FnOnce(Duration),
) -> (String, bool, Duration) {
    let bin = llbus_bin();
    let mut cmd = Command::new(bin);
    cmd.args([
        "topics",
        "--group",
        &group.to_string(),
        "--interface",
        "127.0.0.1",
        "--listen-ms",
        &listen_ms.to_string(),
    ])
    .args(extra);
    let start = Instant::now();
    let running = std::thread::spawn(move || {
        tests::netns::output_with_timeout(&mut cmd, Duration::from_secs(30))
            .expect("llbus topics runs")
    });
    // Give it time to join the group.
    std::thread::sleep(Duration::from_millis(200));
    during(Duration::from_millis(listen_ms.saturating_sub(300)));
    let out = running.join().expect("llbus topics ends");
    let elapsed = start.elapsed();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
        elapsed,
    )
}

/// cli/src/topics.rs: "what the listener keeps is bounded (at most MAX_PUBLISHERS publishers,
/// of at most what one datagram holds each)": it returns promptly under a flood and `--json`
/// stays valid. One source sending announcement parts of one session, each with
/// fresh topics, must not make one publisher's list grow past what a datagram holds.
#[test]
#[cfg_attr(miri, ignore)]
fn topics_keeps_one_publishers_list_bounded_under_a_flood() {
    let Some(group) = group(7) else { return };
    let names: Vec<String> = (0..60_000u64).map(|i| format!("f{i:05}")).collect();
    let (out, ok, elapsed) = topics_during(group, 1500, &["--json"], |window| {
        let mut sender = group_sender();
        let start = Instant::now();
        let mut next = 0usize;
        while start.elapsed() < window && next + 50 <= names.len() {
            let topics = names[next..next + 50]
                .iter()
                .enumerate()
                .map(|(i, n)| ((next + i) as u64 + 1, 1u64, 0, n.as_str()));
            let datagram = announce(0xf100d, 1000, 7000, topics);
            next += 50;
            let _ = sender.send_to(&datagram, group);
            if next % 500 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    assert!(ok, "llbus topics failed: {out}");
    let listed: serde_json::Value = serde_json::from_str(out.trim()).expect("valid JSON");
    let topics = listed["topics"].as_array().map_or(0, Vec::len);
    println!("one source listed {topics} topics; llbus topics ran {elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(1500 + 5000),
        "llbus topics took {elapsed:?} under a flood"
    );
    // One datagram holds (1472 - 48 - 52) / (18 + 6) = 57 of these entries.
    assert!(topics <= 57, "{topics} topics kept for one publisher");
}

/// cli/src/topics.rs: names are escaped (control characters, bidi overrides), a fingerprint
/// mismatch between publishers of one topic is printed loudly, and `--json` stays valid JSON
/// with no terminal control in it.
#[test]
#[cfg_attr(miri, ignore)]
fn topics_escapes_hostile_names_and_shouts_a_mismatch() {
    let Some(group) = group(8) else { return };
    let hostile = "md.\u{1b}]0;pwned\u{7}\u{202e}etouq\n\u{9b}2J\u{2066}";
    let send = |window: Duration| {
        let mut sender = group_sender();
        let start = Instant::now();
        while start.elapsed() < window {
            for (port, fp) in [(7001u16, 0xaa_u64), (7002, 0xbb)] {
                let topics = [(42u64, fp, llbus_net::ENTRY_RELIABLE, hostile)];
                let datagram = announce(u64::from(port), 1000, port, topics.iter().copied());
                let _ = sender.send_to(&datagram, group);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (text, ok, _) = topics_during(group, 1200, &[], send);
    assert!(ok, "{text}");
    println!("{text}");
    assert!(text.contains("FINGERPRINT MISMATCH"), "{text}");
    assert!(text.contains("127.0.0.1:7001") && text.contains("127.0.0.1:7002"));
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    assert!(!text.chars().any(unsafe_char), "{text:?}");
    // The name's newline is escaped too: every line is one of the listing's.
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("\u{9b}") || l.starts_with("\\x9b2J")),
        "{text:?}"
    );
    let (json, ok, _) = topics_during(group, 1200, &["--json"], send);
    assert!(ok, "{json}");
    assert!(!json.trim().chars().any(unsafe_char), "{json:?}");
    let listed: serde_json::Value = serde_json::from_str(json.trim()).expect("valid JSON");
    let topic = &listed["topics"][0];
    assert_eq!(
        topic["topic"], hostile,
        "the name survives escaping: {json}"
    );
    assert_eq!(topic["fingerprint_mismatch"], true, "{json}");
}

/// Exported topics with 64-byte names (the longest allowed), so that one bridge's 18
/// announcement entries (82 bytes each, 16 to a datagram) need two parts.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.01.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long1 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.02.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long2 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.03.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long3 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.04.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long4 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.05.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long5 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.06.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long6 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.07.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long7 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.08.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long8 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.09.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long9 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.10.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long10 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.11.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long11 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.12.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long12 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.13.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long13 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.14.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long14 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.15.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long15 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.16.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long16 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.17.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long17 {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "disc.long.18.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
struct Long18 {
    n: u64,
}

/// Takes `Long18`s and counts them.
struct CountLong(Counter);

impl Actor for CountLong {
    type In = Long18;
    fn on_message(&mut self, _m: Long18, _ctx: &mut Context<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Publishes a `Long18` every tick.
struct FeedLong(Out<Long18>);

impl Actor for FeedLong {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.0, Long18 { n: 1 });
    }
}

/// PROTOCOL.md: "Exports that do not fit one datagram are split over several parts, each a
/// datagram of its own". Eighteen exports of 64-byte names (sixteen fit a datagram): the
/// subscriber discovers one in the second part and receives it, and `llbus topics` lists them.
#[test]
#[cfg_attr(miri, ignore)]
fn exports_split_over_parts_are_all_discovered_and_listed() {
    let Some(group) = group(18) else { return };
    let config = discovery(group, Duration::from_millis(200));
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("pub")
        .discovery(config.clone())
        .export::<Long1>()
        .export::<Long2>()
        .export::<Long3>()
        .export::<Long4>()
        .export::<Long5>()
        .export::<Long6>()
        .export::<Long7>()
        .export::<Long8>()
        .export::<Long9>()
        .export::<Long10>()
        .export::<Long11>()
        .export::<Long12>()
        .export::<Long13>()
        .export::<Long14>()
        .export::<Long15>()
        .export::<Long16>()
        .export::<Long17>()
        .export::<Long18>();
    let pub_addr = bridge.local_addr();
    let mut bus = Bus::builder();
    bus.actor("feed", |s: &mut Setup<'_>| FeedLong(s.output()))
        .tick_every(Duration::from_millis(2))
        .publishes::<Long18>();
    // The other seventeen topics are declared only (exported, announced, never published).
    bus.actor("silent", |_: &mut Setup<'_>| Silent)
        .publishes::<Long1>()
        .publishes::<Long2>()
        .publishes::<Long3>()
        .publishes::<Long4>()
        .publishes::<Long5>()
        .publishes::<Long6>()
        .publishes::<Long7>()
        .publishes::<Long8>()
        .publishes::<Long9>()
        .publishes::<Long10>()
        .publishes::<Long11>()
        .publishes::<Long12>()
        .publishes::<Long13>()
        .publishes::<Long14>()
        .publishes::<Long15>()
        .publishes::<Long16>()
        .publishes::<Long17>();
    bus.add(bridge);
    let publisher = bus.start().expect("publisher starts");
    let sub_bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .discovery(config)
        .discover::<Long18>();
    let status = sub_bridge.status();
    let got = Counter::default();
    let mut bus = Bus::builder();
    let g = Counter::clone(&got);
    bus.actor("count", move |_: &mut Setup<'_>| {
        CountLong(Counter::clone(&g))
    })
    .subscribes::<Long18>();
    bus.add(sub_bridge);
    let sub = bus.start().expect("subscriber starts");
    wait_for("the eighth topic discovered and arriving", 20, || {
        got.load(std::sync::atomic::Ordering::Relaxed) > 50
    });
    assert!(status.discovered().iter().any(|d| d.publisher == pub_addr));
    let (json, ok, _) = topics_during(group, 1200, &["--json"], |_| {});
    publisher.stop();
    publisher.join().expect("publisher stops cleanly");
    sub.stop();
    sub.join().expect("subscriber stops cleanly");
    assert!(ok, "{json}");
    let listed: serde_json::Value = serde_json::from_str(json.trim()).expect("valid JSON");
    let names: Vec<&str> = listed["topics"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["topic"].as_str()).collect())
        .unwrap_or_default();
    println!("listed {names:?}");
    for topic in [Long1::TOPIC, Long16::TOPIC, Long17::TOPIC, Long18::TOPIC] {
        assert!(names.contains(&topic), "{topic} not listed: {json}");
    }
}

/// SECURITY.md: "With a key, announcements and queries are sealed". Bridges sharing a key
/// discover each other; a bridge with another key is not followed (its sealed announcements
/// do not open), and `llbus topics` (no key) lists neither, saying sealed announcements were
/// heard.
#[test]
#[cfg_attr(miri, ignore)]
fn with_a_key_only_bridges_holding_it_are_followed() {
    let Some(group) = group(20) else { return };
    let config = discovery(group, Duration::from_millis(200));
    let start_publisher = |key: [u8; 32]| {
        let bridge = Bridge::bind("127.0.0.1:0")
            .unwrap()
            .name("pub")
            .psk(key, true)
            .discovery(config.clone())
            .export::<Quote>();
        let addr = bridge.local_addr();
        let mut bus = Bus::builder();
        bus.actor("feed", |s: &mut Setup<'_>| Feed {
            out: s.output(),
            n: 0,
        })
        .tick_every(Duration::from_millis(2))
        .publishes::<Quote>();
        bus.add(bridge);
        (bus.start().expect("publisher starts"), addr)
    };
    let (same, same_addr) = start_publisher([1; 32]);
    let (other, other_addr) = start_publisher([2; 32]);
    let bridge = Bridge::bind("127.0.0.1:0")
        .unwrap()
        .name("sub")
        .psk([1; 32], true)
        .discovery(config.clone())
        .discover::<Quote>();
    let status = bridge.status();
    let sub = subscriber(bridge);
    wait_for("the publisher with the key followed", 20, || {
        status
            .discovered()
            .iter()
            .any(|d| d.publisher == same_addr && d.established)
    });
    std::thread::sleep(Duration::from_millis(800));
    let found = status.discovered();
    let (text, ok, _) = topics_during(group, 800, &[], |_| {});
    same.stop();
    same.join().expect("publisher stops cleanly");
    other.stop();
    other.join().expect("publisher stops cleanly");
    sub.stop();
    sub.join().expect("subscriber stops cleanly");
    assert!(found.iter().all(|d| d.publisher != other_addr), "{found:?}");
    assert!(ok, "{text}");
    assert!(text.contains("sealed announcements not read"), "{text}");
    assert!(!text.contains(&same_addr.to_string()), "{text}");
}
