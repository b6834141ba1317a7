//! The tokio adapter (`Publisher::into_async`, `Subscription::into_async`) across a stop:
//! async code feeds and reads a bus, every accepted send is published and every message is
//! counted exactly once (handled when received, lost otherwise), a send after the stop fails at
//! once, and a held permit or a huge capacity does not hold the stop.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, TryRecvError};
use tests::{assert_balanced, bounded, wait_for};

use crate::fixtures::{assert_equation, Doubled, Doubler, Num};

/// A current-thread runtime with time, for the async halves of the tests.
fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// `stop()` returns; a `try_send` right after it must fail (the doc: a send after the stop
/// request fails at once). The forwarding thread closes the channel only when it is scheduled.
#[test]
fn an_async_send_right_after_stop_returns_fails() {
    bounded("send right after stop", 30, || {
        let mut failures = 0;
        for _ in 0..20 {
            let mut bus = Bus::builder();
            let feed = bus.publisher::<Num>("feed");
            let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 1024);
            let mut running = bus.start().expect("start");
            let tx = running.publisher(feed).unwrap().into_async(64).unwrap();
            let _tap = running.subscription(tap).unwrap();
            running.stop();
            if tx.try_send(Num(7)).is_ok() {
                failures += 1;
            }
            let report = running.join().expect("join");
            assert_equation(&report);
        }
        assert_eq!(
            failures, 0,
            "{failures} of 20 sends right after stop() were accepted"
        );
    });
}

/// `into_async` on a publisher whose bus has stopped and been joined: a send must fail, and
/// nothing may reach a subscription that already said it is closed.
#[test]
fn into_async_after_the_bus_is_joined_refuses_sends_and_a_closed_subscription_stays_closed() {
    bounded("into_async after join", 30, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 64);
        let mut running = bus.start().expect("start");
        let feed = running.publisher(feed).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        assert_eq!(tap.try_recv(), Err(TryRecvError::Closed));
        let tx = feed.into_async(8).unwrap();
        let sent = tx.try_send(Num(1));
        // Give the forwarding thread time to do whatever it does with it.
        std::thread::sleep(Duration::from_millis(200));
        let after = tap.try_recv();
        assert!(
            sent.is_err(),
            "a send on a publisher turned async after the bus ended was accepted; the closed tap then gave {after:?}"
        );
        assert_eq!(
            after,
            Err(TryRecvError::Closed),
            "a closed subscription got a message"
        );
    });
}

/// A `Permit` (`tx.reserve()`) held across the stop by a task that never uses it: the drain
/// waits for the forwarding thread, which waits for the permit, so the stop waits out its
/// whole timeout and reports that it did not drain. A stop must not wait for code outside
/// the bus.
#[test]
fn a_held_async_permit_does_not_hold_the_stop_for_its_timeout() {
    bounded("held permit", 60, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(3));
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 64);
        let mut running = bus.start().expect("start");
        let tx = running.publisher(feed).unwrap().into_async(8).unwrap();
        let _tap = running.subscription(tap).unwrap();
        let rt = rt();
        let permit = rt.block_on(tx.reserve()).expect("reserve");
        running.stop();
        let started = Instant::now();
        let report = running.join().expect("join");
        let took = started.elapsed();
        // The permit is used after the stop: it must not count on a bus already reported.
        permit.send(Num(1));
        drop(tx);
        let stop = report.stop.clone().unwrap();
        assert!(
            took < Duration::from_secs(1) && stop.drained,
            "a permit nobody uses held the stop: took {took:?}, {stop:?}"
        );
        assert_balanced(&report);
    });
}

/// A message sent through a permit held across the stop, after the bus's threads have left, is
/// not published: it is counted lost on the edge (seen in a live snapshot before `join`), and
/// the closed subscription stays closed.
#[test]
fn a_permit_used_after_the_bus_exited_counts_its_message_lost() {
    bounded("permit after exit", 60, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 64);
        let mut running = bus.start().expect("start");
        let tx = running.publisher(feed).unwrap().into_async(8).unwrap();
        let mut tap = running.subscription(tap).unwrap();
        let rt = rt();
        let permit = rt.block_on(tx.reserve()).expect("reserve");
        running.stop();
        // The subscription closes once the bus's threads have left.
        wait_for("the tap to close", 20, || {
            tap.try_recv() == Err(TryRecvError::Closed)
        });
        permit.send(Num(1));
        drop(tx);
        wait_for("the late message to be counted", 20, || {
            running
                .snapshot()
                .edge("test.num", "feed", "tap")
                .is_some_and(|e| e.lost == 1)
        });
        assert_eq!(tap.try_recv(), Err(TryRecvError::Closed));
        let report = running.join().expect("join");
        let e = report.edge("test.num", "feed", "tap").unwrap();
        assert_eq!((e.published, e.lost, e.handled), (1, 1, 0), "{e:?}");
        assert_balanced(&report);
    });
}

