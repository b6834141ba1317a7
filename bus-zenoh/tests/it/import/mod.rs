//! Imports: what a hostile zenoh client puts on an import's key is counted (late, lost,
//! malformed, stopped) and never panics, a slow reader drops and counts on its edge, and the
//! import's row balances in every live snapshot. Forged sequence numbers: `forged`.

mod forged;

use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Message, Report};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Export, Gateway, Import, BINCODE_ENCODING};

use crate::fixtures::*;

/// docs/ZENOH.md "What an import checks": a sample older than one already seen of its stream
/// is delivered and counted late; a sample of a new stream starts it anywhere (no loss counted
/// before it); a gap is counted lost. Backwards jumps and duplicates through zenoh.
#[test]
fn backward_jumps_and_duplicates_are_late_and_delivered_gaps_lost() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Quote>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/test.quote");
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
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Quote>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let q = matched_publisher(&client, "llbus/test.quote");
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
            zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema("test.other"),
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

/// docs/ZENOH.md "Import": a full ring drops and counts on the edge, it never blocks zenoh. An
/// app that does not read: what the import published is on its edge as handled + dropped + in
/// flight, and the import's own figures balance.
#[test]
fn a_slow_import_reader_drops_and_counts_on_its_edge() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::Block, 16);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/test.tick");
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
        .edge(Tick::TOPIC, "zenoh-import:test.tick", "app")
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
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let TickImport {
        running,
        gateway,
        app,
        client,
    } = tick_import();
    let total = 30_000u64;
    let sender = {
        let client = client.clone();
        std::thread::spawn(move || {
            let t = matched_publisher(&client, "llbus/test.tick");
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
        r.actor("zenoh-import:test.tick")
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

/// docs/ZENOH.md "Stop": samples that arrive at an import once the bus is stopping are counted
/// `zenoh.stopped`, and the import's figures still balance, whether the bus has only been asked
/// to stop or has joined.
#[test]
fn samples_after_a_stop_are_counted_stopped_and_the_import_balances() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/test.tick");
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
        .edge(Tick::TOPIC, "zenoh-import:test.tick", "app")
        .expect("the import's edge");
    assert_eq!(edge.published, counts.published, "{edge:?}");
    assert_edge_balances(edge);
}

/// docs/ZENOH.md "What a sample says": JSON has no NaN or infinity, so a JSON export puts such
/// a float as `null` (serde_json), and an llbus import counts that sample malformed; bincode is
/// the encoding between llbus processes. The books balance: every message the export took is
/// put, and every sample the import received is published or counted malformed.
#[test]
fn a_json_export_of_a_nan_float_is_counted_malformed_by_an_llbus_import() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
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
