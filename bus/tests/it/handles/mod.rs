//! External handles: a `Publisher<T>` and a `Subscription<T>` used by code that is not an
//! actor, tested for order, backpressure (Block, DropNewest, Latest), the stop protocol, the
//! report and wiring errors. How they wait is `waiting`'s subject; the tokio adapter's is
//! `tokio_edges`'s.

mod waiting;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llbus::{
    Backpressure, Bus, PublishError, RecvError, RecvTimeoutError, StartError, TryRecvError,
};
use tests::{assert_balanced, bounded, wait_for};

use crate::fixtures::{Doubled, Doubler, Num};

/// Checks one edge's balance in a report taken while running or after join (in flight allowed).
fn balances(e: &llbus::EdgeReport) -> bool {
    e.published == e.handled + e.panicked + e.dropped + e.conflated + e.lost + e.in_flight
}

#[test]
fn a_publisher_and_a_subscription_carry_every_message_in_order_through_an_actor() {
    bounded("order through an actor", 120, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        bus.actor("doubler", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>()
            .capacity::<Num>(64);
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::Block, 64);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).expect("feed");
        let mut tap = running.subscription(tap).expect("tap");
        const N: u64 = 20_000;
        // The feed runs on a thread of its own (a handle moves to any one thread); the rings
        // are far smaller than N, so this also exercises Block waits on both handles.
        let feeder = std::thread::spawn(move || {
            for i in 0..N {
                feed.publish(Num(i)).expect("publish while running");
            }
            feed
        });
        for i in 0..N {
            let got = tap
                .recv_timeout(Duration::from_secs(30))
                .expect("a message within 30 s");
            assert_eq!(got, Doubled(2 * i), "out of order or lost");
        }
        let feed = feeder.join().expect("feeder");
        let live = running.snapshot();
        assert!(live.edges.iter().all(balances), "{live:?}");
        running.stop();
        let report = running.join().expect("join");
        drop(feed);
        assert_balanced(&report);
        let into = report.edge("test.num", "feed", "doubler").expect("edge");
        assert_eq!((into.published, into.handled), (N, N));
        let out = report.edge("test.doubled", "doubler", "tap").expect("edge");
        assert_eq!((out.published, out.handled), (N, N));
        assert_eq!(report.actor("tap").map(|a| a.handled), Some(N));
        assert_eq!(
            report.actor("tap").map(|a| a.thread.as_str()),
            Some("(handle)")
        );
        // After join the subscription is closed: nothing queued, every publisher gone.
        assert_eq!(tap.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(tap.recv(), Err(RecvError));
    });
}

#[test]
fn a_subscription_takes_each_publishers_ring_in_turn_and_each_in_order() {
    bounded("two publishers", 60, || {
        let mut bus = Bus::builder();
        let a = bus.publisher::<Num>("a");
        let b = bus.publisher::<Num>("b");
        let tap = bus.subscription::<Num>("tap");
        let mut running = bus.start().expect("start");
        let (mut a, mut b) = (running.publisher(a).unwrap(), running.publisher(b).unwrap());
        let mut tap = running.subscription(tap).unwrap();
        for i in 0..100 {
            a.publish(Num(i)).unwrap();
            b.publish(Num(1000 + i)).unwrap();
        }
        let got: Vec<u64> = (0..200)
            .map(|_| tap.try_recv().expect("queued").0)
            .collect();
        let from_a: Vec<u64> = got.iter().copied().filter(|&n| n < 1000).collect();
        let from_b: Vec<u64> = got.iter().copied().filter(|&n| n >= 1000).collect();
        assert_eq!(from_a, (0..100).collect::<Vec<_>>());
        assert_eq!(from_b, (1000..1100).collect::<Vec<_>>());
        // Taken in turn: neither publisher's ring is emptied before the other gets a go.
        assert!(
            got[..2].contains(&0) && got[..2].contains(&1000),
            "{:?}",
            &got[..4]
        );
        assert_eq!(tap.try_recv(), Err(TryRecvError::Empty));
        // Both publishers gone and nothing queued: closed, without any stop.
        drop((a, b));
        assert_eq!(tap.try_recv(), Err(TryRecvError::Closed));
        running.stop();
        let report = running.join().unwrap();
        assert_balanced(&report);
    });
}

