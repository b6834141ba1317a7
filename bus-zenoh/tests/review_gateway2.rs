//! A second adversarial review of the zenoh gateway, aimed at the first review's fixes and the
//! promises they added: the `MAX_JUMP` rule (docs/ZENOH.md "What an import checks and counts",
//! SECURITY.md, import.rs's module doc), `GatewayError::Echo` (docs/ZENOH.md "No echo"), the
//! errors table (docs/ZENOH.md "Errors", errors.rs), handles named `<kind>:<topic>@<key>`, and
//! `Gateway::close` on a bus that still runs.
//!
//! The sequence-number rule is pure code (`Verdicts`), attacked directly; the rest through a
//! gateway and a hostile zenoh session, a peer on loopback with scouting off. Every wait is
//! bounded by `LIMIT`; a call that could hang runs on a thread of its own with a timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{
    Attachment, Export, Gateway, Import, Verdict, Verdicts, BINCODE_ENCODING, MAX_JUMP,
};
use serde::{Deserialize, Serialize};

mod common;
use common::*;

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review2.tick")]
struct Tick {
    n: u64,
}

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review2.tock")]
struct Tock {
    n: u64,
}

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review2.blob")]
struct Blob {
    data: Vec<u8>,
}

/// A put of `Tick { n }` in the gateway's bincode, as a hostile client would make it.
fn put_tick(
    publisher: &zenoh::pubsub::Publisher<'_>,
    n: u64,
    attachment: Option<[u8; 40]>,
    encoding: zenoh::bytes::Encoding,
) {
    let payload =
        bincode::serde::encode_to_vec(Tick { n }, bincode::config::legacy()).expect("bincode");
    let put = publisher.put(payload).encoding(encoding);
    match attachment {
        Some(a) => put.attachment(a.to_vec()).wait(),
        None => put.wait(),
    }
    .expect("the hostile put");
}

/// Lost and late as an import's checks count them over `sequences` of stream 1 (`None`: a
/// forged sample of the same stream, counted apart), genuine ones only.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    genuine_lost: u64,
    genuine_late: u64,
    forged_lost: u64,
}

fn tally(samples: &[(u64, bool)]) -> Tally {
    let mut v = Verdicts::new(Tick::TOPIC, Tick::TOPIC_ID, Tick::FINGERPRINT, "llbus/t");
    let mut t = Tally::default();
    for &(sequence, forged) in samples {
        let Verdict::Accept { lost, late } = v.check(Some(&attachment::<Tick>(0, 1, sequence)))
        else {
            panic!("a well-formed sample of the topic was not accepted");
        };
        if forged {
            t.forged_lost += lost;
        } else {
            t.genuine_lost += lost;
            t.genuine_late += u64::from(late);
        }
    }
    t
}

/// A forged number within `MAX_JUMP` counts as a gap and moves the stream, so the genuine
/// samples after it count late: docs/ZENOH.md says so ("a peer that can put on the key can skew
/// the stream's figures, never what is delivered"). Pinned: every genuine sample is still
/// delivered (`tally` panics otherwise), the forged one adds at most `MAX_JUMP` lost, and the
/// genuine samples behind it count late (the documented limit).
#[test]
fn one_forged_sample_within_max_jump_skews_the_figures_not_the_delivery() {
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    samples.push((100 + MAX_JUMP, true));
    samples.extend((100..1100).map(|s| (s, false)));
    let t = tally(&samples);
    assert!(t.forged_lost <= MAX_JUMP, "{t:?}");
    assert_eq!(t.genuine_late, 1000, "the documented skew: {t:?}");
}

/// A forged confirmation pair moves the stream far ahead as a new stream would: the genuine
/// samples after it are still delivered, counted late, and their gaps go uncounted (the
/// documented limit without a way to tell a forger from the exporter); nothing is counted lost
/// for the forged jump.
#[test]
fn a_forged_confirmation_pair_skews_the_figures_not_the_delivery() {
    let far = 1u64 << 40;
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    samples.push((far, true));
    samples.push((far + 1, true));
    samples.extend((100..1100).filter(|s| s % 100 != 50).map(|s| (s, false)));
    let t = tally(&samples);
    assert_eq!(t.forged_lost, 0, "{t:?}");
    assert_eq!(t.genuine_late, 990, "the documented skew: {t:?}");
}

