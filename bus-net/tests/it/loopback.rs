//! Two buses in one process joined by two bridges over loopback: topics cross in both
//! directions, in order, and the figures land in each bus's report; a direct sender publishes
//! from the actor's own thread; late joiners start with the last messages; and a lone message
//! goes out at once, without waiting to fill a datagram (PROTOCOL.md, "Batching").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use llbus::Backpressure;
use llbus::{Actor, Bus, Context, Message, Out, Setup};
use llbus_net::Bridge;
use llbus_net::BridgeConfig;
use serde::{Deserialize, Serialize};
use tests::{metric, wait_for};

use crate::fixtures::loopback;

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.quote")]
struct Quote {
    n: u64,
    px: f64,
    venue: String,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.order")]
struct Order {
    n: u64,
}

/// Publishes `count` quotes once `ready` (a subscriber exists), `per_tick` each tick.
struct Feed {
    out: Out<Quote>,
    next: u64,
    count: u64,
    per_tick: u64,
    ready: Arc<AtomicU64>,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        if self.ready.load(Ordering::Acquire) == 0 {
            return;
        }
        let end = (self.next + self.per_tick).min(self.count);
        for n in self.next..end {
            let venue = "XNAS".to_owned();
            ctx.publish(
                self.out,
                Quote {
                    n,
                    px: 100.0 + n as f64,
                    venue,
                },
            );
        }
        self.next = end;
    }
}

/// Receives quotes, checks their order, answers each with an order.
struct Strategy {
    seen: Arc<Mutex<Vec<u64>>>,
    orders: Out<Order>,
}

impl Actor for Strategy {
    type In = Quote;
    fn on_message(&mut self, q: Quote, ctx: &mut Context<'_>) {
        assert_eq!(q.venue, "XNAS");
        self.seen.lock().unwrap().push(q.n);
        ctx.publish(self.orders, Order { n: q.n });
    }
}

struct OrderSink {
    count: Arc<AtomicU64>,
}

