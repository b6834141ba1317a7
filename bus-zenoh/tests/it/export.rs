//! Exports: a publisher never waits for zenoh (a stalled or vanished peer), a stop without a
//! join ends the export's thread, one topic goes out in both encodings on two keys, a message
//! that does not encode is counted and leaves no gap, and `wait_matched` takes any timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use llbus::{Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Export, Gateway, BINCODE_ENCODING};
use serde::{Deserialize, Serialize};

use crate::fixtures::*;

/// The bus's `stop()` runs without `join()` (RunningBus::stop's rustdoc), and the export's
/// thread ends once its subscription closes (docs/ZENOH.md "Stop"): a gateway closed after a
/// stop but before the join returns, and the books balance: sent = put + put failed + dropped +
/// lost at the export.
#[test]
fn a_stop_without_join_ends_the_export_thread_and_the_books_balance() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, _b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Quote>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Quote>(&mut bus, Export::new().capacity(64));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");
    let mut sent = 0u64;
    for n in 0..2000 {
        if app.publish(quote(n)).is_ok() {
            sent += 1;
        }
    }
    running.stop();
    // No join: the gateway closes while the bus's stop runs on its own driver.
    let counts = within(LIMIT, move || gateway.close())
        .unwrap_or_else(|_| panic!("Gateway::close did not return after a stop without join"));
    drop(app);
    let report = running.join().expect("the bus joins");
    let edge = export_edge::<Quote>(&report, "app");
    assert_eq!(edge.published, sent, "{edge:?}");
    assert_edge_balances(edge);
    assert_eq!(edge.in_flight, 0, "nothing left in the ring: {edge:?}");
    assert_eq!(
        edge.handled,
        counts.put + counts.put_failed,
        "{edge:?} {counts:?}"
    );
    assert_eq!(
        sent,
        counts.put + counts.put_failed + edge.dropped + edge.lost,
        "{edge:?} {counts:?}"
    );
}

/// docs/ZENOH.md "Export": a publisher never waits for zenoh; what the export's thread cannot
/// take in time is counted dropped on the edge by the bus. A zenoh peer whose subscriber stalls
/// (so zenoh's `Block` congestion control holds the export's puts), then vanishes: the app's
/// publishes never block, the stall's losses are counted, the gateway closes in bounded time
/// and sent = put + put failed + dropped + lost.
#[test]
fn a_stalled_then_vanished_zenoh_peer_never_blocks_the_publisher() {
    let _zenoh = crate::fixtures::zenoh_threads(true);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Blob>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Blob>(&mut bus, Export::new().capacity(8));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");

    let peer = zenoh::open(b).wait().expect("the peer session opens");
    let (release, released) = mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let stalled = Arc::new(AtomicBool::new(true));
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let subscriber = {
        let stalled = Arc::clone(&stalled);
        let seen = Arc::clone(&seen);
        peer.declare_subscriber("llbus/test.blob")
            .callback(move |_| {
                seen.fetch_add(1, Ordering::Relaxed);
                if stalled.load(Ordering::Acquire) {
                    // Stalls zenoh's receiving side until released (or the limit).
                    let _ = released.lock().map(|r| r.recv_timeout(LIMIT));
                }
            })
            .wait()
            .expect("a subscriber")
    };
    assert!(gateway.wait_matched(LIMIT), "the peer never matched");
    let blob = vec![7u8; 64 << 10];
    let total = 1000u64;
    let mut sent = 0u64;
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    for n in 0..total {
        let t = Instant::now();
        if app
            .publish(Blob {
                n,
                data: blob.clone(),
            })
            .is_ok()
        {
            sent += 1;
        }
        slowest = slowest.max(t.elapsed());
    }
    let publishing = start.elapsed();
    let during = running.snapshot();
    let edge = export_edge::<Blob>(&during, "app").clone();
    // The peer vanishes: released, its subscriber and session gone.
    stalled.store(false, Ordering::Release);
    let _ = release.send(());
    drop(subscriber);
    within(LIMIT, move || peer.close().wait())
        .unwrap_or_else(|_| panic!("the peer's session did not close"))
        .expect("the peer closes");
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let counts = within(LIMIT, move || gateway.close())
        .unwrap_or_else(|_| panic!("Gateway::close did not return after the peer vanished"));
    let end = export_edge::<Blob>(&report, "app");
    assert_edge_balances(&edge);
    assert_edge_balances(end);
    assert!(
        edge.dropped > 0,
        "64 MiB into a stalled peer drop nothing? {edge:?} (seen {})",
        seen.load(Ordering::Relaxed)
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a publish took {slowest:?} (all {total}: {publishing:?})"
    );
    assert_eq!(end.published, sent, "{end:?}");
    assert_eq!(
        sent,
        counts.put + counts.put_failed + end.dropped + end.lost,
        "{end:?} {counts:?}"
    );
}