/// Senders that send as fast as they can while another thread stops the bus and the senders
/// are dropped mid-flush: every `Ok` is published, counted exactly once.
#[test]
fn a_sender_dropped_while_the_forwarding_thread_flushes_loses_nothing() {
    bounded("drop sender mid flush", 60, || {
        for round in 0..5 {
            let mut bus = Bus::builder();
            bus.stop_timeout(Duration::from_secs(5));
            let feed = bus.publisher::<Num>("feed");
            let tap = bus.subscription_with::<Num>("tap", Backpressure::DropNewest, 1 << 14);
            let mut running = bus.start().expect("start");
            let tx = running.publisher(feed).unwrap().into_async(4096).unwrap();
            let _tap = running.subscription(tap).unwrap();
            let mut accepted = 0u64;
            for i in 0..4000 {
                if tx.try_send(Num(i)).is_ok() {
                    accepted += 1;
                }
            }
            let stop = running.stop_handle();
            let go = Arc::new(Barrier::new(2));
            let g = Arc::clone(&go);
            let stopper = std::thread::spawn(move || {
                g.wait();
                stop.stop();
            });
            go.wait();
            drop(tx);
            stopper.join().unwrap();
            let report = running.join().expect("join");
            let e = report.edge("test.num", "feed", "tap").unwrap();
            assert_eq!(e.published, accepted, "round {round}: {e:?}");
            assert_equation(&report);
        }
    });
}

#[test]
fn an_async_subscription_dropped_while_the_bus_stops_balances_exactly() {
    bounded("async sub dropped mid stop", 60, || {
        for round in 0..5 {
            let mut bus = Bus::builder();
            bus.stop_timeout(Duration::from_secs(5));
            let feed = bus.publisher::<Num>("feed");
            let tap = bus.subscription_with::<Num>("tap", Backpressure::Block, 16);
            let mut running = bus.start().expect("start");
            let mut feed = running.publisher(feed).unwrap();
            let mut rx = running.subscription(tap).unwrap().into_async(8).unwrap();
            let publisher = std::thread::spawn(move || {
                let mut n = 0u64;
                for i in 0..2000 {
                    if feed.publish(Num(i)).is_err() {
                        break;
                    }
                    n += 1;
                }
                n
            });
            let mut got = 0u64;
            for _ in 0..300 {
                assert!(rx.blocking_recv().is_some());
                got += 1;
            }
            let stop = running.stop_handle();
            let go = Arc::new(Barrier::new(2));
            let g = Arc::clone(&go);
            let stopper = std::thread::spawn(move || {
                g.wait();
                stop.stop();
            });
            go.wait();
            drop(rx);
            stopper.join().unwrap();
            let published = publisher.join().unwrap();
            // The adapter's books settle once its thread notices the receiver is gone.
            wait_for("the async tap to settle", 20, || {
                running
                    .snapshot()
                    .edge("test.num", "feed", "tap")
                    .is_some_and(|e| e.in_flight == 0)
            });
            let report = running.join().expect("join");
            let e = report.edge("test.num", "feed", "tap").unwrap();
            assert_eq!(e.published, published, "round {round}: {e:?}");
            assert_eq!(
                e.handled, got,
                "round {round}: only what was received: {e:?}"
            );
            assert_eq!(report.actor("tap").unwrap().handled, got, "round {round}");
            assert_balanced(&report);
        }
    });
}

