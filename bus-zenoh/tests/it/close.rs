//! `Gateway::close`: it returns in bounded time whatever the bus and the zenoh peers do (a
//! publisher that keeps sending, a stalled peer, samples still arriving, two flooded imports),
//! and the figures it returns are final and balance.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Export, Gateway, Import, BINCODE_ENCODING};

use crate::fixtures::*;

/// docs/ZENOH.md "Stop" and `Gateway::close`'s rustdoc: closing the gateway while the bus still
/// runs puts what is queued now and counts the rest lost on the edges. It must return while a
/// publisher keeps publishing (a user who closes the gateway first, or on an error path).
#[test]
fn close_returns_while_a_publisher_keeps_sending() {
    let _zenoh = crate::fixtures::zenoh_threads(true);
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

/// docs/ZENOH.md "Stop" (close the gateway after the bus) with a zenoh peer that stalls and
/// never recovers while the export's ring is full: `Gateway::close` still returns in bounded
/// time (zenoh's `Block` congestion control gives up on the link), and the books balance.
#[test]
fn close_returns_while_a_zenoh_peer_stays_stalled() {
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
    let stall = Arc::new(AtomicBool::new(true));
    let subscriber = {
        let stall = Arc::clone(&stall);
        peer.declare_subscriber("llbus/test.blob")
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

/// `Gateway::close`'s rustdoc: the imports stop taking samples, then it returns the final
/// figures (and `RunningImport::subscriber_closed`: no callback runs after the undeclare
/// returns). While a hostile client keeps sending, the figures `close` returns balance
/// (`received = published + refused + malformed + stopped`) and are final: the bus's report,
/// read after the join, shows no sample taken after them. Several rounds, as the window is
/// narrow.
#[test]
fn close_while_samples_arrive_returns_final_figures() {
    let _zenoh = crate::fixtures::zenoh_threads(true);
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
    let TickImport {
        running,
        gateway,
        app,
        client,
    } = tick_import();
    let sending = Arc::new(AtomicBool::new(true));
    let sender = {
        let client = client.clone();
        let sending = Arc::clone(&sending);
        std::thread::spawn(move || {
            let t = matched_publisher(&client, "llbus/test.tick");
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
        .actor("zenoh-import:test.tick")
        .expect("the import's row");
    let edge = report
        .edge(Tick::TOPIC, "zenoh-import:test.tick", "app")
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

/// `Gateway::close`'s rustdoc and docs/ZENOH.md "Stop": closed while its bus still runs, each
/// export puts what is queued "for at most a second", and close "returns while publishers keep
/// sending". With the export's only zenoh peer stalled (zenoh's `Block` congestion control, the
/// default, makes a put wait) close must still return close to that second (here it takes
/// about 2.2 s: the drain's second and the session's close; 4 s allows for a loaded machine);
/// the bus then counts the rest lost on the edge, and the edge balances.
#[test]
fn close_on_a_running_bus_behind_a_stalled_peer_returns_within_its_drain_bound() {
    let _zenoh = crate::fixtures::zenoh_threads(true);
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
        peer.declare_subscriber("llbus/test.blob")
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
        if app
            .publish(Blob {
                n: 0,
                data: data.clone(),
            })
            .is_ok()
        {
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
        .edge(Blob::TOPIC, "app", "zenoh-export:test.blob")
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
    let _zenoh = crate::fixtures::zenoh_threads(true);
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
        flood::<Tick>(&client, "llbus/test.tick", &sending),
        flood::<Tock>(&client, "llbus/test.tock", &sending),
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
