//! `llbus echo` and `llbus spy --decode` against a bridge in this process, as separate
//! processes: the command fetches the topic's schema from the bridge (the schema frames),
//! subscribes without the Rust type and prints each message as one line of JSON, fields in
//! declaration order, terminal controls escaped; with the publisher's pre-shared key from a
//! file, and refused without it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use llbus::{Actor, Bus, Context, Message, Out, RunningBus, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::cli::CountersDir;

use crate::llbus;

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
enum Side {
    Buy,
    Sell { by: u32 },
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "echo.fill")]
struct Fill {
    n: u64,
    side: Side,
    px: f64,
    venue: String,
    tags: Vec<(u8, char)>,
    note: Option<String>,
}

fn fill(n: u64) -> Fill {
    Fill {
        n,
        side: if n % 2 == 0 {
            Side::Buy
        } else {
            Side::Sell { by: n as u32 }
        },
        px: n as f64 + 0.5,
        // An escape sequence and a DEL: printed as escapes, never acted on.
        venue: "X\u{1b}[2J\u{7f}".to_owned(),
        tags: vec![(1, 'a'), (2, 'é')],
        note: (n % 3 == 0).then(|| "third".to_owned()),
    }
}

/// The line `llbus echo` must print for `fill(n)`, written out by hand.
fn expected(n: u64) -> String {
    let side = if n % 2 == 0 {
        "\"Buy\"".to_owned()
    } else {
        format!("{{\"Sell\":{{\"by\":{n}}}}}")
    };
    let note = if n % 3 == 0 { "\"third\"" } else { "null" };
    format!(
        "{{\"n\":{n},\"side\":{side},\"px\":{n}.5,\"venue\":\"X\\u001b[2J\\u007f\",\
         \"tags\":[[1,\"a\"],[2,\"é\"]],\"note\":{note}}}"
    )
}

/// Publishes the next fill every tick.
struct Feed {
    out: Out<Fill>,
    next: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        ctx.publish(self.out, fill(self.next));
        self.next += 1;
    }
}

/// A bus that serves fills on a bridge (with `psk`, if any); its address.
fn serve(psk: Option<[u8; 32]>) -> (RunningBus, SocketAddr) {
    serve_announced(psk, None)
}

/// [`serve`], the bridge announcing its topics on discovery group `group` if given.
fn serve_announced(psk: Option<[u8; 32]>, group: Option<SocketAddr>) -> (RunningBus, SocketAddr) {
    let mut bridge = Bridge::bind("127.0.0.1:0").expect("binds");
    if let Some(key) = psk {
        bridge = bridge.psk(key, true);
    }
    if let Some(group) = group {
        bridge = bridge.discovery(tests::bridges::discovery::discovery(
            group,
            Duration::from_millis(200),
        ));
    }
    let addr = bridge.local_addr();
    let mut b = Bus::builder();
    b.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        next: 0,
    })
    .tick_every(Duration::from_millis(20))
    .publishes::<Fill>();
    b.add(bridge.export::<Fill>());
    (b.start().expect("starts"), addr)
}

/// The message number a printed line starts with.
fn number(line: &str) -> u64 {
    let value: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    value["n"]
        .as_u64()
        .unwrap_or_else(|| panic!("no n: {line}"))
}

/// A key file holding `key` as hex, removed when dropped.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str, key: [u8; 32]) -> KeyFile {
        let path = std::env::temp_dir().join(format!("llbus-{name}-{}.key", std::process::id()));
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&path, format!("{hex}\n")).expect("key file written");
        KeyFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn echo_prints_each_message_as_json_with_the_key_and_nothing_without_it() {
    let key = [0x5a; 32];
    let (bus, addr) = serve(Some(key));
    let dir = CountersDir::new("echo");
    let keyfile = KeyFile::new("echo", key);
    let addr = addr.to_string();
    let args = [
        "echo",
        "--publisher",
        &addr,
        "--topic",
        "echo.fill",
        "--count",
        "4",
        "--psk-file",
        keyfile.path(),
    ];
    let out = llbus(&dir, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "echo failed: {err}\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let first = number(lines[0]);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, expected(first + i as u64), "line {i}");
    }

    // Another key: the publisher drops every request, and echo says so.
    let wrong = KeyFile::new("echo-wrong", [0x11; 32]);
    let mut args = args;
    args[8] = wrong.path();
    let timeout = ["--setup-timeout-s", "3"];
    let out = llbus(&dir, &[&args[..], &timeout[..]].concat());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && out.stdout.is_empty(), "{err}");
    assert!(err.contains("no answer from the publisher"), "{err}");
    bus.stop();
    bus.join().expect("stops cleanly");
}