/// SECURITY.md: "a forged sequence number adds at most 2^16 to `zenoh.lost` (a larger jump
/// counts nothing)". A forger alternating claims far apart (none confirms another) adds nothing
/// lost, and the genuine samples in between keep their gaps counted and are never late.
#[test]
fn a_forger_alternating_far_claims_counts_nothing_and_the_genuine_stream_is_unharmed() {
    let claims = [1u64 << 40, 1 << 50, u64::MAX, 3 * MAX_JUMP + 1_000_000];
    let mut samples = Vec::new();
    for s in 0..2000u64 {
        if s % 100 != 7 {
            samples.push((s, false));
        }
        let claim = claims[(s % 4) as usize];
        samples.push((claim, true));
    }
    let t = tally(&samples);
    assert_eq!(
        t,
        Tally {
            genuine_lost: 20,
            genuine_late: 0,
            forged_lost: 0
        }
    );
}

/// A forger interleaving far claims between the samples of a genuine stream that jumped keeps
/// the jump unconfirmed: every sample is still delivered and nothing is counted lost for the
/// claims, but the genuine gaps after the jump go uncounted (the documented limit).
#[test]
fn forged_claims_after_a_genuine_jump_skew_the_figures_not_the_delivery() {
    let jump = 10 * MAX_JUMP;
    let mut samples: Vec<(u64, bool)> = (0..100).map(|s| (s, false)).collect();
    for s in (jump..jump + 1000).filter(|s| s % 100 != 50) {
        samples.push((s, false));
        samples.push((u64::MAX - (s % 2) * (1 << 40), true));
    }
    let t = tally(&samples);
    assert_eq!((t.forged_lost, t.genuine_late), (0, 0), "{t:?}");
    assert_eq!(t.genuine_lost, 0, "the documented skew: {t:?}");
}

/// How far a forger can push `zenoh.lost` with samples each inside the rule: each one counts
/// up to `MAX_JUMP`, so n forged samples add n x 2^16. The promise is per sample; this pins the
/// figure so that a change to the rule shows here.
#[test]
fn each_forged_sample_adds_at_most_max_jump_lost() {
    let mut samples = vec![(0u64, false)];
    let mut next = 1u64;
    for _ in 0..1000 {
        samples.push((next + MAX_JUMP, true));
        next += MAX_JUMP + 1;
    }
    let t = tally(&samples);
    assert!(t.forged_lost <= 1000 * MAX_JUMP, "{t:?}");
}

/// docs/ZENOH.md "No echo": a gateway that both exports and imports one topic is refused at
/// start, because the import would feed the local topic, which the export would put again,
/// without end. Two gateways started on one bus (one exports the topic, the other imports it,
/// their sessions peers of each other) form the same loop, inside one process where both
/// handles are on one bus for `start` to see. One message published must be put once.
#[test]
fn two_gateways_on_one_bus_cannot_echo_a_topic() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut exporter = Gateway::builder();
    exporter.export::<Tick>(&mut bus, Export::new());
    let mut importer = Gateway::builder();
    importer.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let exporter = exporter.start(&mut running, a);
    let importer = importer.start(&mut running, b);
    let mut app = running.publisher(app).expect("the handle");
    let (exporter, importer) = match (exporter, importer) {
        (Ok(e), Ok(i)) => (e, i),
        (Err(e), _) | (_, Err(e)) => {
            // Refused: the echo was seen. The promise holds.
            assert!(matches!(e, llbus_zenoh::GatewayError::Echo(_)), "{e:?}");
            drop(app);
            running.stop();
            running.join().expect("the bus joins");
            return;
        }
    };
    assert!(exporter.wait_matched(LIMIT), "the importer never matched");
    app.publish(Tick { n: 1 }).expect("published");
    std::thread::sleep(Duration::from_secs(2));
    let put = exporter.counts().put;
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    let imported = importer.close();
    let exported = exporter.close();
    assert!(
        put <= 1,
        "one message was put {put} times in 2 s (exported {exported:?}, imported {imported:?})"
    );
}