impl Actor for OrderSink {
    type In = Order;
    fn on_message(&mut self, _o: Order, _ctx: &mut Context<'_>) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn topics_cross_between_two_buses_in_both_directions() {
    let _cpu = crate::fixtures::cpu_shared();
    const COUNT: u64 = 20_000;
    let bridge_a = Bridge::bind(loopback()).unwrap().name("net-a");
    let bridge_b = Bridge::bind(loopback()).unwrap().name("net-b");
    let (addr_a, addr_b) = (bridge_a.local_addr(), bridge_b.local_addr());
    let bridge_a = bridge_a.export::<Quote>().import::<Order>(addr_b);
    let bridge_b = bridge_b.import::<Quote>(addr_a).export::<Order>();
    let status_b = bridge_b.status();

    // Host A: the feed (about 100k quotes/s), and a sink for the orders coming back.
    let ready = Arc::new(AtomicU64::new(0));
    let orders = Arc::new(AtomicU64::new(0));
    let mut a = Bus::builder();
    let r = Arc::clone(&ready);
    a.actor("feed", move |s: &mut Setup<'_>| Feed {
        out: s.output(),
        next: 0,
        count: COUNT,
        per_tick: 20,
        ready: Arc::clone(&r),
    })
    .tick_every(Duration::from_micros(200))
    .publishes::<Quote>();
    let o = Arc::clone(&orders);
    a.actor("orders", move |_: &mut Setup<'_>| OrderSink {
        count: Arc::clone(&o),
    })
    .subscribes::<Order>();
    a.add(bridge_a);

    // Host B: the strategy, fed by its bridge.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Bus::builder();
    let s2 = Arc::clone(&seen);
    b.actor("strategy", move |s: &mut Setup<'_>| Strategy {
        seen: Arc::clone(&s2),
        orders: s.output(),
    })
    .subscribes::<Quote>()
    .publishes::<Order>();
    b.add(bridge_b);

    let running_a = a.start().expect("bus a starts");
    let running_b = b.start().expect("bus b starts");
    // A cycle of Block edges through two threads of each bus? No: the bridges never wait.
    assert!(
        running_b.warnings().is_empty(),
        "{:?}",
        running_b.warnings()
    );

    wait_for("b's subscription to reach a", 30, || {
        metric(&running_a.report(), "net-a", "subscribers.net.quote") == 1
    });
    wait_for("a's subscription to reach b", 30, || {
        metric(&running_b.report(), "net-b", "subscribers.net.order") == 1
    });
    ready.store(1, Ordering::Release);
    // Every quote either arrives or is counted lost (heartbeats reveal a lost tail).
    wait_for("every quote accounted for at b", 30, || {
        let r = running_b.report();
        metric(&r, "net-b", "messages_in") + metric(&r, "net-b", "lost") == COUNT
    });
    wait_for("every order accounted for at a", 30, || {
        let (ra, rb) = (running_a.report(), running_b.report());
        let sent = metric(&rb, "net-b", "messages_out");
        sent > 0 && metric(&ra, "net-a", "messages_in") + metric(&ra, "net-a", "lost") == sent
    });
    running_a.stop();
    running_b.stop();
    let report_a = running_a.join().expect("a stops cleanly");
    let report_b = running_b.join().expect("b stops cleanly");
    println!("{report_a}\n{report_b}");

    let seen = seen.lock().unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "quotes out of order or duplicated"
    );
    assert!(status_b.errors().is_empty(), "{:?}", status_b.errors());
    assert_eq!(metric(&report_a, "net-a", "messages_out"), COUNT);
    let (got, lost) = (
        metric(&report_b, "net-b", "messages_in"),
        metric(&report_b, "net-b", "lost"),
    );
    assert_eq!(got + lost, COUNT);
    assert_eq!(metric(&report_b, "net-b", "duplicates"), 0);
    let edge = report_b.edge("net.quote", "net-b", "strategy").unwrap();
    // `published` counts every publish, the dropped ones too (the bridge never waits: a full
    // ring drops and counts).
    assert_eq!(
        edge.published, got,
        "every import reaches the bus or is counted"
    );
    assert_eq!(seen.len() as u64, edge.handled);
    assert_eq!(edge.handled + edge.dropped, got, "{edge:?}");
    let order_edge = report_a.edge("net.order", "net-a", "orders").unwrap();
    assert_eq!(
        order_edge.published,
        metric(&report_a, "net-a", "messages_in")
    );
    assert_eq!(
        orders.load(Ordering::Relaxed) + order_edge.dropped,
        metric(&report_a, "net-a", "messages_in"),
        "{order_edge:?}"
    );
    // Loopback at this rate should lose next to nothing; UDP promises no more than accounting.
    assert!(
        lost * 100 <= COUNT,
        "lost {lost} of {COUNT} quotes over loopback"
    );
    // Batching: the feed publishes 20 at a time, so datagrams carry several messages.
    assert!(metric(&report_a, "net-a", "datagrams_out") < COUNT);
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.blob")]
struct Blob {
    n: u64,
    bytes: Vec<u8>,
}

/// Sends blobs itself, from its own thread, through a direct sender.
struct DirectFeed {
    net: llbus_net::DirectSender<Blob>,
    next: u64,
    count: u64,
    refused: Arc<AtomicU64>,
}

impl Actor for DirectFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, _ctx: &mut Context<'_>) {
        if self.next == 0 && self.net.subscribers() == 0 {
            return; // Wait for the subscriber before the first send.
        }
        for _ in 0..10 {
            if self.next == self.count {
                return;
            }
            self.next += 1;
            let blob = Blob {
                n: self.next,
                bytes: vec![7; 16],
            };
            self.net.send(&blob).expect("a small blob is sent");
        }
        if self.next == self.count && self.refused.load(Ordering::Relaxed) == 0 {
            let huge = Blob {
                n: 0,
                bytes: vec![0; 4000],
            };
            match self.net.send(&huge) {
                Err(llbus_net::DirectError::Refused(e)) => {
                    assert!(e.to_string().contains("1472"), "{e}");
                    self.refused.store(1, Ordering::Relaxed);
                }
                other => panic!("a 4000-byte message must be refused at publish: {other:?}"),
            }
        }
    }
}