#[test]
#[cfg_attr(miri, ignore)]
fn spy_decode_shows_the_fields_beside_each_header() {
    let (bus, addr) = serve(None);
    let dir = CountersDir::new("spy-decode");
    let addr = addr.to_string();
    let args = [
        "spy",
        "--publisher",
        &addr,
        "--topic",
        "echo.fill",
        "--count",
        "3",
        "--decode",
    ];
    let out = llbus(&dir, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "spy failed: {err}\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    // FRAME, its fields; three times; then the summary.
    assert_eq!(lines.len(), 7, "{text}");
    for pair in lines[..6].chunks(2) {
        assert!(pair[0].starts_with("FRAME "), "{text}");
        let fields = pair[1].trim_start();
        assert_eq!(fields, expected(number(fields)), "{text}");
    }
    assert!(lines[6].starts_with("SPY messages=3 "), "{text}");
    bus.stop();
    bus.join().expect("stops cleanly");
}

/// `echo --topic NAME` alone: the publisher is found by discovery (the one that announces
/// the topic on the group), and its messages are printed as with `--publisher`.
#[test]
#[cfg_attr(miri, ignore)]
fn echo_with_the_topic_alone_finds_its_publisher_by_discovery() {
    let Some(group) = tests::bridges::discovery::group(20) else {
        return;
    };
    let (bus, addr) = serve_announced(None, Some(group));
    let dir = CountersDir::new("echo-discovered");
    let group = group.to_string();
    let args = [
        "echo",
        "--topic",
        "echo.fill",
        "--group",
        &group,
        "--count",
        "3",
    ];
    let out = llbus(&dir, &args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "echo failed: {err}\n{text}");
    assert!(
        err.contains(&format!("found the publisher of 'echo.fill' at {addr}")),
        "{err}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let first = number(lines[0]);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, expected(first + i as u64), "line {i}");
    }

    // A topic nobody announces: a clear error, within the setup timeout.
    let args = [
        "echo",
        "--topic",
        "echo.nobody",
        "--group",
        &group,
        "--setup-timeout-s",
        "1",
    ];
    let out = llbus(&dir, &args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && out.stdout.is_empty(), "{err}");
    assert!(
        err.contains("no publisher of 'echo.nobody' announced") && err.contains("--publisher"),
        "{err}"
    );
    bus.stop();
    bus.join().expect("stops cleanly");
}

/// `hz` and `spy` take the publisher's key (`--psk-file`): with it they count its messages;
/// without it, or with another, they fail saying the key may be the cause.
#[test]
#[cfg_attr(miri, ignore)]
fn hz_and_spy_with_the_key_tap_a_keyed_publisher_and_fail_clearly_without_it() {
    let key = [0x6b; 32];
    let Some(group) = tests::bridges::discovery::group(22) else {
        return;
    };
    // Announced, sealed with the key.
    let (bus, addr) = serve_announced(Some(key), Some(group));
    let dir = CountersDir::new("hz-psk");
    let keyfile = KeyFile::new("hz", key);
    let addr = addr.to_string();
    let hz = [
        "hz",
        "--topic",
        "echo.fill",
        "--publisher",
        &addr,
        "--duration-s",
        "2.5",
        "--psk-file",
        keyfile.path(),
    ];
    let out = llbus(&dir, &hz);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "hz failed: {err}\n{text}");
    let summary = text
        .lines()
        .find(|l| l.starts_with("HZ "))
        .unwrap_or_else(|| panic!("no summary: {text}"));
    let messages: u64 = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("messages="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    // A fill every 20 ms for about two seconds after the handshake.
    assert!(messages >= 20, "{summary}");
    assert!(
        summary.contains(&format!("fingerprint={:#018x}", Fill::FINGERPRINT)),
        "{summary}"
    );

    // With the key and no address: the sealed announcement opened, the publisher found.
    let group = group.to_string();
    let found = [
        "hz",
        "--topic",
        "echo.fill",
        "--group",
        &group,
        "--duration-s",
        "1",
        "--psk-file",
        keyfile.path(),
    ];
    let out = llbus(&dir, &found);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "hz failed: {err}");
    assert!(
        err.contains(&format!("found the publisher of 'echo.fill' at {addr}")),
        "{err}"
    );

    let spy = [
        "spy",
        "--topic",
        "echo.fill",
        "--publisher",
        &addr,
        "--count",
        "2",
        "--decode",
        "--psk-file",
        keyfile.path(),
    ];
    let out = llbus(&dir, &spy);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "spy failed: {err}\n{text}");
    assert!(text.contains("SPY messages=2 "), "{text}");

    // Without the key, and with another: no subscription, and the key named as the cause.
    let wrong = KeyFile::new("hz-wrong", [0x12; 32]);
    for psk in [None, Some(wrong.path())] {
        let mut args = vec![
            "hz",
            "--topic",
            "echo.fill",
            "--publisher",
            &addr,
            "--setup-timeout-s",
            "2",
        ];
        if let Some(path) = psk {
            args.extend(["--psk-file", path]);
        }
        let out = llbus(&dir, &args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("no subscription to topic 'echo.fill'") && err.contains("--psk-file"),
            "{err}"
        );
    }
    bus.stop();
    bus.join().expect("stops cleanly");
}
