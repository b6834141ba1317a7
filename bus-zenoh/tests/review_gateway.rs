//! An adversarial review of the zenoh gateway's promises (docs/ZENOH.md, docs/CONTRACT.md "The
//! zenoh gateway", SECURITY.md's zenoh paragraph, the crate's rustdoc), as a user and as a
//! hostile zenoh client on the same key space: a second zenoh session opened here, a peer on
//! loopback with scouting off, that puts whatever it likes on an import's key.
//!
//! Every test ends by itself: each wait is bounded by `LIMIT`, and a call that could hang (a
//! close) runs on a thread of its own, waited for with a timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, EdgeReport, Message, Report};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Export, Gateway, Import, BINCODE_ENCODING};
use serde::{Deserialize, Serialize};

mod common;
use common::*;

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review.quote")]
struct Quote {
    px: f64,
    qty: u32,
    venue: String,
}

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review.tick")]
struct Tick {
    n: u64,
}

#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review.blob")]
struct Blob {
    n: u64,
    data: Vec<u8>,
}

fn quote(n: u32) -> Quote {
    Quote {
        px: 100.0 + f64::from(n),
        qty: n,
        venue: "XPAR".to_owned(),
    }
}

fn bincode_of<T: Serialize>(msg: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(msg, bincode::config::legacy()).expect("bincode")
}

fn json_encoding<T: Message>() -> zenoh::bytes::Encoding {
    zenoh::bytes::Encoding::APPLICATION_JSON.with_schema(T::TOPIC)
}

/// The export edge of topic `T` from the app publisher `app`.
fn export_edge<'a, T: Message>(report: &'a Report, app: &str) -> &'a EdgeReport {
    report
        .edge(T::TOPIC, app, &format!("zenoh-export:{}", T::TOPIC))
        .expect("the export's edge")
}

/// An edge balances: everything published is handled, dropped, conflated, lost or in flight.
fn assert_edge_balances(edge: &EdgeReport) {
    assert_eq!(
        edge.published,
        edge.handled + edge.panicked + edge.dropped + edge.conflated + edge.lost + edge.in_flight,
        "the edge does not balance: {edge:?}"
    );
}

/// docs/ZENOH.md "Stop" and `Gateway::close`'s rustdoc: closing the gateway while the bus still
/// runs puts what is queued now and counts the rest lost on the edges. It must return while a
/// publisher keeps publishing (a user who closes the gateway first, or on an error path).
#[test]
fn close_returns_while_a_publisher_keeps_sending() {
    let (a, _b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Quote>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Quote>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");

    let sending = Arc::new(AtomicBool::new(true));
    let sender = {
        let sending = Arc::clone(&sending);
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut sent = 0u64;
            while sending.load(Ordering::Acquire) && start.elapsed() < LIMIT {
                if app.publish(quote(1)).is_ok() {
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (app, sent)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let closed = within(Duration::from_secs(5), move || gateway.close());
    sending.store(false, Ordering::Release);
    let (app, sent) = sender.join().expect("the sender thread");
    let returned_while_sending = closed.is_ok();
    let counts = closed
        .or_else(|rx| rx.recv_timeout(LIMIT))
        .expect("close returns at least once the publisher stopped");
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let edge = export_edge::<Quote>(&report, "app");
    assert_eq!(edge.published, sent, "{edge:?}");
    assert_edge_balances(edge);
    assert_eq!(
        edge.handled,
        counts.put + counts.put_failed,
        "{edge:?} {counts:?}"
    );
    assert!(
        returned_while_sending,
        "Gateway::close did not return within 5 s while a publisher sent every millisecond \
         (it returned only once the publisher stopped; {sent} sent)"
    );
}

/// The bus's `stop()` runs without `join()` (RunningBus::stop's rustdoc), and the export's
/// thread ends once its subscription closes (docs/ZENOH.md "Stop"): a gateway closed after a
/// stop but before the join returns, and the books balance: sent = put + put failed + dropped +
/// lost at the export.
#[test]
fn a_stop_without_join_ends_the_export_thread_and_the_books_balance() {
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

/// SECURITY.md: "anything malformed is counted and dropped, never a panic"; the crate's rustdoc:
/// "It never panics on what the network sends". A hostile client forges a stream's sequence
/// numbers to jump to 2^64-1 on two imported topics: `Gateway::counts` sums the two `lost`
/// figures and must not overflow.
#[test]
fn forged_sequence_jumps_cannot_make_the_gateway_figures_panic() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let quotes = bus.subscription_with::<Quote>("quotes", Backpressure::DropNewest, 64);
    let ticks = bus.subscription_with::<Tick>("ticks", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let quotes = running.subscription(quotes).expect("the handle");
    let ticks = running.subscription(ticks).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/review.quote");
    let t = matched_publisher(&client, "llbus/review.tick");
    for sequence in [0, u64::MAX] {
        q.put(bincode_of(&quote(1)))
            .encoding(bincode_encoding::<Quote>())
            .attachment(attachment::<Quote>(0, 99, sequence).to_vec())
            .wait()
            .expect("the put");
        t.put(bincode_of(&Tick { n: 1 }))
            .encoding(bincode_encoding::<Tick>())
            .attachment(attachment::<Tick>(0, 99, sequence).to_vec())
            .wait()
            .expect("the put");
    }
    let counts = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        counts_when(&gateway, |c| c.received == 4)
    }));
    let report = running.snapshot();
    let lost_each = report
        .actor("zenoh-import:review.quote")
        .and_then(|r| r.metric("zenoh.lost"));
    drop((quotes, ticks));
    running.stop();
    running.join().expect("the bus joins");
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gateway.close()));
    client.close().wait().expect("the client closes");
    let counts = counts.expect("Gateway::counts panicked on figures a hostile peer chose");
    assert!(closed.is_ok(), "Gateway::close panicked too");
    assert_eq!(counts.received, 4, "{counts:?}");
    assert!(
        counts.lost <= counts.received,
        "two forged samples per topic count {:?} lost per topic: a peer chooses the figure",
        lost_each
    );
}