/// docs/ZENOH.md "Errors": each line keeps "the first message, and if it came again, how many
/// times and the latest message", so a flood hides neither another kind's first error "nor the
/// latest refusal of its own kind". Three refused streams: fingerprint A, then B, then A again.
/// The latest refusal is A's; the line must not call B's the latest.
#[test]
fn the_errors_line_names_the_latest_refusal() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let t = matched_publisher(&client, "llbus/review2.tick");
    let (fa, fb) = (0x0a0a_u64, 0x0b0b_u64);
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fa, 1, 0)),
        bincode_encoding::<Tick>(),
    );
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fb, 2, 0)),
        bincode_encoding::<Tick>(),
    );
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fa, 3, 0)),
        bincode_encoding::<Tick>(),
    );
    let counts = counts_when(&gateway, |c| c.refused == 3);
    let errors = gateway.errors();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.refused, 3, "{counts:?}");
    assert_eq!(errors.len(), 1, "one topic, one kind: {errors:#?}");
    let theirs_a = format!("theirs {:#018x}", Tick::FINGERPRINT ^ fa);
    let latest = errors[0]
        .split_once("the latest:")
        .map_or("", |(_, latest)| latest);
    assert!(
        latest.contains(&theirs_a),
        "the latest refusal was fingerprint A's ({theirs_a}), the line says: {}",
        errors[0]
    );
}

/// docs/ZENOH.md "Errors": "The log gets the first line of each kind and topic only", and
/// `Gateway::errors` holds one line per topic and kind. A hostile client controls an unknown
/// encoding's schema text (zenoh caps it at 255 bytes), which the malformed message quotes: a
/// schema with line breaks must not forge extra lines in the table or the log.
#[test]
fn a_hostile_encoding_cannot_forge_error_lines() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let t = matched_publisher(&client, "llbus/review2.tick");
    let schema = "x\n[ERROR llbus_zenoh] zenoh gateway: all imports healthy\n";
    let hostile = zenoh::bytes::Encoding::TEXT_PLAIN.with_schema(schema);
    put_tick(&t, 0, Some(attachment::<Tick>(0, 1, 0)), hostile);
    let counts = counts_when(&gateway, |c| c.malformed == 1);
    let errors = gateway.errors();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.malformed, 1, "{counts:?}");
    assert!(
        errors.iter().all(|e| !e.contains('\n')),
        "an error line carries the sender's line breaks: {errors:#?}"
    );
}

/// docs/ZENOH.md "Export": handles are named `zenoh-export:<topic>@<key>` "so one topic can be
/// exported on several keys". Two exports of one topic on one given key get one name, which
/// `start()` refuses (two handles cannot share a name): the user learns of the mistake at once.
#[test]
fn one_topic_exported_twice_on_one_given_key_is_refused_at_start() {
    let mut bus = Bus::builder();
    let _app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new().key("site/tick"));
    gateway.export::<Tick>(&mut bus, Export::new().key("site/tick"));
    match bus.start() {
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("two exports of one topic on one key started");
        }
        Err(e) => assert!(
            e.to_string()
                .contains("zenoh-export:review2.tick@site/tick"),
            "{e}"
        ),
    }
}

/// The same mistake spelled two ways: an export on the default key and one given that key
/// explicitly (`llbus/<topic>`). The names differ (`zenoh-export:t` and `zenoh-export:t@llbus/t`),
/// so nothing refuses them, both put every message on one key, and an importer publishes each
/// message twice.
#[test]
fn one_topic_exported_on_its_default_key_twice_arrives_once() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    gateway.export::<Tick>(&mut bus, Export::new().key("llbus/review2.tick"));
    let Ok(mut running) = bus.start() else {
        return; // Refused at start: the promise holds.
    };
    let mut other = Bus::builder();
    let reader = other.subscription_with::<Tick>("reader", Backpressure::DropNewest, 256);
    let mut import = Gateway::builder();
    import.import::<Tick>(&mut other, Import::new());
    let mut other_running = other.start().expect("the other bus starts");
    let importer = import
        .start(&mut other_running, b)
        .expect("the importer starts");
    let reader = other_running.subscription(reader).expect("the handle");
    let exporter = match gateway.start(&mut running, a) {
        Ok(g) => g,
        Err(_) => {
            // Refused at the gateway's start: the promise holds.
            drop(reader);
            other_running.stop();
            let _ = other_running.join();
            importer.close();
            running.stop();
            let _ = running.join();
            return;
        }
    };
    let mut app = running.publisher(app).expect("the handle");
    assert!(exporter.wait_matched(LIMIT), "the importer never matched");
    for n in 0..10 {
        app.publish(Tick { n }).expect("published");
    }
    let counts = counts_when(&importer, |c| c.published >= 20);
    std::thread::sleep(Duration::from_millis(200));
    let published = importer.counts().published;
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    drop(reader);
    other_running.stop();
    other_running.join().expect("the other bus joins");
    exporter.close();
    importer.close();
    assert_eq!(published, 10, "10 messages sent, imported {counts:?}");
}