/// docs/ZENOH.md: bincode between llbus processes, JSON for clients in other languages, each an
/// `Export` with its own encoding and key. A topic served both ways (two exports of one topic,
/// on two keys) starts; each key then carries every message in its encoding.
#[test]
fn one_topic_exported_in_both_encodings_on_two_keys() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    gateway.export::<Tick>(
        &mut bus,
        Export::new()
            .encoding(llbus_zenoh::PayloadEncoding::Json)
            .key("json/test.tick"),
    );
    // The keyed export's handle is `zenoh-export:<topic>@<key>`, so the two do not clash.
    let mut running = bus
        .start()
        .expect("the bus starts with one topic on two keys");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let client = zenoh::open(b).wait().expect("the client session opens");
    let bincode = client
        .declare_subscriber("llbus/test.tick")
        .wait()
        .expect("a subscriber");
    let json = client
        .declare_subscriber("json/test.tick")
        .wait()
        .expect("a subscriber");
    assert!(gateway.wait_matched(LIMIT), "the client never matched");
    let mut app = running.publisher(app).expect("the handle");
    for n in 0..3 {
        app.publish(Tick { n }).expect("published");
    }
    let mut got = (Vec::new(), Vec::new());
    for n in 0..3 {
        let s = bincode
            .recv_timeout(LIMIT)
            .expect("open")
            .unwrap_or_else(|| panic!("bincode sample {n} never came"));
        got.0.push(s.encoding().to_string());
        let s = json
            .recv_timeout(LIMIT)
            .expect("open")
            .unwrap_or_else(|| panic!("JSON sample {n} never came"));
        let v: serde_json::Value = serde_json::from_slice(&s.payload().to_bytes()).expect("JSON");
        got.1.push(v["n"].as_u64());
    }
    assert_eq!(got.1, vec![Some(0), Some(1), Some(2)]);
    assert!(
        got.0.iter().all(|e| e.starts_with(BINCODE_ENCODING)),
        "{got:?}"
    );
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let counts = gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!(counts.put, 6, "{counts:?}");
    assert!(
        report
            .edges
            .iter()
            .filter(|e| e.topic == Tick::TOPIC)
            .count()
            == 2,
        "two export edges: {:?}",
        report.edges
    );
}

/// A message whose JSON cannot be written (a map with tuple keys).
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "test.grid")]
struct Grid {
    cells: std::collections::BTreeMap<(u8, u8), u8>,
}

/// docs/ZENOH.md "Stop" and the crate's rustdoc: a message the export took is put, or counted
/// `zenoh.put_failed` (a message that does not encode); sequence numbers count samples put, so
/// a failed encode is not a gap the other end counts lost.
#[test]
fn a_message_that_does_not_encode_is_counted_put_failed_and_leaves_no_gap() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Grid>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Grid>(
        &mut bus,
        Export::new().encoding(llbus_zenoh::PayloadEncoding::Json),
    );
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let client = zenoh::open(b).wait().expect("the client session opens");
    let samples = client
        .declare_subscriber("llbus/test.grid")
        .wait()
        .expect("a subscriber");
    assert!(gateway.wait_matched(LIMIT), "the client never matched");
    let mut app = running.publisher(app).expect("the handle");
    let empty = Grid {
        cells: std::collections::BTreeMap::new(),
    };
    let unwritable = Grid {
        cells: [((1, 2), 3)].into_iter().collect(),
    };
    for g in [empty.clone(), unwritable, empty] {
        app.publish(g).expect("published");
    }
    let mut sequences = Vec::new();
    for _ in 0..2 {
        let s = samples
            .recv_timeout(LIMIT)
            .expect("open")
            .expect("a sample within the limit");
        let a = s
            .attachment()
            .and_then(|a| Attachment::decode(&a.to_bytes()))
            .expect("the gateway's attachment");
        sequences.push(a.sequence);
    }
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let counts = gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!((counts.put, counts.put_failed), (2, 1), "{counts:?}");
    assert_eq!(sequences, vec![0, 1], "no gap for the failed encode");
    let edge = export_edge::<Grid>(&report, "app");
    assert_eq!(edge.handled, 3, "{edge:?}");
    assert_edge_balances(edge);
}

/// `Gateway::wait_matched(timeout)` "waits until every export's key has a matching zenoh
/// subscriber ..., or `timeout` passes". A caller that means "as long as it takes" passes
/// `Duration::MAX`: the wait must not panic on the deadline's arithmetic.
#[test]
fn wait_matched_with_the_longest_timeout_does_not_panic() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let peer = zenoh::open(b).wait().expect("the peer opens");
    let subscriber = peer
        .declare_subscriber("llbus/test.tick")
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