/// docs/ZENOH.md "What an import checks": a sample older than one already seen of its stream
/// is delivered and counted late; a sample of a new stream starts it anywhere (no loss counted
/// before it); a gap is counted lost. Backwards jumps and duplicates through zenoh.
#[test]
fn backward_jumps_and_duplicates_are_late_and_delivered_gaps_lost() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Quote>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/review.quote");
    // Stream 5 starts at 1000 (no loss before it), goes back (late), repeats (late), skips 3.
    let sequences = [1000u64, 1001, 998, 1001, 1002, 1006, 1007];
    for (i, &s) in sequences.iter().enumerate() {
        let n = u32::try_from(i).expect("small");
        q.put(serde_json::to_vec(&quote(n)).expect("JSON"))
            .encoding(json_encoding::<Quote>())
            .attachment(attachment::<Quote>(0, 5, s).to_vec())
            .wait()
            .expect("the put");
    }
    let total = sequences.len() as u64;
    let counts = counts_when(&gateway, |c| c.received == total);
    let mut got = Vec::new();
    while got.len() < sequences.len() {
        match app.recv_timeout(LIMIT) {
            Ok(m) => got.push(m.qty),
            Err(e) => panic!("only {got:?} delivered: {e:?}"),
        }
    }
    assert_eq!(
        got,
        vec![0, 1, 2, 3, 4, 5, 6],
        "every sample delivered, in order"
    );
    assert_eq!(counts.published, total, "{counts:?}");
    assert_eq!(counts.late, 2, "{counts:?}");
    assert_eq!(counts.lost, 3, "{counts:?}");
    assert_eq!(
        counts.received,
        counts.published + counts.refused + counts.malformed + counts.stopped
    );
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
}

/// SECURITY.md and docs/ZENOH.md: anything malformed is counted malformed and dropped, never a
/// panic; bincode decodes bounded. Shapes the existing hostile test does not try: JSON of the
/// right shape with wrong field types, an integer out of range, `null`, JSON nested 100,000
/// deep, a 4 MiB bincode payload of garbage, a 4 MiB JSON string, bincode with the encoding of
/// another topic; then a good sample still passes.
#[test]
fn wrong_types_deep_nesting_and_huge_payloads_are_malformed_never_a_panic() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Quote>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/review.quote");
    let json = json_encoding::<Quote>();
    let bincode = bincode_encoding::<Quote>();
    let deep = "[".repeat(100_000).into_bytes();
    let mut huge_string = b"{\"px\": 1.0, \"qty\": 1, \"venue\": \"".to_vec();
    huge_string.extend(std::iter::repeat_n(b'a', 4 << 20));
    // A string that is not closed: the 4 MiB are read, then refused.
    let mut garbage = vec![0xffu8; 4 << 20];
    garbage[..8].copy_from_slice(&1.0f64.to_le_bytes());
    let hostile: Vec<(Vec<u8>, zenoh::bytes::Encoding)> = vec![
        (
            br#"{"px": 1.0, "qty": "seven", "venue": "X"}"#.to_vec(),
            json.clone(),
        ),
        (
            br#"{"px": 1.0, "qty": 4294967296, "venue": "X"}"#.to_vec(),
            json.clone(),
        ),
        (
            br#"{"px": 1.0, "qty": -1, "venue": "X"}"#.to_vec(),
            json.clone(),
        ),
        (b"null".to_vec(), json.clone()),
        (
            br#"{"px": 1.0, "qty": 1, "venue": 5}"#.to_vec(),
            json.clone(),
        ),
        (deep, json.clone()),
        (huge_string, json.clone()),
        (garbage, bincode.clone()),
        (
            bincode_of(&quote(1)),
            zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema("review.other"),
        ),
    ];
    let malformed = hostile.len() as u64;
    for (i, (payload, encoding)) in hostile.into_iter().enumerate() {
        q.put(payload)
            .encoding(encoding)
            .attachment(attachment::<Quote>(0, 3, i as u64).to_vec())
            .wait()
            .expect("the put");
    }
    let good = quote(42);
    q.put(bincode_of(&good))
        .encoding(bincode)
        .attachment(attachment::<Quote>(0, 3, malformed).to_vec())
        .wait()
        .expect("the put");
    let got = app.recv_timeout(LIMIT).expect("the good sample arrives");
    assert_eq!(got, good);
    let counts = counts_when(&gateway, |c| c.received == malformed + 1);
    assert_eq!(counts.malformed, malformed, "{counts:?}");
    assert_eq!(counts.published, 1, "{counts:?}");
    assert_eq!(counts.lost, 0, "{counts:?}");
    assert_eq!(
        gateway.errors().len(),
        1,
        "malformed samples are reported once: {:?}",
        gateway.errors()
    );
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
}

