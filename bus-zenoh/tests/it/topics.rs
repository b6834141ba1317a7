//! Named topics through the gateway: one key per topic name, the attachment's topic id is the
//! name's, each named import takes only its own topic, a remapped topic goes out under the name
//! it runs under, and the echo and duplicate refusals compare names, not types.

use std::time::Duration;

use llbus::{Backpressure, Bus, Message, Topic};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Export, Gateway, GatewayError, Import};

use crate::fixtures::*;

fn topic(name: &str) -> Topic<Tick> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The attachment of the next sample on `sub`, and its key.
fn next_sample(
    sub: &zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
) -> (String, Attachment) {
    let s = sub
        .recv_timeout(LIMIT)
        .expect("open")
        .unwrap_or_else(|| panic!("no sample came"));
    let a = s
        .attachment()
        .and_then(|a| Attachment::decode(&a.to_bytes()))
        .expect("the gateway's attachment");
    (s.key_expr().as_str().to_owned(), a)
}

/// docs/ZENOH.md "Named topics": two topics of one type exported from one bus go on two keys
/// (`llbus/<name>`), each sample carrying its name's id; another bus imports them into two
/// named topics, and each subscriber there gets only the messages of its own topic. The
/// handles are named `zenoh-export:<name>` and `zenoh-import:<name>`.
#[test]
fn two_topics_of_one_type_go_on_two_keys_and_each_import_gets_only_its_own() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let (nyse, nasdaq) = (topic("md.tick.nyse"), topic("md.tick.nasdaq"));

    let mut exporting = Bus::builder();
    let feed_nyse = exporting.publisher_on(&nyse, "feed-nyse");
    let feed_nasdaq = exporting.publisher_on(&nasdaq, "feed-nasdaq");
    let mut exporter = Gateway::builder();
    exporter.export_on(&mut exporting, &nyse, Export::new());
    exporter.export_on(&mut exporting, &nasdaq, Export::new());

    let mut importing = Bus::builder();
    let app_nyse = importing.subscription_on(&nyse, "app-nyse", Backpressure::Block, 256);
    let app_nasdaq = importing.subscription_on(&nasdaq, "app-nasdaq", Backpressure::Block, 256);
    let mut importer = Gateway::builder();
    importer.import_on(&mut importing, &nyse, Import::new());
    importer.import_on(&mut importing, &nasdaq, Import::new());

    let mut exporting = exporting.start().expect("the exporting bus starts");
    let mut importing = importing.start().expect("the importing bus starts");
    let exporter = exporter
        .start(&mut exporting, a)
        .expect("the exporter starts");
    let importer = importer
        .start(&mut importing, b)
        .expect("the importer starts");
    // A raw subscriber beside the import, to see what goes on the wire.
    let watch = importer
        .session()
        .declare_subscriber("llbus/md.tick.nyse")
        .wait()
        .expect("a subscriber");
    assert!(exporter.wait_matched(LIMIT), "the importer never matched");

    let mut feed_nyse = exporting.publisher(feed_nyse).expect("the handle");
    let mut feed_nasdaq = exporting.publisher(feed_nasdaq).expect("the handle");
    for n in 0..50 {
        feed_nyse.publish(Tick { n }).expect("published");
        feed_nasdaq
            .publish(Tick { n: 1000 + n })
            .expect("published");
    }
    let mut app_nyse = importing.subscription(app_nyse).expect("the handle");
    let mut app_nasdaq = importing.subscription(app_nasdaq).expect("the handle");
    let take = |sub: &mut llbus::Subscription<Tick>| {
        (0..50)
            .map(|i| {
                sub.recv_timeout(LIMIT)
                    .unwrap_or_else(|e| panic!("message {i} never came: {e:?}"))
                    .n
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(take(&mut app_nyse), (0..50).collect::<Vec<_>>());
    assert_eq!(take(&mut app_nasdaq), (1000..1050).collect::<Vec<_>>());
    // Nothing more: no message of the other topic follows either.
    assert!(app_nyse.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(app_nasdaq.recv_timeout(Duration::from_millis(200)).is_err());

    let (key, attachment) = next_sample(&watch);
    assert_eq!(key, "llbus/md.tick.nyse");
    assert_eq!(attachment.topic_id, llbus::topic_id("md.tick.nyse"));
    assert_ne!(attachment.topic_id, Tick::TOPIC_ID);
    assert_eq!(attachment.fingerprint, Tick::FINGERPRINT);

    let counts = counts_when(&importer, |c| c.published == 100);
    assert_eq!((counts.published, counts.refused), (100, 0), "{counts:?}");
    drop((feed_nyse, feed_nasdaq, app_nyse, app_nasdaq, watch));
    exporting.stop();
    importing.stop();
    let sent = exporting.join().expect("the exporting bus joins");
    let received = importing.join().expect("the importing bus joins");
    let put = exporter.close();
    importer.close();
    assert_eq!(put.put, 100, "{put:?}");
    for (name, feed) in [
        ("md.tick.nyse", "feed-nyse"),
        ("md.tick.nasdaq", "feed-nasdaq"),
    ] {
        let edge = sent
            .edge(name, feed, &format!("zenoh-export:{name}"))
            .unwrap_or_else(|| panic!("the export edge of {name}: {:?}", sent.edges));
        assert_eq!(edge.published, 50, "{edge:?}");
        assert_edge_balances(edge);
    }
    for (name, app) in [
        ("md.tick.nyse", "app-nyse"),
        ("md.tick.nasdaq", "app-nasdaq"),
    ] {
        let edge = received
            .edge(name, &format!("zenoh-import:{name}"), app)
            .unwrap_or_else(|| panic!("the import edge of {name}: {:?}", received.edges));
        assert_eq!(edge.published, 50, "{edge:?}");
    }
}

/// docs/ZENOH.md "Named topics": an import of a named topic refuses, and counts, a sample on its
/// key that carries the type's default topic id (another name) or another fingerprint, naming
/// the topic; a sample with its name's id and the type's fingerprint is published.
#[test]
fn a_named_import_refuses_and_counts_samples_of_another_name_or_fingerprint() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let nyse = topic("md.tick.nyse");
    let mut bus = Bus::builder();
    let app = bus.subscription_on(&nyse, "app", Backpressure::DropNewest, 64);
    let mut gateway = Gateway::builder();
    gateway.import_on(&mut bus, &nyse, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");
    let client = zenoh::open(b).wait().expect("the client session opens");
    let publisher = matched_publisher(&client, "llbus/md.tick.nyse");
    let named = |fingerprint_xor: u64, stream: u64| {
        Attachment {
            topic_id: nyse.id(),
            fingerprint: Tick::FINGERPRINT ^ fingerprint_xor,
            stream,
            sequence: 0,
            sent_ns: 0,
        }
        .encode()
    };
    let encoding =
        zenoh::bytes::Encoding::from(llbus_zenoh::BINCODE_ENCODING).with_schema("md.tick.nyse");
    // The type's default topic id on this name's key: another topic.
    put_tick(
        &publisher,
        1,
        Some(attachment::<Tick>(0, 1, 0)),
        encoding.clone(),
    );
    // This name's id with another fingerprint.
    put_tick(&publisher, 2, Some(named(1, 2)), encoding.clone());
    // This name's id and the type's fingerprint.
    put_tick(&publisher, 3, Some(named(0, 3)), encoding);
    let counts = counts_when(&gateway, |c| c.received == 3);
    assert_eq!(counts.refused, 2, "{counts:?}");
    assert_eq!(counts.published, 1, "{counts:?}");
    assert_eq!(app.recv_timeout(LIMIT).expect("the good sample").n, 3);
    assert!(app.recv_timeout(Duration::from_millis(200)).is_err());
    let errors = gateway.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors.iter().all(|e| e.contains("'md.tick.nyse'")),
        "{errors:?}"
    );
    let other = format!("{:#018x}", Tick::TOPIC_ID);
    assert!(errors[0].contains(&other), "{errors:?}");
    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
    let import = report
        .actors
        .iter()
        .find(|a| a.name == "zenoh-import:md.tick.nyse")
        .expect("the import's handle");
    assert_eq!(import.metric("zenoh.refused"), Some(2));
}

/// docs/ZENOH.md "Named topics": a topic the bus renames (`remap`) goes out on the key of the
/// name it runs under, with that name's id, though the program exports the type's default
/// topic.
#[test]
fn a_remapped_topic_is_exported_under_the_name_it_runs_under() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    bus.remap("test.tick", "site2.tick");
    let app = bus.publisher::<Tick>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Tick>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let client = zenoh::open(b).wait().expect("the client session opens");
    let all = client
        .declare_subscriber("llbus/**")
        .wait()
        .expect("a subscriber");
    assert!(gateway.wait_matched(LIMIT), "the client never matched");
    let mut app = running.publisher(app).expect("the handle");
    app.publish(Tick { n: 7 }).expect("published");
    let (key, attachment) = next_sample(&all);
    assert_eq!(key, "llbus/site2.tick");
    assert_eq!(attachment.topic_id, llbus::topic_id("site2.tick"));
    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    let counts = gateway.close();
    client.close().wait().expect("the client closes");
    assert_eq!(counts.put, 1, "{counts:?}");
}

/// What `start` says of a gateway declared on a fresh bus with `declare`.
fn start_with(
    declare: impl FnOnce(&mut llbus::BusBuilder, &mut llbus_zenoh::GatewayBuilder),
) -> Result<(), GatewayError> {
    let (a, _b) = peers();
    let mut bus = Bus::builder();
    let mut gateway = Gateway::builder();
    declare(&mut bus, &mut gateway);
    let mut running = bus.start().expect("the bus starts");
    let started = gateway.start(&mut running, a).map(Gateway::close);
    running.stop();
    running.join().expect("the bus joins");
    started.map(|_| ())
}

/// docs/ZENOH.md "No echo" with named topics: exporting one name and importing another of the
/// same type is no echo and starts; exporting and importing one name is refused naming it; so
/// is an export and an import of two names that the bus renames to one (they run as one topic),
/// and two exports renamed onto one default key are a duplicate.
#[test]
fn echo_and_duplicate_refusals_compare_the_names_topics_run_under() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (nyse, nasdaq) = (topic("md.tick.nyse"), topic("md.tick.nasdaq"));
    let started = start_with(|bus, gateway| {
        let _ = bus.publisher_on(&nyse, "feed");
        gateway.export_on(bus, &nyse, Export::new());
        gateway.import_on(bus, &nasdaq, Import::new());
    });
    assert!(started.is_ok(), "two names of one type: {started:?}");

    let echo = start_with(|bus, gateway| {
        let _ = bus.publisher_on(&nyse, "feed");
        gateway.export_on(bus, &nyse, Export::new());
        gateway.import_on(bus, &nyse, Import::new());
    });
    assert!(
        matches!(&echo, Err(GatewayError::Echo(t)) if t == "md.tick.nyse"),
        "{echo:?}"
    );
    assert!(echo.unwrap_err().to_string().contains("'md.tick.nyse'"));

    let renamed_echo = start_with(|bus, gateway| {
        bus.remap("md.tick.nasdaq", "md.tick.nyse");
        let _ = bus.publisher_on(&nyse, "feed");
        gateway.export_on(bus, &nyse, Export::new());
        gateway.import_on(bus, &nasdaq, Import::new());
    });
    assert!(
        matches!(&renamed_echo, Err(GatewayError::Echo(t)) if t == "md.tick.nyse"),
        "{renamed_echo:?}"
    );

    let duplicate = start_with(|bus, gateway| {
        bus.remap("md.tick.nasdaq", "md.tick.nyse");
        let _ = bus.publisher_on(&nyse, "feed");
        gateway.export_on(bus, &nyse, Export::new());
        gateway.export_on(bus, &nasdaq, Export::new());
    });
    match duplicate {
        Err(GatewayError::Duplicate { topic, key, export }) => {
            assert_eq!(topic, "md.tick.nyse");
            assert_eq!(key, "llbus/md.tick.nyse");
            assert!(export);
        }
        other => panic!("two exports renamed onto one key: {other:?}"),
    }
}