struct BlobSink {
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Actor for BlobSink {
    type In = Blob;
    fn on_message(&mut self, b: Blob, _ctx: &mut Context<'_>) {
        assert_eq!(b.bytes, vec![7; 16]);
        self.seen.lock().unwrap().push(b.n);
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_direct_sender_publishes_from_the_actors_own_thread() {
    let _cpu = crate::fixtures::cpu_shared();
    const COUNT: u64 = 2_000;
    let mut bridge_a = Bridge::bind(loopback()).unwrap().name("direct-a");
    let sender = bridge_a.direct::<Blob>().unwrap();
    let bridge_b = Bridge::bind(loopback())
        .unwrap()
        .name("direct-b")
        .import::<Blob>(bridge_a.local_addr());

    let refused = Arc::new(AtomicU64::new(0));
    let mut a = Bus::builder();
    let mut sender = Some(sender);
    let r = Arc::clone(&refused);
    a.actor("feed", move |_: &mut Setup<'_>| DirectFeed {
        net: sender.take().expect("made once"),
        next: 0,
        count: COUNT,
        refused: Arc::clone(&r),
    })
    .tick_every(Duration::from_micros(500));
    a.add(bridge_a);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Bus::builder();
    let s2 = Arc::clone(&seen);
    b.actor("sink", move |_: &mut Setup<'_>| BlobSink {
        seen: Arc::clone(&s2),
    })
    .subscribes::<Blob>();
    b.add(bridge_b);

    let running_a = a.start().expect("a starts");
    let running_b = b.start().expect("b starts");
    wait_for("every blob accounted for at b", 30, || {
        let r = running_b.report();
        metric(&r, "direct-b", "messages_in") + metric(&r, "direct-b", "lost") == COUNT
    });
    wait_for("the oversize blob refused", 30, || {
        refused.load(Ordering::Relaxed) == 1
    });
    running_a.stop();
    running_b.stop();
    let report_a = running_a.join().expect("a stops cleanly");
    let report_b = running_b.join().expect("b stops cleanly");
    let seen = seen.lock().unwrap();
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    let lost = metric(&report_b, "direct-b", "lost");
    assert_eq!(seen.len() as u64 + lost, COUNT);
    assert!(lost * 100 <= COUNT, "lost {lost} of {COUNT} over loopback");
    // The bridge answered the subscription for the direct topic and sent heartbeats.
    assert!(metric(&report_a, "direct-a", "datagrams_out") > 0);
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.state")]
struct State {
    n: u64,
}

/// Publishes `State { n }` for n in 1..=`before` at once, then `before+1..=total` once `go`.
struct StateFeed {
    out: Out<State>,
    next: u64,
    before: u64,
    total: u64,
    go: Arc<AtomicU64>,
}

impl Actor for StateFeed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let limit = if self.go.load(Ordering::Acquire) > 0 {
            self.total
        } else {
            self.before
        };
        if self.next <= limit {
            ctx.publish(self.out, State { n: self.next });
            self.next += 1;
        }
    }
}

struct StateSink {
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Actor for StateSink {
    type In = State;
    fn on_message(&mut self, s: State, _ctx: &mut Context<'_>) {
        self.seen.lock().unwrap().push(s.n);
    }
}

/// A late joiner of an export that keeps the last 3 messages: 5 are published before anyone
/// subscribes; the subscriber (reliable or plain) starts with the last 3, then gets the live
/// ones, in order, with nothing counted lost or unrecovered.
fn late_joiner_starts_with_the_last_three(reliable_import: bool) {
    let publisher = Bridge::bind(loopback()).unwrap().name("pub");
    let pub_addr = publisher.local_addr();
    let publisher = publisher.export_reliable_last::<State>(3);
    let go = Arc::new(AtomicU64::new(0));
    let mut a = Bus::builder();
    let g = Arc::clone(&go);
    a.actor("feed", move |s: &mut Setup<'_>| StateFeed {
        out: s.output(),
        next: 1,
        before: 5,
        total: 10,
        go: Arc::clone(&g),
    })
    .tick_every(Duration::from_millis(1))
    .idle(llbus::Idle::Park)
    .publishes::<State>();
    a.add(publisher).idle(llbus::Idle::Park);
    let a = a.start().unwrap();
    wait_for("5 messages kept with nobody subscribed", 20, || {
        metric(&a.report(), "pub", "messages_out") == 5
    });

