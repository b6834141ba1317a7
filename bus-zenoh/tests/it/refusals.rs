//! What `GatewayBuilder::start` refuses: a declaration zenoh refuses (closing what was
//! started), a topic both exported and imported on one bus (an echo, by one gateway or two),
//! and one topic exported or imported twice on one key.

use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Export, Gateway, Import};

use crate::fixtures::*;

/// `GatewayBuilder::start`'s rustdoc: zenoh refusing a declaration is an error, and what was
/// started is closed again. An export on a key zenoh refuses (an empty chunk) after a good one:
/// `start` returns the error in bounded time, the good export's thread ends, and the bus keeps
/// running and stops normally without a publisher ever waiting.
#[test]
fn a_refused_declaration_fails_start_and_closes_what_was_started() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
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
        .edge(Tick::TOPIC, "ticks", "zenoh-export:test.tick@llbus//tick")
        .expect("the keyed export's edge");
    for edge in [export_edge::<Quote>(&report, "quotes"), keyed] {
        assert_eq!(edge.published, 5000, "{edge:?}");
        assert_edge_balances(edge);
    }
}

/// README "Beyond one LAN" (a gateway carries topics "into zenoh and back") and docs/ZENOH.md:
/// a gateway that both exports and imports one topic would feed its own puts back into the bus
/// (an echo that grows without end), so `start` refuses it with an error naming the topic, and
/// the bus still stops normally.
#[test]
fn exporting_and_importing_one_topic_is_refused_at_start() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
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
            assert!(e.contains("'test.tick'"), "{e}");
        }
    }
}

/// docs/ZENOH.md "No echo": a gateway that both exports and imports one topic is refused at
/// start, because the import would feed the local topic, which the export would put again,
/// without end. Two gateways started on one bus (one exports the topic, the other imports it,
/// their sessions peers of each other) form the same loop, inside one process where both
/// handles are on one bus for `start` to see. One message published must be put once.
#[test]
fn two_gateways_on_one_bus_cannot_echo_a_topic() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut exporter = Gateway::builder();
    exporter.export::<Tick>(&mut bus, Export::new());
    let mut importer = Gateway::builder();
    importer.import::<Tick>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let exporter = exporter.start(&mut running, a);
    let importer = importer.start(&mut running, b);
    let mut app = running.publisher(app).expect("the handle");
    let (exporter, importer) = match (exporter, importer) {
        (Ok(e), Ok(i)) => (e, i),
        (Err(e), _) | (_, Err(e)) => {
            // Refused: the echo was seen. The promise holds.
            assert!(matches!(e, llbus_zenoh::GatewayError::Echo(_)), "{e:?}");
            drop(app);
            running.stop();
            running.join().expect("the bus joins");
            return;
        }
    };
    assert!(exporter.wait_matched(LIMIT), "the importer never matched");
    app.publish(Tick { n: 1 }).expect("published");
    std::thread::sleep(Duration::from_secs(2));
    let put = exporter.counts().put;
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    let imported = importer.close();
    let exported = exporter.close();
    assert!(
        put <= 1,
        "one message was put {put} times in 2 s (exported {exported:?}, imported {imported:?})"
    );
}

/// docs/ZENOH.md "Export": handles are named `zenoh-export:<topic>@<key>` "so one topic can be
/// exported on several keys". Two exports of one topic on one given key get one name, which
/// `start()` refuses (two handles cannot share a name): the user learns of the mistake at once.
#[test]
fn one_topic_exported_twice_on_one_given_key_is_refused_at_start() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let mut bus = Bus::builder();
    let _app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new().key("site/tick"));
    gateway.export::<Tick>(&mut bus, Export::new().key("site/tick"));
    match bus.start() {
        Ok(running) => {
            running.stop();
            let _ = running.join();
            panic!("two exports of one topic on one key started");
        }
        Err(e) => assert!(
            e.to_string().contains("zenoh-export:test.tick@site/tick"),
            "{e}"
        ),
    }
}

/// The same mistake spelled two ways: an export on the default key and one given that key
/// explicitly (`llbus/<topic>`). The names differ (`zenoh-export:t` and `zenoh-export:t@llbus/t`),
/// so nothing refuses them, both put every message on one key, and an importer publishes each
/// message twice.
#[test]
fn one_topic_exported_on_its_default_key_twice_arrives_once() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    gateway.export::<Tick>(&mut bus, Export::new().key("llbus/test.tick"));
    let Ok(mut running) = bus.start() else {
        return; // Refused at start: the promise holds.
    };
    let mut other = Bus::builder();
    let reader = other.subscription_with::<Tick>("reader", Backpressure::DropNewest, 256);
    let mut import = Gateway::builder();
    import.import::<Tick>(&mut other, Import::new());
    let mut other_running = other.start().expect("the other bus starts");
    let importer = import
        .start(&mut other_running, b)
        .expect("the importer starts");
    let reader = other_running.subscription(reader).expect("the handle");
    let exporter = match gateway.start(&mut running, a) {
        Ok(g) => g,
        Err(_) => {
            // Refused at the gateway's start: the promise holds.
            drop(reader);
            other_running.stop();
            let _ = other_running.join();
            importer.close();
            running.stop();
            let _ = running.join();
            return;
        }
    };
    let mut app = running.publisher(app).expect("the handle");
    assert!(exporter.wait_matched(LIMIT), "the importer never matched");
    for n in 0..10 {
        app.publish(Tick { n }).expect("published");
    }
    let counts = counts_when(&importer, |c| c.published >= 20);
    std::thread::sleep(Duration::from_millis(200));
    let published = importer.counts().published;
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    drop(reader);
    other_running.stop();
    other_running.join().expect("the other bus joins");
    exporter.close();
    importer.close();
    assert_eq!(published, 10, "10 messages sent, imported {counts:?}");
}

/// The import side of the same mistake: an import on the default key and one given
/// `llbus/<topic>` start side by side, and each sample is published twice into the bus.
#[test]
fn one_topic_imported_on_its_default_key_twice_is_published_once() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 256);
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    gateway.import::<Tick>(&mut bus, Import::new().key("llbus/test.tick"));
    let Ok(mut running) = bus.start() else {
        return; // Refused at start: the promise holds.
    };
    let Ok(gateway) = gateway.start(&mut running, a) else {
        running.stop();
        let _ = running.join();
        return; // Refused at the gateway's start: the promise holds.
    };
    let app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client opens");
    let t = matched_publisher(&client, "llbus/test.tick");
    for n in 0..10 {
        put_tick(
            &t,
            n,
            Some(attachment::<Tick>(0, 1, n)),
            bincode_encoding::<Tick>(),
        );
    }
    let _ = counts_when(&gateway, |c| c.published >= 20);
    std::thread::sleep(Duration::from_millis(200));
    let counts = gateway.counts();
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    let _ = client.close().wait();
    assert_eq!(counts.published, 10, "10 samples put: {counts:?}");
}