/// docs/ZENOH.md: the first refusal of each stream is reported, the rest counted; the stream
/// table is bounded. A hostile client opens thousands of streams, good and of a wrong
/// fingerprint: every sample is counted, the kept errors stay bounded, and a good sample of a
/// fresh stream still passes.
#[test]
fn thousands_of_streams_are_all_counted_and_the_errors_stay_bounded() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 8192);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/review.tick");
    let streams = 3000u64;
    for s in 0..streams {
        for fingerprint_xor in [0, 1] {
            t.put(bincode_of(&Tick { n: s }))
                .encoding(bincode_encoding::<Tick>())
                .attachment(attachment::<Tick>(fingerprint_xor, 1_000_000 + s, s).to_vec())
                .wait()
                .expect("the put");
        }
    }
    let counts = counts_when(&gateway, |c| c.received == 2 * streams);
    assert_eq!(counts.received, 2 * streams, "{counts:?}");
    assert_eq!(counts.refused, streams, "{counts:?}");
    assert_eq!(counts.published, streams, "{counts:?}");
    assert_eq!(
        counts.lost, 0,
        "each stream starts where it is first seen: {counts:?}"
    );
    let errors = gateway.errors();
    assert!(
        !errors.is_empty() && errors.len() <= 64,
        "{} errors kept",
        errors.len()
    );
    assert!(
        errors[0].contains("fingerprint") && errors[0].contains("review.tick"),
        "{}",
        errors[0]
    );
    let mut delivered = 0u64;
    while app.try_recv().is_ok() {
        delivered += 1;
    }
    assert_eq!(delivered, streams);
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
}

/// docs/ZENOH.md "Import": a full ring drops and counts on the edge, it never blocks zenoh. An
/// app that does not read: what the import published is on its edge as handled + dropped + in
/// flight, and the import's own figures balance.
#[test]
fn a_slow_import_reader_drops_and_counts_on_its_edge() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::Block, 16);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/review.tick");
    let total = 500u64;
    for n in 0..total {
        t.put(bincode_of(&Tick { n }))
            .encoding(bincode_encoding::<Tick>())
            .attachment(attachment::<Tick>(0, 8, n).to_vec())
            .wait()
            .expect("the put");
    }
    let counts = counts_when(&gateway, |c| c.received == total);
    assert_eq!(counts.published, total, "{counts:?}");
    let report = running.snapshot();
    let edge = report
        .edge(Tick::TOPIC, "zenoh-import:review.tick", "app")
        .expect("the import's edge");
    assert_eq!(edge.published, total, "{edge:?}");
    assert_edge_balances(edge);
    assert_eq!(edge.in_flight, 16, "{edge:?}");
    assert_eq!(edge.dropped, total - 16, "{edge:?}");
    let mut read = 0u64;
    while app.try_recv().is_ok() {
        read += 1;
    }
    assert_eq!(read, 16);
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
}

