//! Unit tests of the edges: bursts through both ends (drops, waits, gone subscribers), panics
//! in a handler or a `Clone` part way through a batch, and the race of a `Latest` write with a
//! subscriber that leaves; in every case each message is counted once.

use std::sync::Arc;

use super::wire::make_edge;
use super::{Inputs, OutEdge, Output, Wait};
use crate::runtime::control::Control;
use crate::runtime::metrics::EdgeCounters;
use crate::runtime::Backpressure;
use crate::wait::IdleStrategy;

#[derive(Clone, Debug, PartialEq)]
struct V(u64);

impl crate::Message for V {
    const TOPIC: &'static str = "edge.v";
    const TOPIC_ID: u64 = crate::topic_id("edge.v");
    const FINGERPRINT: u64 = 1;
}

/// The interleaving a racing publisher can produce on a `Latest` edge: it passes its
/// "subscriber gone?" check, the subscriber leaves with an unread value, then the write
/// lands. Each value must be counted once: the unread one lost (the leaving subscriber took
/// it), the late one lost when the edge settles, nothing conflated.
#[test]
fn a_latest_value_is_counted_once_when_the_subscriber_leaves_under_a_write() {
    let counters = Arc::new(EdgeCounters::default());
    let (mut tx, rx) = make_edge::<V>(Backpressure::Latest, 1, true, false, Arc::clone(&counters));
    tx.send(V(1), None);
    drop(rx);
    // The publisher's side of `send` after its abandonment check, as it runs when the
    // subscriber leaves between the two.
    let OutEdge::Latest {
        tx: writer,
        counters: c,
    } = &mut tx
    else {
        panic!("a Latest edge");
    };
    c.publisher.sent.add(1);
    if writer.write(V(2)) {
        c.publisher.conflated.add(1);
    }
    drop(tx);
    let s = counters.snapshot();
    assert_eq!((s.sent, s.conflated, s.subscriber_lost), (2, 0, 2), "{s:?}");
    assert_eq!(s.in_flight(), 0, "{s:?}");
}

/// One output over `edges` edges of `policy`, each of `capacity`, with their counters.
fn fan_out(
    policy: Backpressure,
    capacity: usize,
    edges: usize,
) -> (Output<V>, Vec<Inputs<V>>, Vec<Arc<EdgeCounters>>) {
    let mut out = Output::empty();
    let (mut inputs, mut all) = (Vec::new(), Vec::new());
    for _ in 0..edges {
        let counters = Arc::new(EdgeCounters::default());
        let (tx, rx) = make_edge::<V>(policy, capacity, true, false, Arc::clone(&counters));
        out.edges.push(tx);
        inputs.push(Inputs {
            edges: vec![(0, rx)],
        });
        all.push(counters);
    }
    (out, inputs, all)
}

fn values(range: std::ops::Range<u64>) -> Vec<V> {
    range.map(V).collect()
}

/// A burst goes to every subscriber in order; what does not fit a `DropNewest` ring is
/// counted dropped, per edge, and the books balance.
#[test]
fn a_burst_fills_each_ring_and_counts_the_rest_dropped() {
    let (mut out, mut inputs, counters) = fan_out(Backpressure::DropNewest, 4, 3);
    // The second subscriber already holds one message: it has room for three.
    out.edges[1].send(V(100), None);
    out.publish_slice(&values(0..6), None);
    let mut got = vec![Vec::new(); 3];
    for (i, rx) in inputs.iter_mut().enumerate() {
        rx.poll(64, |V(v)| got[i].push(v));
    }
    assert_eq!(
        got,
        [vec![0, 1, 2, 3], vec![100, 0, 1, 2], vec![0, 1, 2, 3]]
    );
    for (i, c) in counters.iter().enumerate() {
        let s = c.snapshot();
        let (sent, dropped) = if i == 1 { (4, 3) } else { (4, 2) };
        assert_eq!(
            (s.sent, s.dropped, s.handled),
            (sent, dropped, sent),
            "{i}: {s:?}"
        );
        assert_eq!(s.in_flight(), 0, "{i}: {s:?}");
    }
}

/// A burst into a `Block` ring without a wait (`try_publish_slice`) drops what does not
/// fit; into a ring whose subscriber is gone, it is lost, every message of it.
#[test]
fn a_burst_that_cannot_wait_is_dropped_and_one_to_a_gone_subscriber_is_lost() {
    let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 4, 2);
    drop(inputs.pop());
    out.publish_slice(&values(0..7), None);
    let s = counters[0].snapshot();
    assert_eq!((s.sent, s.dropped, s.publisher_lost), (4, 3, 0), "{s:?}");
    let s = counters[1].snapshot();
    assert_eq!((s.published(), s.publisher_lost), (7, 7), "{s:?}");
    assert_eq!(s.in_flight(), 0, "{s:?}");
}