#[test]
fn an_async_subscription_ends_after_the_stop_and_counts_what_it_delivered() {
    bounded("async sub ends", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(5));
        let feed = bus.publisher::<Num>("feed");
        bus.actor("relay", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>();
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::Block, 1024);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut rx = running.subscription(tap).unwrap().into_async(16).unwrap();
        for i in 0..500 {
            feed.publish(Num(i)).unwrap();
        }
        running.stop();
        let got = rt().block_on(async {
            let mut got = 0u64;
            loop {
                match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
                    Ok(Some(_)) => got += 1,
                    Ok(None) => return got,
                    Err(_) => panic!("the async subscription never ended"),
                }
            }
        });
        assert_eq!(got, 500);
        let report = running.join().expect("join");
        assert_balanced(&report);
        assert_eq!(
            report.edge("test.doubled", "relay", "tap").unwrap().handled,
            500
        );
        assert_eq!(report.actor("tap").unwrap().handled, 500);
    });
}

/// `into_async`'s only documented error is a failed spawn; a capacity tokio cannot take must
/// not panic (and must not leave the bus's drain waiting for a flush that never comes).
#[test]
fn into_async_with_a_huge_capacity_does_not_panic_nor_hold_the_stop() {
    bounded("into_async huge capacity", 30, || {
        let mut bus = Bus::builder();
        bus.stop_timeout(Duration::from_secs(3));
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription::<Num>("tap");
        let mut running = bus.start().expect("start");
        let feed = running.publisher(feed).unwrap();
        let tap = running.subscription(tap).unwrap();
        let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            feed.into_async(usize::MAX).map(drop)
        }));
        let s = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tap.into_async(usize::MAX).map(drop)
        }));
        running.stop();
        let report = running.join().expect("join");
        let stop = report.stop.clone().unwrap();
        assert!(
            p.is_ok() && s.is_ok(),
            "into_async(usize::MAX) panicked: publisher {}, subscription {}",
            p.is_err(),
            s.is_err()
        );
        assert!(
            stop.drained && stop.took < Duration::from_secs(1),
            "{stop:?}"
        );
    });
}

#[test]
fn an_async_sender_s_accepted_messages_are_all_published_across_a_stop() {
    bounded("async publisher across a stop", 120, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        bus.actor("doubler", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>()
            .capacity::<Num>(4);
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::DropNewest, 1 << 16);
        let mut running = bus.start().expect("start");
        let tx = running.publisher(feed).unwrap().into_async(64).unwrap();
        let tap = running.subscription(tap).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let stop = running.stop_handle();
        // Sends as fast as it can; the stop lands in the middle. Every `Ok` is a message the
        // bus accepted and must publish; every `Err` hands the message back.
        let (accepted, refused) = rt.block_on(async {
            let mut accepted = 0u64;
            let mut refused = 0u64;
            for i in 0..20_000u64 {
                if i == 5_000 {
                    stop.stop();
                }
                match tx.send(Num(i)).await {
                    Ok(()) => accepted += 1,
                    Err(e) => {
                        assert_eq!(e.0, Num(i), "the refused message is handed back");
                        refused += 1;
                    }
                }
            }
            (accepted, refused)
        });
        assert!(accepted >= 5_000, "sends before the stop were refused");
        assert!(refused > 0, "no send failed after the stop");
        let report = running.join().expect("join");
        let into = report.edge("test.num", "feed", "doubler").unwrap();
        assert_eq!(
            into.published, accepted,
            "every accepted send is published, nothing else: {into:?}"
        );
        assert_eq!(into.handled + into.lost, accepted, "{into:?}");
        assert_eq!(into.in_flight, 0, "{into:?}");
        // The tap is never read: what it holds is in flight, and its edge balances with it.
        let out = report.edge("test.doubled", "doubler", "tap").unwrap();
        assert_eq!(out.published, into.handled, "{out:?}");
        assert_eq!(out.published, out.dropped + out.in_flight, "{out:?}");
        drop(tap);
    });
}

#[test]
fn an_async_sender_fails_at_once_after_the_stop() {
    bounded("async publisher after a stop", 60, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription::<Num>("tap");
        let mut running = bus.start().expect("start");
        let tx = running.publisher(feed).unwrap().into_async(8).unwrap();
        let _tap = running.subscription(tap).unwrap();
        running.stop();
        let report = running.join().expect("join");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let sent = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), tx.send(Num(1))).await
        });
        assert_eq!(
            sent.expect("the send returned at once").map_err(|e| e.0),
            Err(Num(1))
        );
        assert_eq!(report.edge("test.num", "feed", "tap").unwrap().published, 0);
    });
}