/// The crate's rustdoc "Live counters" and docs/ZENOH.md: the import's figures are in the
/// bus's report and live counters, with `received = published + refused + malformed +
/// stopped`. Taken while a hostile client sends a mix of good, refused and malformed samples:
/// `Gateway::counts` balances in every reading; the bus's live row, whose metrics are read one
/// after the other (a reader preempted between two reads sees later outcomes), never shows
/// `received` ahead of the outcomes, and balances once the traffic settles.
#[test]
fn the_import_row_balances_in_every_live_snapshot() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let total = 30_000u64;
    let sender = {
        let client = client.clone();
        std::thread::spawn(move || {
            let t = matched_publisher(&client, "llbus/review.tick");
            for n in 0..total {
                let put = t
                    .put(bincode_of(&Tick { n }))
                    .encoding(bincode_encoding::<Tick>());
                match n % 3 {
                    0 => put.attachment(attachment::<Tick>(0, 1, n).to_vec()).wait(),
                    1 => put.attachment(attachment::<Tick>(1, 2, n).to_vec()).wait(),
                    _ => put.wait(),
                }
                .expect("the put");
            }
        })
    };
    let metric = |r: &Report, name: &str| {
        r.actor("zenoh-import:review.tick")
            .and_then(|row| row.metric(name))
            .unwrap_or(0)
    };
    let mut snapshots = 0u64;
    let mut unbalanced = Vec::new();
    let mut counts_unbalanced = Vec::new();
    let deadline = Instant::now() + LIMIT;
    while Instant::now() < deadline {
        let r = running.snapshot();
        snapshots += 1;
        let received = metric(&r, "zenoh.received");
        let outcomes = metric(&r, "zenoh.published")
            + metric(&r, "zenoh.refused")
            + metric(&r, "zenoh.malformed")
            + metric(&r, "zenoh.stopped");
        if received > outcomes && unbalanced.len() < 5 {
            unbalanced.push((received, outcomes));
        }
        let c = gateway.counts();
        if c.received != c.published + c.refused + c.malformed + c.stopped
            && counts_unbalanced.len() < 5
        {
            counts_unbalanced.push(c);
        }
        if received == total {
            break;
        }
    }
    sender.join().expect("the sender thread");
    let counts = counts_when(&gateway, |c| c.received == total);
    // The row's `received` is stored just after each outcome: wait for the last one.
    let settled_by = Instant::now() + LIMIT;
    let settled = loop {
        let r = running.snapshot();
        if metric(&r, "zenoh.received") == total || Instant::now() >= settled_by {
            break r;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!(counts.received, total, "{counts:?}");
    assert_eq!(
        counts.received,
        counts.published + counts.refused + counts.malformed + counts.stopped,
        "{counts:?}"
    );
    assert_eq!(
        metric(&settled, "zenoh.received"),
        metric(&settled, "zenoh.published")
            + metric(&settled, "zenoh.refused")
            + metric(&settled, "zenoh.malformed")
            + metric(&settled, "zenoh.stopped"),
        "the settled row does not balance"
    );
    assert!(
        unbalanced.is_empty(),
        "of {snapshots} snapshots, some showed received ahead of its outcomes (received, sum \
         of outcomes): {unbalanced:?}"
    );
    assert!(
        counts_unbalanced.is_empty(),
        "Gateway::counts did not balance: {counts_unbalanced:?}"
    );
}

/// docs/ZENOH.md "Export": a publisher never waits for zenoh; what the export's thread cannot
/// take in time is counted dropped on the edge by the bus. A zenoh peer whose subscriber stalls
/// (so zenoh's `Block` congestion control holds the export's puts), then vanishes: the app's
/// publishes never block, the stall's losses are counted, the gateway closes in bounded time
/// and sent = put + put failed + dropped + lost.
#[test]
fn a_stalled_then_vanished_zenoh_peer_never_blocks_the_publisher() {
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
        peer.declare_subscriber("llbus/review.blob")
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

/// docs/ZENOH.md "Stop": samples that arrive at an import once the bus is stopping are counted
/// `zenoh.stopped`, and the import's figures still balance, whether the bus has only been asked
/// to stop or has joined.
#[test]
fn samples_after_a_stop_are_counted_stopped_and_the_import_balances() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/review.tick");
    let put = |n: u64| {
        t.put(bincode_of(&Tick { n }))
            .encoding(bincode_encoding::<Tick>())
            .attachment(attachment::<Tick>(0, 4, n).to_vec())
            .wait()
            .expect("the put");
    };
    put(0);
    assert_eq!(
        app.recv_timeout(LIMIT).expect("the first arrives"),
        Tick { n: 0 }
    );
    running.stop();
    for n in 1..=10 {
        put(n);
    }
    let after_stop = counts_when(&gateway, |c| c.received == 11);
    let report = running.join().expect("the bus joins");
    for n in 11..=20 {
        put(n);
    }
    let after_join = counts_when(&gateway, |c| c.received == 21);
    let counts = gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!(after_stop.received, 11, "{after_stop:?}");
    assert_eq!(after_stop.published, 1, "{after_stop:?}");
    assert_eq!(after_stop.stopped, 10, "{after_stop:?}");
    assert_eq!(after_join.stopped, 20, "{after_join:?}");
    assert_eq!(counts, after_join);
    assert_eq!(
        counts.received,
        counts.published + counts.refused + counts.malformed + counts.stopped,
        "{counts:?}"
    );
    let edge = report
        .edge(Tick::TOPIC, "zenoh-import:review.tick", "app")
        .expect("the import's edge");
    assert_eq!(edge.published, counts.published, "{edge:?}");
    assert_edge_balances(edge);
}

/// `GatewayBuilder::start`'s rustdoc: zenoh refusing a declaration is an error, and what was
/// started is closed again. An export on a key zenoh refuses (an empty chunk) after a good one: `start` returns the error in bounded time, the good export's thread ends, and the bus
/// keeps running and stops normally without a publisher ever waiting.
#[test]
fn a_refused_declaration_fails_start_and_closes_what_was_started() {
    let (a, _b) = peers();
    let mut bus = Bus::builder();
    let quotes = bus.publisher::<Quote>("quotes");
    let ticks = bus.publisher::<Tick>("ticks");
    let mut gateway = Gateway::builder();
    gateway.export::<Quote>(&mut bus, Export::new());
    gateway.export::<Tick>(&mut bus, Export::new().key("llbus//tick"));
    let mut running = bus.start().expect("the bus starts");
    let (started, running_back) = within(LIMIT, move || {
        let started = gateway.start(&mut running, a).map(|g| g.close());
        (started, running)
    })
    .unwrap_or_else(|_| panic!("GatewayBuilder::start did not return"));
    let mut running = running_back;
    let error = match started {
        Ok(counts) => panic!("an invalid key expression was accepted: {counts:?}"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("zenoh"), "{error}");
    let mut quotes = running.publisher(quotes).expect("the handle");
    let mut ticks = running.publisher(ticks).expect("the handle");
    let start = Instant::now();
    for n in 0..5000 {
        quotes.publish(quote(n)).expect("the bus runs");
        ticks
            .publish(Tick { n: u64::from(n) })
            .expect("the bus runs");
    }
    assert!(
        start.elapsed() < LIMIT,
        "publishing into the gateway's orphaned subscriptions waited"
    );
    drop((quotes, ticks));
    running.stop();
    let report = running.join().expect("the bus joins");
    let keyed = report
        .edge(Tick::TOPIC, "ticks", "zenoh-export:review.tick@llbus//tick")
        .expect("the keyed export's edge");
    for edge in [export_edge::<Quote>(&report, "quotes"), keyed] {
        assert_eq!(edge.published, 5000, "{edge:?}");
        assert_edge_balances(edge);
    }
}

/// docs/ZENOH.md "What a sample says": JSON has no NaN or infinity, so a JSON export puts such
/// a float as `null` (serde_json), and an llbus import counts that sample malformed; bincode is
/// the encoding between llbus processes. The books balance: every message the export took is
/// put, and every sample the import received is published or counted malformed.
#[test]
fn a_json_export_of_a_nan_float_is_counted_malformed_by_an_llbus_import() {
    let (a, b) = peers();
    let mut out = Bus::builder();
    let app = out.publisher::<Quote>("app");
    let mut exporter = Gateway::builder();
    exporter.export::<Quote>(
        &mut out,
        Export::new().encoding(llbus_zenoh::PayloadEncoding::Json),
    );
    let mut out = out.start().expect("the exporting bus starts");
    let exporter = exporter
        .start(&mut out, a)
        .expect("the export gateway starts");
    let mut inn = Bus::builder();
    let reader = inn.subscription_with::<Quote>("reader", Backpressure::DropNewest, 64);
    let mut importer = Gateway::builder();
    importer.import::<Quote>(&mut inn, Import::new());
    let mut inn = inn.start().expect("the importing bus starts");
    let importer = importer
        .start(&mut inn, b)
        .expect("the import gateway starts");
    let mut reader = inn.subscription(reader).expect("the handle");
    assert!(exporter.wait_matched(LIMIT), "the import never matched");
    let mut app = out.publisher(app).expect("the handle");
    for px in [f64::NAN, f64::INFINITY, 1.5] {
        app.publish(Quote {
            px,
            qty: 1,
            venue: "X".to_owned(),
        })
        .expect("published");
    }
    let delivered = reader.recv_timeout(LIMIT).map(|q| q.px);
    let got = counts_when(&importer, |c| c.received == 3);
    let errors = importer.errors();
    drop(app);
    out.stop();
    out.join().expect("the exporting bus joins");
    let put = exporter.close();
    drop(reader);
    inn.stop();
    inn.join().expect("the importing bus joins");
    importer.close();
    assert_eq!((put.put, put.put_failed), (3, 0), "{put:?}");
    assert_eq!(delivered, Ok(1.5), "the finite float crosses");
    assert_eq!(
        (got.received, got.published, got.malformed),
        (3, 1, 2),
        "{got:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("malformed")),
        "the malformed samples are reported: {errors:?}"
    );
}

/// README "Beyond one LAN" (a gateway carries topics "into zenoh and back") and docs/ZENOH.md:
/// a gateway that both exports and imports one topic would feed its own puts back into the bus
/// (an echo that grows without end), so `start` refuses it with an error naming the topic, and
/// the bus still stops normally.
#[test]
fn exporting_and_importing_one_topic_is_refused_at_start() {
    let (a, _b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let refused = gateway.start(&mut running, a);
    let mut app = running.publisher(app).expect("the handle");
    app.publish(Tick { n: 1 }).expect("published");
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    match refused {
        Ok(gateway) => {
            let counts = gateway.close();
            panic!("a gateway that exports and imports one topic started: {counts:?}");
        }
        Err(e) => {
            assert!(matches!(e, llbus_zenoh::GatewayError::Echo(_)), "{e:?}");
            let e = e.to_string();
            assert!(e.contains("'review.tick'"), "{e}");
        }
    }
}

/// docs/ZENOH.md "Stop" (close the gateway after the bus) with a zenoh peer that stalls and
/// never recovers while the export's ring is full: `Gateway::close` still returns in bounded
/// time (zenoh's `Block` congestion control gives up on the link), and the books balance.
#[test]
fn close_returns_while_a_zenoh_peer_stays_stalled() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Blob>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Blob>(&mut bus, Export::new().capacity(8));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");
    let peer = zenoh::open(b).wait().expect("the peer session opens");
    let stall = Arc::new(AtomicBool::new(true));
    let subscriber = {
        let stall = Arc::clone(&stall);
        peer.declare_subscriber("llbus/review.blob")
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
    let blob = vec![1u8; 64 << 10];
    let mut sent = 0u64;
    for n in 0..600 {
        if app
            .publish(Blob {
                n,
                data: blob.clone(),
            })
            .is_ok()
        {
            sent += 1;
        }
    }
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let closed = within(Duration::from_secs(15), move || gateway.close());
    stall.store(false, Ordering::Release);
    drop(subscriber);
    let returned = closed.is_ok();
    let counts = closed
        .or_else(|rx| rx.recv_timeout(LIMIT))
        .expect("close returns once the peer is released");
    let _ = within(LIMIT, move || peer.close().wait());
    let edge = export_edge::<Blob>(&report, "app");
    assert_edge_balances(edge);
    assert_eq!(
        sent,
        counts.put + counts.put_failed + edge.dropped + edge.lost,
        "{edge:?} {counts:?}"
    );
    assert!(
        returned,
        "Gateway::close hung more than 15 s behind a stalled peer"
    );
}

/// docs/ZENOH.md: bincode between llbus processes, JSON for clients in other languages, each an
/// `Export` with its own encoding and key. A topic served both ways (two exports of one topic,
/// on two keys) starts; each key then carries every message in its encoding.
#[test]
fn one_topic_exported_in_both_encodings_on_two_keys() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    gateway.export::<Tick>(
        &mut bus,
        Export::new()
            .encoding(llbus_zenoh::PayloadEncoding::Json)
            .key("json/review.tick"),
    );
    // The keyed export's handle is `zenoh-export:<topic>@<key>`, so the two do not clash.
    let mut running = bus
        .start()
        .expect("the bus starts with one topic on two keys");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let client = zenoh::open(b).wait().expect("the client session opens");
    let bincode = client
        .declare_subscriber("llbus/review.tick")
        .wait()
        .expect("a subscriber");
    let json = client
        .declare_subscriber("json/review.tick")
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

/// The crate's rustdoc "Live counters": each export and import is a handle with named metrics,
/// "shown in the bus's report and its live counters file like any other figure" (what `llbus
/// stat` reads). Once the traffic settles, the file's rows carry the gateway's figures.
#[cfg(unix)]
#[test]
fn the_live_counters_file_shows_the_gateways_figures() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    bus.name(&format!("review-zenoh-{}", std::process::id()));
    bus.counters_file(true);
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let quotes = bus.publisher::<Quote>("quotes");
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    gateway.export::<Quote>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let mut quotes = running.publisher(quotes).expect("the handle");
    let path = running
        .counters_path()
        .expect("the bus writes a counters file")
        .to_owned();

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/review.tick");
    for n in 0..45u64 {
        let put = t
            .put(bincode_of(&Tick { n }))
            .encoding(bincode_encoding::<Tick>());
        match n % 9 {
            0..=5 => put.attachment(attachment::<Tick>(0, 6, n).to_vec()).wait(),
            6 | 7 => put.attachment(attachment::<Tick>(1, 6, n).to_vec()).wait(),
            _ => put.wait(),
        }
        .expect("the put");
    }
    for n in 0..7 {
        quotes.publish(quote(n)).expect("published");
    }
    let counts = counts_when(&gateway, |c| c.received == 45 && c.put == 7);
    assert_eq!(
        (
            counts.published,
            counts.refused,
            counts.malformed,
            counts.put
        ),
        (30, 10, 5, 7),
        "{counts:?}"
    );
    let want = [
        ("zenoh-import:review.tick", "zenoh.received", 45),
        ("zenoh-import:review.tick", "zenoh.published", 30),
        ("zenoh-import:review.tick", "zenoh.refused", 10),
        ("zenoh-import:review.tick", "zenoh.malformed", 5),
        ("zenoh-export:review.quote", "zenoh.put", 7),
    ];
    let deadline = Instant::now() + LIMIT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(snapshot) = llbus::read_counters_file(&path) {
            seen = want
                .iter()
                .map(|(row, metric, _)| {
                    snapshot
                        .actors
                        .iter()
                        .find(|a| a.name == *row)
                        .and_then(|a| a.metrics.iter().find(|(n, _)| n == metric))
                        .map(|(_, v)| *v)
                })
                .collect();
            if seen
                .iter()
                .zip(&want)
                .all(|(got, (_, _, w))| *got == Some(*w))
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop((app, quotes));
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
    let wanted: Vec<Option<u64>> = want.iter().map(|w| Some(w.2)).collect();
    assert_eq!(seen, wanted, "the counters file's rows {want:?}");
}

/// `Gateway::close`'s rustdoc: the imports stop taking samples, then it returns the final
/// figures (and `RunningImport::subscriber_closed`: no callback runs after the undeclare
/// returns). While a hostile client keeps sending, the figures `close` returns balance
/// (`received = published + refused + malformed + stopped`) and are final: the bus's report,
/// read after the join, shows no sample taken after them. Several rounds, as the window is
/// narrow.
#[test]
fn close_while_samples_arrive_returns_final_figures() {
    let mut failures = Vec::new();
    for _ in 0..20 {
        if let Err(e) = close_while_samples_arrive() {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// One round of `close_while_samples_arrive_returns_final_figures`: what did not hold.
fn close_while_samples_arrive() -> Result<(), String> {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let sending = Arc::new(AtomicBool::new(true));
    let sender = {
        let client = client.clone();
        let sending = Arc::clone(&sending);
        std::thread::spawn(move || {
            let t = matched_publisher(&client, "llbus/review.tick");
            let start = Instant::now();
            let mut n = 0u64;
            while sending.load(Ordering::Acquire) && start.elapsed() < LIMIT {
                t.put(bincode_of(&Tick { n }))
                    .encoding(bincode_encoding::<Tick>())
                    .attachment(attachment::<Tick>(0, 2, n).to_vec())
                    .wait()
                    .expect("the put");
                n += 1;
            }
            n
        })
    };
    let _ = counts_when(&gateway, |c| c.received > 1000);
    let counts = within(LIMIT, move || gateway.close())
        .unwrap_or_else(|_| panic!("Gateway::close did not return while samples arrive"));
    std::thread::sleep(Duration::from_millis(100));
    sending.store(false, Ordering::Release);
    let sent = sender.join().expect("the sender thread");
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    client.close().wait().expect("the client closes");
    let row = report
        .actor("zenoh-import:review.tick")
        .expect("the import's row");
    let edge = report
        .edge(Tick::TOPIC, "zenoh-import:review.tick", "app")
        .expect("the import's edge");
    assert_edge_balances(edge);
    assert!(
        counts.received > 1000 && counts.received <= sent,
        "{counts:?}"
    );
    if counts.received != counts.published + counts.refused + counts.malformed + counts.stopped {
        return Err(format!("close's figures do not balance: {counts:?}"));
    }
    let after = (
        row.metric("zenoh.received"),
        row.metric("zenoh.published"),
        edge.published,
    );
    if after
        != (
            Some(counts.received),
            Some(counts.published),
            counts.published,
        )
    {
        return Err(format!(
            "close returned {counts:?}, the report after the join (received, published, edge \
             published) {after:?}"
        ));
    }
    Ok(())
}

/// The entry of the child process of `a_killed_zenoh_peer_mid_stream_never_blocks_the_publisher`
/// (this test binary run again, chosen by `LLBUS_REVIEW_ZENOH_CHILD`): a zenoh peer that
/// subscribes to the export's key and waits to be killed. Does nothing in the test run itself.
#[test]
fn review_child_process() {
    let Ok(config) = std::env::var("LLBUS_REVIEW_ZENOH_CHILD") else {
        return;
    };
    let config = zenoh::Config::from_json5(&config).expect("a valid zenoh config");
    let session = zenoh::open(config)
        .wait()
        .expect("the child's session opens");
    let _subscriber = session
        .declare_subscriber("llbus/review.tick")
        .callback(|_| {})
        .wait()
        .expect("a subscriber");
    println!("READY");
    std::thread::sleep(LIMIT);
}

/// docs/ZENOH.md "Export": a publisher never waits for zenoh, and a stop loses nothing
/// uncounted. The export's only zenoh peer is a process killed mid-stream (no goodbye, its TCP
/// connection reset): the app's publishes never wait, the gateway closes in bounded time, and
/// sent = put + put failed + dropped + lost.
#[cfg(unix)]
#[test]
fn a_killed_zenoh_peer_mid_stream_never_blocks_the_publisher() {
    use std::io::BufRead;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let config = |side: &str| {
        format!(
            r#"{{ mode: "peer", {side}: {{ endpoints: ["tcp/127.0.0.1:{port}"] }},
                 scouting: {{ multicast: {{ enabled: false }}, gossip: {{ enabled: false }} }} }}"#
        )
    };
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new().capacity(64));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway
        .start(
            &mut running,
            zenoh::Config::from_json5(&config("listen")).expect("a valid zenoh config"),
        )
        .expect("the gateway starts");
    let mut child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "review_child_process", "--nocapture"])
        .env("LLBUS_REVIEW_ZENOH_CHILD", config("connect"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("its stdout");
    let ready = within(LIMIT, move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("READY"))
    });
    if !matches!(ready, Ok(true)) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child peer never became ready");
    }
    assert!(
        gateway.wait_matched(LIMIT),
        "the child's subscriber never matched"
    );
    let mut app = running.publisher(app).expect("the handle");
    let mut sent = 0u64;
    let mut slowest = Duration::ZERO;
    let mut killed = false;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(1500) {
        if !killed && start.elapsed() > Duration::from_millis(500) {
            child.kill().expect("the child is killed");
            killed = true;
        }
        let t = Instant::now();
        if app.publish(Tick { n }).is_ok() {
            sent += 1;
        }
        slowest = slowest.max(t.elapsed());
        n += 1;
        if n % 64 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let _ = child.wait();
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let counts = within(LIMIT, move || gateway.close())
        .unwrap_or_else(|_| panic!("Gateway::close did not return after the peer was killed"));
    let edge = export_edge::<Tick>(&report, "app");
    assert_edge_balances(edge);
    assert_eq!(edge.published, sent, "{edge:?}");
    assert_eq!(
        sent,
        counts.put + counts.put_failed + edge.dropped + edge.lost,
        "{edge:?} {counts:?}"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a publish waited {slowest:?} while the peer died"
    );
    assert!(counts.put > 0, "nothing put before the kill: {counts:?}");
}

/// docs/ZENOH.md "What an import checks": "the first [refusal] of each stream is reported with
/// an error naming the topic and both fingerprints (`Gateway::errors`, and the log)", and a
/// malformed sample is "reported once". A hostile client that first opens 100 mismatched
/// streams must not hide a later refusal, or the first malformed sample, from
/// `Gateway::errors` (what the subscriber example prints in its RESULT).
#[test]
fn a_flood_of_refused_streams_does_not_hide_later_errors() {
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/review.tick");
    for s in 0..100u64 {
        t.put(bincode_of(&Tick { n: s }))
            .encoding(bincode_encoding::<Tick>())
            .attachment(attachment::<Tick>(1, 5000 + s, 0).to_vec())
            .wait()
            .expect("the put");
    }
    // The genuine mismatch to report: another fingerprint, a stream of its own.
    let genuine = 0xdead_beef_u64;
    t.put(bincode_of(&Tick { n: 0 }))
        .encoding(bincode_encoding::<Tick>())
        .attachment(attachment::<Tick>(genuine, 77, 0).to_vec())
        .wait()
        .expect("the put");
    t.put(vec![1, 2, 3])
        .encoding(bincode_encoding::<Tick>())
        .wait()
        .expect("the put");
    let counts = counts_when(&gateway, |c| c.received == 102);
    let errors = gateway.errors();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!((counts.refused, counts.malformed), (101, 1), "{counts:?}");
    let theirs = format!("{:#018x}", Tick::FINGERPRINT ^ genuine);
    assert!(
        errors.iter().any(|e| e.contains(&theirs)),
        "the refusal of fingerprint {theirs} is not among the {} errors kept",
        errors.len()
    );
    assert!(
        errors.iter().any(|e| e.contains("malformed")),
        "the malformed report is not among the {} errors kept",
        errors.len()
    );
}

/// A message whose JSON cannot be written (a map with tuple keys).
#[derive(Message, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[message(topic = "review.grid")]
struct Grid {
    cells: std::collections::BTreeMap<(u8, u8), u8>,
}

/// docs/ZENOH.md "Stop" and the crate's rustdoc: a message the export took is put, or counted
/// `zenoh.put_failed` (a message that does not encode); sequence numbers count samples put, so
/// a failed encode is not a gap the other end counts lost.
#[test]
fn a_message_that_does_not_encode_is_counted_put_failed_and_leaves_no_gap() {
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
        .declare_subscriber("llbus/review.grid")
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