/// A burst larger than a `Block` ring waits for room and arrives whole and in order, every
/// message counted sent once (and those that found the ring full, waited).
#[test]
fn a_burst_larger_than_a_block_ring_waits_and_arrives_whole() {
    let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 4, 1);
    let mut rx = inputs.pop().expect("one input");
    let n = if cfg!(miri) { 40 } else { 10_000 };
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while (got.len() as u64) < n && std::time::Instant::now() < deadline {
            if rx.poll(3, |V(v)| got.push(v)) == 0 {
                std::thread::yield_now();
            }
        }
        got
    });
    let control = Control::new(1, Vec::new());
    let mut idle = crate::wait::Backoff::new();
    for chunk in values(0..n).chunks(7) {
        let idle: &mut (dyn IdleStrategy + 'static) = &mut idle;
        let control = &control;
        out.publish_slice(
            chunk,
            Some(&mut Wait {
                idle,
                control,
                deadline: None,
            }),
        );
    }
    let got = reader.join().expect("reader");
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    let s = counters[0].snapshot();
    assert_eq!(
        (s.sent, s.handled, s.dropped, s.publisher_lost),
        (n, n, 0, 0),
        "{s:?}"
    );
    assert!(s.waited <= n, "{s:?}");
}

/// A handler that panics in the middle of a batch: the messages before it are counted
/// handled (their count is stored once per batch, so it must survive the unwinding), the one
/// it panicked on panicked, and the rest stay in the ring, in flight.
#[test]
fn a_panic_in_a_batch_keeps_the_handled_count_of_the_messages_before_it() {
    let (mut out, mut inputs, counters) = fan_out(Backpressure::Block, 8, 1);
    out.publish_slice(&values(0..6), None);
    let rx = &mut inputs[0];
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rx.poll(64, |V(v)| assert_ne!(v, 2, "the third message"));
    }));
    assert!(unwound.is_err());
    let s = counters[0].snapshot();
    assert_eq!((s.sent, s.handled, s.panicked), (6, 2, 1), "{s:?}");
    assert_eq!(s.in_flight(), 3, "{s:?}");
    let mut rest = Vec::new();
    rx.poll(64, |V(v)| rest.push(v));
    assert_eq!(rest, [3, 4, 5]);
    assert_eq!(counters[0].snapshot().in_flight(), 0);
}

/// A message whose `Clone` panics on the third copy.
#[derive(Debug)]
struct Fragile(u64);

thread_local! {
    static CLONES_LEFT: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

impl Clone for Fragile {
    fn clone(&self) -> Self {
        let left = CLONES_LEFT.with(|c| c.replace(c.get().saturating_sub(1)));
        assert!(left > 0, "clone refused");
        Fragile(self.0)
    }
}

impl crate::Message for Fragile {
    const TOPIC: &'static str = "edge.fragile";
    const TOPIC_ID: u64 = crate::topic_id("edge.fragile");
    const FINGERPRINT: u64 = 2;
}

/// A `Clone` that panics part way through a burst: the clones made before it are in the
/// ring and counted sent, nothing else is, and the books balance once they are handled.
#[test]
fn a_clone_that_panics_in_a_burst_leaves_only_the_clones_made_counted() {
    let counters = Arc::new(EdgeCounters::default());
    let (tx, rx) = make_edge::<Fragile>(Backpressure::Block, 8, true, false, Arc::clone(&counters));
    let mut out = Output { edges: vec![tx] };
    let mut rx = Inputs {
        edges: vec![(0, rx)],
    };
    let burst: Vec<Fragile> = (0..5).map(Fragile).collect();
    CLONES_LEFT.with(|c| c.set(2));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        out.publish_slice(&burst, None);
    }));
    CLONES_LEFT.with(|c| c.set(u32::MAX));
    assert!(unwound.is_err());
    let s = counters.snapshot();
    assert_eq!((s.sent, s.dropped, s.publisher_lost), (2, 0, 0), "{s:?}");
    let mut got = Vec::new();
    rx.poll(64, |Fragile(v)| got.push(v));
    assert_eq!(got, [0, 1]);
    assert_eq!(counters.snapshot().in_flight(), 0);
}