#[test]
fn a_block_publish_waits_for_room_and_try_publish_drops_and_counts() {
    bounded("block backpressure", 60, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::Block, 4);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        for i in 0..4 {
            feed.publish(Num(i)).unwrap();
        }
        // The ring is full: try_publish drops and counts, and hands nothing back.
        feed.try_publish(Num(99)).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        let waiter = std::thread::spawn(move || {
            feed.publish(Num(4)).unwrap();
            d.store(true, Ordering::SeqCst);
            feed
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !done.load(Ordering::SeqCst),
            "a Block publish into a full ring returned"
        );
        assert_eq!(tap.recv().unwrap(), Num(0));
        wait_for("the waiting publish", 30, || done.load(Ordering::SeqCst));
        let got: Vec<u64> = (0..4).map(|_| tap.recv().unwrap().0).collect();
        assert_eq!(got, vec![1, 2, 3, 4]);
        let feed = waiter.join().unwrap();
        running.stop();
        let report = running.join().unwrap();
        drop(feed);
        assert_balanced(&report);
        let e = report.edge("test.num", "feed", "tap").unwrap();
        assert_eq!((e.published, e.handled, e.dropped), (6, 5, 1), "{e:?}");
        assert!(e.waited >= 1, "{e:?}");
    });
}

#[test]
fn drop_newest_and_latest_subscriptions_keep_their_policies() {
    bounded("drop and latest", 60, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let dropping = bus.subscription_with::<Num>("dropping", Backpressure::DropNewest, 4);
        let latest = bus.subscription_with::<Num>("latest", Backpressure::Latest, 1);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut dropping = running.subscription(dropping).unwrap();
        let mut latest = running.subscription(latest).unwrap();
        for i in 0..10 {
            // Never waits: neither subscription is Block.
            feed.publish(Num(i)).unwrap();
        }
        let kept: Vec<u64> = std::iter::from_fn(|| dropping.try_recv().ok().map(|n| n.0)).collect();
        assert_eq!(kept, vec![0, 1, 2, 3]);
        assert_eq!(latest.try_recv(), Ok(Num(9)));
        assert_eq!(latest.try_recv(), Err(TryRecvError::Empty));
        running.stop();
        let report = running.join().unwrap();
        drop(feed);
        assert_balanced(&report);
        let d = report.edge("test.num", "feed", "dropping").unwrap();
        assert_eq!((d.published, d.handled, d.dropped), (10, 4, 6));
        let l = report.edge("test.num", "feed", "latest").unwrap();
        assert_eq!((l.published, l.handled, l.conflated), (10, 1, 9));
    });
}

#[test]
fn a_stop_refuses_new_publishes_hands_them_back_and_leaves_the_unread_readable() {
    bounded("stop", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::Block, 16);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        for i in 0..10 {
            feed.publish(Num(i)).unwrap();
        }
        assert_eq!(tap.recv().unwrap(), Num(0));
        running.stop();
        assert_eq!(feed.publish(Num(77)), Err(PublishError::Stopped(Num(77))));
        assert_eq!(
            feed.try_publish(Num(78)).map_err(PublishError::into_inner),
            Err(Num(78))
        );
        // The drain does not wait for the subscription (this thread reads it and joins).
        let report = running.join().expect("join");
        let e = report.edge("test.num", "feed", "tap").unwrap();
        assert!(balances(e), "{e:?}");
        assert_eq!((e.published, e.handled, e.in_flight), (10, 1, 9), "{e:?}");
        // What was queued is still there, then the subscription is closed (the bus exited,
        // even though the publisher handle is still held).
        let rest: Vec<u64> = tap.iter().map(|n| n.0).collect();
        assert_eq!(rest, (1..10).collect::<Vec<_>>());
        assert_eq!(
            tap.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Closed)
        );
        drop(feed);
    });
}