/// The import side of the same mistake: an import on the default key and one given
/// `llbus/<topic>` start side by side, and each sample is published twice into the bus.
#[test]
fn one_topic_imported_on_its_default_key_twice_is_published_once() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 256);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    gateway.import::<Tick>(&mut bus, Import::new().key("llbus/review2.tick"));
    let Ok(mut running) = bus.start() else {
        return; // Refused at start: the promise holds.
    };
    let Ok(gateway) = gateway.start(&mut running, a) else {
        running.stop();
        let _ = running.join();
        return; // Refused at the gateway's start: the promise holds.
    };
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let t = matched_publisher(&client, "llbus/review2.tick");
    for n in 0..10 {
        put_tick(
            &t,
            n,
            Some(attachment::<Tick>(0, 1, n)),
            bincode_encoding::<Tick>(),
        );
    }
    let _ = counts_when(&gateway, |c| c.published >= 20);
    std::thread::sleep(Duration::from_millis(200));
    let counts = gateway.counts();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.published, 10, "10 samples put: {counts:?}");
}

/// `Gateway::wait_matched(timeout)` "waits until every export's key has a matching zenoh
/// subscriber ..., or `timeout` passes". A caller that means "as long as it takes" passes
/// `Duration::MAX`: the wait must not panic on the deadline's arithmetic.
#[test]
fn wait_matched_with_the_longest_timeout_does_not_panic() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let peer = zenoh::open(b).wait().expect("the peer opens");
    let subscriber = peer
        .declare_subscriber("llbus/review2.tick")
        .callback(|_| {})
        .wait()
        .expect("a subscriber");
    let gateway = Arc::new(gateway);
    let waited = {
        let gateway = Arc::clone(&gateway);
        within(LIMIT, move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gateway.wait_matched(Duration::MAX)
            }))
        })
    };
    drop(subscriber);
    let _ = within(LIMIT, move || peer.close().wait());
    let app = running.publisher(app).expect("the handle");
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    if let Ok(gateway) = Arc::try_unwrap(gateway) {
        gateway.close();
    }
    match waited {
        Ok(Ok(matched)) => assert!(matched, "a subscriber was there"),
        Ok(Err(_)) => panic!("wait_matched(Duration::MAX) panicked"),
        Err(_) => panic!("wait_matched(Duration::MAX) did not return although matched"),
    }
}

/// `Gateway::close`'s rustdoc and docs/ZENOH.md "Stop": closed while its bus still runs, each
/// export puts what is queued "for at most a second", and close "returns while publishers keep
/// sending". With the export's only zenoh peer stalled (zenoh's `Block` congestion control, the
/// default, makes a put wait) close must still return close to that second (here it takes
/// about 2.2 s: the drain's second and the session's close; 4 s allows for a loaded machine);
/// the bus then counts the rest lost on the edge, and the edge balances.
#[test]
fn close_on_a_running_bus_behind_a_stalled_peer_returns_within_its_drain_bound() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Blob>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Blob>(&mut bus, Export::new().capacity(8));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");
    let peer = zenoh::open(b).wait().expect("the peer opens");
    let stall = Arc::new(AtomicBool::new(true));
    let subscriber = {
        let stall = Arc::clone(&stall);
        peer.declare_subscriber("llbus/review2.blob")
            .callback(move |_| {
                let start = Instant::now();
                while stall.load(Ordering::Acquire) && start.elapsed() < LIMIT {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .wait()
            .expect("a subscriber")
    };
    assert!(gateway.wait_matched(LIMIT), "the peer never matched");
    let data = vec![7u8; 64 << 10];
    let mut sent = 0u64;
    for _ in 0..400 {
        if app.publish(Blob { data: data.clone() }).is_ok() {
            sent += 1;
        }
    }
    // The ring is full and the export's put waits on the stalled peer.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let closed = within(Duration::from_secs(8), move || {
        (gateway.close(), started.elapsed())
    });
    // Released only now: close had its 8 s behind the stalled peer.
    stall.store(false, Ordering::Release);
    drop(subscriber);
    let (counts, took) = closed
        .or_else(|rx| rx.recv_timeout(LIMIT))
        .expect("close returns once the peer is released");
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let _ = within(LIMIT, move || peer.close().wait());
    let edge = report
        .edge(Blob::TOPIC, "app", "zenoh-export:review2.blob")
        .expect("the export's edge");
    assert_eq!(edge.published, sent, "{edge:?}");
    assert_eq!(
        sent,
        counts.put + counts.put_failed + edge.dropped + edge.lost,
        "{edge:?} {counts:?}"
    );
    assert!(
        took < Duration::from_secs(4),
        "close on a running bus took {took:?} behind a stalled peer (drain bound: 1 s)"
    );
}

