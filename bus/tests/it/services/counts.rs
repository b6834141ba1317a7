//! Every call is counted per caller and service: once as it starts, once as it ends (by how),
//! and the counts balance (`calls == replies + errors + in_flight`) in every snapshot, in the
//! report of `join` and in the counters file.

use std::time::Duration;

use llbus::{read_counters_file, CallError, CallReport, Setup};
use tests::{assert_balanced, bounded, wait_for};

use super::{adder_bus, service, Ask, Client, Sum, DROP, HOLD, LATER, T};

/// The figures of a report row, in the order of `CallReport`'s fields.
fn figures(c: &CallReport) -> [u64; 10] {
    [
        c.calls,
        c.replies,
        c.errors,
        c.timeouts,
        c.dropped,
        c.server_panicked,
        c.stopped,
        c.queue_full,
        c.in_flight,
        c.late,
    ]
}

#[test]
fn every_call_is_counted_once_by_how_it_ended_in_the_report_and_the_counters_file() {
    bounded("call counts", 60, || {
        let (mut bus, keys) = adder_bus(&["client"]);
        bus.name("services counts");
        let (tx, rx) = std::sync::mpsc::channel();
        let asks = vec![
            (Ask { n: 1, delta: 1 }, T),
            // Answered at the adder's next tick (50 ms), after its 1 ms timeout: late.
            (Ask { n: LATER, delta: 5 }, Duration::from_millis(1)),
            (Ask { n: DROP, delta: 0 }, T),
            (Ask { n: 40, delta: 2 }, T),
            // Held by the adder until the stop.
            (Ask { n: HOLD, delta: 0 }, T),
        ];
        bus.actor("asker", move |s: &mut Setup<'_>| Client {
            out: s.caller(&service()),
            asks: asks.clone().into_iter(),
            ends: tx.clone(),
            ids: Vec::new(),
        })
        .calls(&service())
        .tick_every(Duration::from_millis(20));
        let mut running = bus.start().expect("start");
        let path = running.counters_path().expect("a counters file").to_owned();
        let mut client = running
            .caller(keys.into_iter().next().expect("key"))
            .expect("caller");
        assert_eq!(client.call(Ask { n: 1, delta: 1 }, T), Ok(Sum(2)));
        assert_eq!(
            client.call(Ask { n: DROP, delta: 0 }, T),
            Err(CallError::Dropped)
        );
        let late = Ask { n: LATER, delta: 9 };
        assert_eq!(
            client.call(late, Duration::from_millis(1)),
            Err(CallError::Timeout)
        );
        std::thread::sleep(Duration::from_millis(200));
        // Takes the late reply (counted) before its own.
        assert_eq!(client.call(Ask { n: 2, delta: 2 }, T), Ok(Sum(4)));
        // The asker's four calls end (one late reply refused); its fifth stays held.
        let (mut ended, mut refused) = (0, 0);
        while ended < 4 || refused < 1 {
            match rx.recv_timeout(T).expect("the calls end") {
                Some(_) => ended += 1,
                None => refused += 1,
            }
        }
        let row = |report: &llbus::Report, caller: &str| {
            report
                .service("calc.add", caller)
                .map(figures)
                .unwrap_or_else(|| panic!("no row for {caller}: {report}"))
        };
        // calls, replies, errors, timeouts, dropped, panicked, stopped, full, in flight, late
        let client_row = [4, 2, 2, 1, 1, 0, 0, 0, 0, 1];
        let asker_row = [5, 2, 2, 1, 1, 0, 0, 0, 1, 1];
        wait_for("the held call to count", 30, || {
            row(&running.snapshot(), "asker") == asker_row
        });
        let live = running.snapshot();
        assert_eq!(row(&live, "client"), client_row);
        let shown = live.to_string();
        assert!(
            shown.contains("calc.add") && shown.contains("asker"),
            "{shown}"
        );
        let c = live.service("calc.add", "asker").expect("asker's row");
        assert_eq!((c.caller.as_str(), c.server.as_str()), ("asker", "adder"));
        // The counters file shows the same rows, under each caller.
        wait_for("the counters file to show the calls", 30, || {
            let s = read_counters_file(&path).expect("read");
            let file_row = |caller: &str| {
                let a = s.actors.iter().find(|a| a.name == caller)?;
                let c = a.calls.first()?;
                Some((
                    c.service.clone(),
                    c.server.clone(),
                    [
                        c.calls,
                        c.replies,
                        c.errors,
                        c.timeouts,
                        c.dropped,
                        c.server_panicked,
                        c.stopped,
                        c.queue_full,
                        c.in_flight,
                        c.late,
                    ],
                ))
            };
            let named = |row| Some(("calc.add".to_owned(), "adder".to_owned(), row));
            file_row("client") == named(client_row) && file_row("asker") == named(asker_row)
        });
        drop(client);
        running.stop();
        let report = running.join().expect("join");
        // The held call ends `Stopped` with the stop: nothing stays in flight.
        assert_eq!(row(&report, "asker"), [5, 2, 3, 1, 1, 0, 1, 0, 0, 1]);
        assert_balanced(&report);
    });
}