    let subscriber = Bridge::bind(loopback()).unwrap().name("sub");
    let subscriber = if reliable_import {
        subscriber.import_reliable::<State>(pub_addr)
    } else {
        subscriber.import::<State>(pub_addr)
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Bus::builder();
    let s2 = Arc::clone(&seen);
    b.actor("sink", move |_: &mut Setup<'_>| StateSink {
        seen: Arc::clone(&s2),
    })
    .idle(llbus::Idle::Park)
    .subscribes::<State>();
    b.add(subscriber).idle(llbus::Idle::Park);
    let b = b.start().unwrap();
    wait_for("the last three, on joining", 20, || {
        seen.lock().unwrap().len() == 3
    });
    go.store(1, Ordering::Release);
    wait_for("the live messages", 20, || seen.lock().unwrap().len() == 8);
    // Heartbeats (every 100 ms) and a gap deadline (500 ms) later, nothing is counted lost
    // or unrecovered; the report at stop is refreshed.
    std::thread::sleep(Duration::from_millis(600));
    b.stop();
    a.stop();
    let rb = b.join().unwrap();
    a.join().unwrap();
    assert_eq!(*seen.lock().unwrap(), (3..=10).collect::<Vec<_>>());
    assert_eq!(metric(&rb, "sub", "lost"), 0);
    assert_eq!(metric(&rb, "sub", "unrecovered"), 0);
}

#[test]
#[cfg_attr(miri, ignore)]
fn reliable_late_joiner_starts_with_the_last_three() {
    let _cpu = crate::fixtures::cpu_shared();
    late_joiner_starts_with_the_last_three(true);
}

#[test]
#[cfg_attr(miri, ignore)]
fn plain_late_joiner_starts_with_the_last_three() {
    let _cpu = crate::fixtures::cpu_shared();
    late_joiner_starts_with_the_last_three(false);
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "loopback.lone.tick")]
struct Tick(u64);

#[test]
#[cfg_attr(miri, ignore)]
fn a_lone_message_goes_out_at_once_without_waiting_to_fill_a_datagram() {
    let _cpu = crate::fixtures::cpu_shared();
    // Heartbeats once an hour: nothing but the message itself could carry it out.
    let config = BridgeConfig {
        heartbeat_every: Duration::from_secs(3600),
        ..BridgeConfig::default()
    };
    let served = Bridge::bind_with(loopback(), config)
        .expect("bind")
        .name("lone-pub")
        .export::<Tick>();
    let there = served.local_addr();
    let mut a = Bus::builder();
    let feed = a.publisher::<Tick>("feed");
    a.add(served);
    let mut b = Bus::builder();
    b.add(
        Bridge::bind(loopback())
            .expect("bind")
            .name("lone-sub")
            .import::<Tick>(there),
    );
    let tap = b.subscription_with::<Tick>("tap", Backpressure::Block, 16);
    let (mut a, mut b) = (a.start().expect("a"), b.start().expect("b"));
    let mut feed = a.publisher(feed).expect("feed");
    let mut tap = b.subscription(tap).expect("tap");
    wait_for("the subscription", 30, || {
        metric(&a.report(), "lone-pub", "subscribers.loopback.lone.tick") == 1
    });
    let sent = Instant::now();
    feed.publish(Tick(7)).expect("publish");
    let got = tap.recv_timeout(Duration::from_secs(2));
    let took = sent.elapsed();
    assert_eq!(got.ok(), Some(Tick(7)), "a lone message waited {took:?}");
    assert_eq!(metric(&a.report(), "lone-pub", "messages_out"), 1);
    a.stop();
    b.stop();
    a.join().expect("a");
    b.join().expect("b");
}