/// A hostile sender's thread: puts well-formed samples of `T` on `key` until `sending` clears
/// (or `LIMIT`), then gives how many it put.
fn flood<T: Message>(
    client: &zenoh::Session,
    key: &'static str,
    sending: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let client = client.clone();
    let sending = Arc::clone(sending);
    std::thread::spawn(move || {
        let publisher = matched_publisher(&client, key);
        let encoding = zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema(T::TOPIC);
        let start = Instant::now();
        let mut n = 0u64;
        while sending.load(Ordering::Acquire) && start.elapsed() < LIMIT {
            let attachment = Attachment {
                topic_id: T::TOPIC_ID,
                fingerprint: T::FINGERPRINT,
                stream: 9,
                sequence: n,
                sent_ns: 0,
            };
            let payload =
                bincode::serde::encode_to_vec(n, bincode::config::legacy()).expect("bincode");
            if publisher
                .put(payload)
                .encoding(encoding.clone())
                .attachment(attachment.encode().to_vec())
                .wait()
                .is_err()
            {
                break;
            }
            n += 1;
        }
        n
    })
}

/// `Gateway::close`'s rustdoc: "the imports stop taking samples ..., and callbacks still
/// running are waited for, so the figures returned are final and balance". With two imports
/// flooded at once (the second still taking samples while the first closes), close returns
/// promptly, and what it returns is what the bus's report shows for both imports after the
/// join: nothing counted after close.
#[test]
fn close_while_two_imports_are_flooded_returns_final_figures_promptly() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let ticks = bus.subscription_with::<Tick>("ticks", Backpressure::DropNewest, 64);
    let tocks = bus.subscription_with::<Tock>("tocks", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    gateway.import::<Tock>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let ticks = running.subscription(ticks).expect("the handle");
    let tocks = running.subscription(tocks).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let sending = Arc::new(AtomicBool::new(true));
    let senders = [
        flood::<Tick>(&client, "llbus/review2.tick", &sending),
        flood::<Tock>(&client, "llbus/review2.tock", &sending),
    ];
    let _ = counts_when(&gateway, |c| c.received > 2000);
    let started = Instant::now();
    let closed = within(LIMIT, move || (gateway.close(), started.elapsed()));
    let (counts, took) = closed.expect("close returned while samples arrive");
    std::thread::sleep(Duration::from_millis(100));
    sending.store(false, Ordering::Release);
    let sent: u64 = senders
        .into_iter()
        .map(|s| s.join().expect("a sender"))
        .sum();
    drop((ticks, tocks));
    running.stop();
    let report = running.join().expect("the bus joins");
    let _ = client.close().wait();
    let metric = |topic: &str, name: &str| {
        report
            .actor(&format!("zenoh-import:{topic}"))
            .and_then(|row| row.metric(name))
            .unwrap_or(0)
    };
    let after = (
        metric(Tick::TOPIC, "zenoh.received") + metric(Tock::TOPIC, "zenoh.received"),
        metric(Tick::TOPIC, "zenoh.published") + metric(Tock::TOPIC, "zenoh.published"),
    );
    assert!(
        counts.published > 2000 && counts.received <= sent,
        "{counts:?}, {sent} sent"
    );
    assert_eq!(
        counts.received,
        counts.published + counts.refused + counts.malformed + counts.stopped,
        "{counts:?}"
    );
    assert_eq!(
        after,
        (counts.received, counts.published),
        "close returned {counts:?}; the report after the join says (received, published) {after:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "close took {took:?} while samples arrived"
    );
}