#[test]
fn what_an_async_receiver_never_delivered_is_counted_lost_not_handled() {
    bounded("async subscription dropped", 60, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        let tap = bus.subscription_with::<Num>("tap", Backpressure::Block, 64);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).unwrap();
        let mut rx = running.subscription(tap).unwrap().into_async(8).unwrap();
        for i in 0..40 {
            feed.publish(Num(i)).unwrap();
        }
        for i in 0..5 {
            assert_eq!(rx.blocking_recv(), Some(Num(i)));
        }
        // Let the forwarding thread fill the channel, then drop the receiver with it full.
        wait_for("the channel to fill", 30, || {
            running
                .snapshot()
                .edge("test.num", "feed", "tap")
                .is_some_and(|e| e.max_depth > 0 && e.in_flight == 35)
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(rx);
        running.stop();
        drop(feed);
        let report = running.join().expect("join");
        let e = report.edge("test.num", "feed", "tap").unwrap();
        assert_eq!(e.handled, 5, "only what was received counts handled: {e:?}");
        assert_eq!(e.lost, 35, "{e:?}");
        assert_eq!(report.actor("tap").unwrap().handled, 5);
        assert_balanced(&report);
    });
}

#[test]
fn async_code_feeds_and_reads_a_bus_through_tokio_channels() {
    bounded("tokio adapter", 120, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        bus.actor("doubler", Doubler::new)
            .subscribes::<Num>()
            .publishes::<Doubled>()
            .capacity::<Num>(8);
        let tap = bus.subscription_with::<Doubled>("tap", Backpressure::Block, 8);
        let mut running = bus.start().expect("start");
        let tx = running.publisher(feed).unwrap().into_async(4).unwrap();
        let mut rx = running.subscription(tap).unwrap().into_async(4).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        const N: u64 = 5_000;
        rt.block_on(async {
            let sender = async {
                for i in 0..N {
                    tx.send(Num(i)).await.expect("the bus takes it");
                }
            };
            let receiver = async {
                for i in 0..N {
                    let got = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                        .await
                        .expect("a message within 30 s");
                    assert_eq!(got, Some(Doubled(2 * i)));
                }
            };
            tokio::join!(sender, receiver);
        });
        running.stop();
        let report = running.join().expect("join");
        // The stop closed the channel: a send fails at once and hands the value back.
        let refused = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), tx.send(Num(7))).await
        });
        assert_eq!(
            refused.expect("fails at once").map_err(|e| e.0),
            Err(Num(7))
        );
        // The subscription's channel ends after the bus exits.
        let end =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), rx.recv()).await });
        assert_eq!(end, Ok(None));
        let e = report.edge("test.doubled", "doubler", "tap").unwrap();
        assert_eq!(e.handled, N);
        let into = report.edge("test.num", "feed", "doubler").unwrap();
        assert_eq!((into.published, into.handled), (N, N), "{into:?}");
    });
}

/// The adapter on named topics: two async senders of one type, each on its own topic, and an
/// async subscription to one of them, which gets that topic's messages only.
#[test]
fn async_handles_of_named_topics_carry_their_own_topic() {
    bounded("async named topics", 30, || {
        let (a, b) = (
            llbus::Topic::<Num>::named("num.a").expect("name"),
            llbus::Topic::<Num>::named("num.b").expect("name"),
        );
        let mut bus = Bus::builder();
        let feeds = [
            bus.publisher_on(&a, "feed-a"),
            bus.publisher_on(&b, "feed-b"),
        ];
        let tap_a = bus.subscription_on(&a, "tap-a", Backpressure::Block, 1024);
        let _tap_b = bus.subscription_on(&b, "tap-b", Backpressure::DropNewest, 1024);
        let mut running = bus.start().expect("start");
        let [fa, fb] = feeds.map(|f| running.publisher(f).unwrap().into_async(64).unwrap());
        let mut rx = running.subscription(tap_a).unwrap().into_async(64).unwrap();
        let got = rt().block_on(async {
            for i in 0..50 {
                fa.send(Num(i)).await.expect("send a");
                fb.send(Num(1000 + i)).await.expect("send b");
            }
            let mut got = Vec::new();
            while got.len() < 50 {
                match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
                    Ok(Some(Num(n))) => got.push(n),
                    other => panic!("the async subscription ended early: {other:?}"),
                }
            }
            got
        });
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        drop((fa, fb));
        running.stop();
        let report = running.join().expect("join");
        assert_eq!(
            report.edge("num.b", "feed-b", "tap-b").map(|e| e.published),
            Some(50)
        );
    });
}