#[test]
fn a_publisher_asleep_on_a_full_subscription_gives_up_at_the_stop_request() {
    bounded("stuck publisher", 60, || {
        let mut bus = Bus::builder();
        // Long: the stop must not wait for it.
        bus.stop_timeout(Duration::from_secs(30));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("doubler", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>()
            .capacity::<Num>(2);
        // Nobody reads the tap: the doubler's ring to it fills, then the doubler's own ring.
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::Block, 2);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        let published = Arc::new(AtomicU64::new(0));
        let p = Arc::clone(&published);
        let feeder = std::thread::spawn(move || {
            let mut refused = None;
            for i in 0..1000 {
                match feed.publish(Num(i)) {
                    Ok(()) => {
                        p.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        refused = Some(e.into_inner());
                        break;
                    }
                }
            }
            (feed, refused)
        });
        // 2 in the tap's ring, 1 in the doubler's hands, 2 in its ring: then the feed sleeps.
        wait_for("the feed to wait on a full ring", 30, || {
            running
                .snapshot()
                .edge("test.num", "feed", "doubler")
                .is_some_and(|e| e.waited > 0)
        });
        assert!(
            published.load(Ordering::SeqCst) < 10,
            "the feed never waited"
        );
        running.stop();
        let report = running.join().expect("join");
        let stop = report.stop.clone().expect("join reports the stop");
        assert!(stop.drained, "{stop:?}");
        assert!(
            stop.took < Duration::from_secs(30),
            "the stop waited for the reader: {stop:?}"
        );
        let (feed, refused) = feeder.join().unwrap();
        assert!(refused.is_some(), "the feed was not told the bus stopped");
        for e in &report.edges {
            assert!(balances(e), "{e:?}");
        }
        // The doubler gave up on the tap at the request (counted lost there), so it drained
        // its own inbox: every number the feed published was handled.
        let into = report.edge("test.num", "feed", "doubler").unwrap();
        assert_eq!((into.lost, into.in_flight), (0, 0), "{into:?}");
        assert_eq!(into.handled, published.load(Ordering::SeqCst), "{into:?}");
        let out = report.edge("test.doubled", "doubler", "tap").unwrap();
        assert!(
            out.lost >= 1,
            "the abandoned wait was not counted lost: {out:?}"
        );
        // What is in the tap's ring stays readable.
        assert_eq!(out.in_flight, 2, "{out:?}");
        assert_eq!(tap.iter().count(), 2);
        drop(feed);
    });
}

#[test]
fn a_dropped_subscription_counts_what_it_left_as_lost_and_publishers_see_it_gone() {
    let mut bus = Bus::builder();
    let feed = bus.publisher::<Num>("feed");
    let tap = bus.subscription::<Num>("tap");
    let mut running = bus.start().expect("start");
    let mut feed = running.publisher(feed).unwrap();
    let tap = running.subscription(tap).unwrap();
    for i in 0..5 {
        feed.publish(Num(i)).unwrap();
    }
    drop(tap);
    // Gone: a publish is counted lost at once, never waits.
    feed.publish(Num(5)).unwrap();
    let live = running.snapshot();
    let e = live.edge("test.num", "feed", "tap").unwrap();
    assert_eq!((e.published, e.lost, e.in_flight), (6, 6, 0), "{e:?}");
    running.stop();
    drop(feed);
    assert_balanced(&running.join().unwrap());
}

#[test]
fn start_checks_handles_like_actors() {
    let mut bus = Bus::builder();
    let _tap = bus.subscription::<Doubled>("tap");
    match bus.start() {
        Err(StartError::NoPublisher { actor, topic }) => {
            assert_eq!((actor.as_str(), topic.as_str()), ("tap", "test.doubled"));
        }
        other => panic!("expected NoPublisher, got {other:?}"),
    }
    let mut bus = Bus::builder();
    let _a = bus.publisher::<Num>("same");
    let _b = bus.subscription::<Num>("same");
    assert!(matches!(bus.start(), Err(StartError::DuplicateActor(n)) if n == "same"));
    let mut bus = Bus::builder();
    let _tap = bus.subscription_with::<Num>("tap", Backpressure::Block, 0);
    let _feed = bus.publisher::<Num>("feed");
    assert!(matches!(bus.start(), Err(StartError::Invalid(_))));
}

#[test]
fn a_key_is_redeemed_only_on_its_own_bus() {
    let mut one = Bus::builder();
    let key = one.publisher::<Num>("feed");
    let _tap1 = one.subscription::<Num>("tap");
    let mut two = Bus::builder();
    let _feed2 = two.publisher::<Num>("feed");
    let _tap2 = two.subscription::<Num>("tap");
    let one = one.start().unwrap();
    let mut two = two.start().unwrap();
    assert!(two.publisher(key).is_err());
    one.stop();
    two.stop();
    assert_balanced(&one.join().unwrap());
    assert_balanced(&two.join().unwrap());
}
