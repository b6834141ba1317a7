//! An async caller (the tokio adapter): its calls are awaited without blocking the runtime's
//! thread, end as a blocking call's do, and are counted the same way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::CallError;
use tests::{assert_balanced, bounded};

use super::{adder_bus, Ask, Sum, HOLD, T};

#[test]
fn an_async_call_is_awaited_without_blocking_the_runtime_s_thread() {
    bounded("async calls", 60, || {
        let (bus, keys) = adder_bus(&["client"]);
        let mut running = bus.start().expect("start");
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller")
            .into_async()
            .expect("the forwarding thread");
        assert_eq!(client.name(), "client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let client = rt.block_on(async move {
            for n in 0..100 {
                assert_eq!(client.call(Ask { n, delta: 1 }, T).await, Ok(Sum(n + 1)));
            }
            // A task beside the call, on the one thread of this runtime, runs while the call
            // waits (its server holds it until it times out).
            let ticks = Arc::new(AtomicU64::new(0));
            let ticker = {
                let ticks = Arc::clone(&ticks);
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        ticks.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            let t0 = Instant::now();
            let held = Ask { n: HOLD, delta: 0 };
            let got = client.call(held, Duration::from_millis(200)).await;
            let ticked = ticks.load(Ordering::Relaxed);
            assert_eq!(got, Err(CallError::Timeout));
            assert!(
                t0.elapsed() >= Duration::from_millis(190),
                "{:?}",
                t0.elapsed()
            );
            assert!(
                ticked >= 20,
                "the runtime's thread ran {ticked} ticks during the call"
            );
            ticker.abort();
            client
        });
        running.stop();
        let mut client = client;
        let after = rt.block_on(client.call(Ask { n: 1, delta: 1 }, T));
        assert_eq!(after, Err(CallError::Stopped));
        drop(client);
        let report = running.join().expect("join");
        assert_balanced(&report);
        let calls = report.service("calc.add", "client").expect("client's row");
        assert_eq!(
            (calls.calls, calls.replies, calls.timeouts, calls.stopped),
            (102, 100, 1, 1)
        );
    });
}
