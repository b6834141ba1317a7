//! `Gateway::errors`: one line per topic and kind of error, with the first message, a count
//! and the latest; a flood of refused streams hides no later error, and a hostile encoding
//! cannot forge a line.

use llbus::{Backpressure, Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Gateway, Import};

use crate::fixtures::*;

/// docs/ZENOH.md: the first refusal of each stream is reported, the rest counted; the stream
/// table is bounded. A hostile client opens thousands of streams, good and of a wrong
/// fingerprint: every sample is counted, the kept errors stay bounded, and a good sample of a
/// fresh stream still passes.
#[test]
fn thousands_of_streams_are_all_counted_and_the_errors_stay_bounded() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 8192);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/test.tick");
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
        errors[0].contains("fingerprint") && errors[0].contains("test.tick"),
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

/// docs/ZENOH.md "What an import checks": "the first [refusal] of each stream is reported with
/// an error naming the topic and both fingerprints (`Gateway::errors`, and the log)", and a
/// malformed sample is "reported once". A hostile client that first opens 100 mismatched
/// streams must not hide a later refusal, or the first malformed sample, from
/// `Gateway::errors` (what the subscriber example prints in its RESULT).
#[test]
fn a_flood_of_refused_streams_does_not_hide_later_errors() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let TickImport {
        running,
        gateway,
        app,
        client,
    } = tick_import();
    let t = matched_publisher(&client, "llbus/test.tick");
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

/// docs/ZENOH.md "Errors": each line keeps "the first message, and if it came again, how many
/// times and the latest message", so a flood hides neither another kind's first error "nor the
/// latest refusal of its own kind". Three refused streams: fingerprint A, then B, then A again.
/// The latest refusal is A's; the line must not call B's the latest.
#[test]
fn the_errors_line_names_the_latest_refusal() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let TickImport {
        running,
        gateway,
        app,
        client,
    } = tick_import();
    let t = matched_publisher(&client, "llbus/test.tick");
    let (fa, fb) = (0x0a0a_u64, 0x0b0b_u64);
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fa, 1, 0)),
        bincode_encoding::<Tick>(),
    );
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fb, 2, 0)),
        bincode_encoding::<Tick>(),
    );
    put_tick(
        &t,
        0,
        Some(attachment::<Tick>(fa, 3, 0)),
        bincode_encoding::<Tick>(),
    );
    let counts = counts_when(&gateway, |c| c.refused == 3);
    let errors = gateway.errors();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.refused, 3, "{counts:?}");
    assert_eq!(errors.len(), 1, "one topic, one kind: {errors:#?}");
    let theirs_a = format!("theirs {:#018x}", Tick::FINGERPRINT ^ fa);
    let latest = errors[0]
        .split_once("the latest:")
        .map_or("", |(_, latest)| latest);
    assert!(
        latest.contains(&theirs_a),
        "the latest refusal was fingerprint A's ({theirs_a}), the line says: {}",
        errors[0]
    );
}

/// docs/ZENOH.md "Errors": "The log gets the first line of each kind and topic only", and
/// `Gateway::errors` holds one line per topic and kind. A hostile client controls an unknown
/// encoding's schema text (zenoh caps it at 255 bytes), which the malformed message quotes: a
/// schema with line breaks must not forge extra lines in the table or the log.
#[test]
fn a_hostile_encoding_cannot_forge_error_lines() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let t = matched_publisher(&client, "llbus/test.tick");
    let schema = "x\n[ERROR llbus_zenoh] zenoh gateway: all imports healthy\n";
    let hostile = zenoh::bytes::Encoding::TEXT_PLAIN.with_schema(schema);
    put_tick(&t, 0, Some(attachment::<Tick>(0, 1, 0)), hostile);
    let counts = counts_when(&gateway, |c| c.malformed == 1);
    let errors = gateway.errors();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.malformed, 1, "{counts:?}");
    assert!(
        errors.iter().all(|e| !e.contains('\n')),
        "an error line carries the sender's line breaks: {errors:#?}"
    );
}
