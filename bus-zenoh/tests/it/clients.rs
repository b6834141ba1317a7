//! What a zenoh client that is not llbus sees and sends, in one process with two zenoh sessions
//! (peers on loopback, scouting off): a JSON export's samples read as plain JSON, its JSON
//! Schema on the companion key, and hostile samples on an import's key counted malformed
//! (never a panic), in the bus's report as well as the gateway's figures.

use llbus::{Bus, Message};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Attachment, Export, Gateway, Import, PayloadEncoding, BINCODE_ENCODING};

use crate::fixtures::*;

#[test]
fn a_json_export_is_read_without_llbus_and_serves_its_json_schema() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.publisher::<Quote>("app");
    let mut gateway = Gateway::builder();
    gateway.export::<Quote>(&mut bus, Export::new().encoding(PayloadEncoding::Json));
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.publisher(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let samples = client
        .declare_subscriber("llbus/test.quote")
        .wait()
        .expect("a subscriber");
    assert!(
        gateway.wait_matched(LIMIT),
        "the client's subscriber never matched"
    );
    let quote = Quote {
        px: 101.25,
        qty: 7,
        venue: "XPAR".to_owned(),
    };
    app.publish(quote.clone()).expect("published");
    let sample = samples
        .recv_timeout(LIMIT)
        .expect("the subscriber is open")
        .expect("a sample within the limit");
    assert_eq!(
        sample.encoding().to_string(),
        "application/json;test.quote",
        "the encoding names JSON and the topic"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&sample.payload().to_bytes()).expect("the payload is JSON");
    assert_eq!(
        json,
        serde_json::json!({"px": 101.25, "qty": 7, "venue": "XPAR"})
    );
    let attachment = sample
        .attachment()
        .and_then(|a| Attachment::decode(&a.to_bytes()))
        .expect("the gateway's attachment");
    assert_eq!(attachment.topic_id, Quote::TOPIC_ID);
    assert_eq!(attachment.fingerprint, Quote::FINGERPRINT);
    assert_eq!(attachment.sequence, 0);

    let replies = client
        .get("llbus/test.quote/@schema")
        .wait()
        .expect("a query");
    let reply = replies
        .recv_timeout(LIMIT)
        .expect("the query is open")
        .expect("a reply within the limit");
    let schema = reply.into_result().expect("the schema, not an error");
    let schema: serde_json::Value =
        serde_json::from_slice(&schema.payload().to_bytes()).expect("the schema is JSON");
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["properties"]["px"]["type"], "number", "{schema}");
    assert_eq!(schema["properties"]["qty"]["type"], "integer", "{schema}");
    assert_eq!(schema["properties"]["venue"]["type"], "string", "{schema}");

    drop(app);
    running.stop();
    running.join().expect("the bus joins");
    let counts = gateway.close();
    assert_eq!((counts.put, counts.put_failed), (1, 0), "{counts:?}");
    client.close().wait().expect("the client closes");
}

#[test]
fn hostile_samples_on_an_import_key_are_counted_malformed_and_good_ones_still_pass() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    let app = bus.subscription::<Quote>("app");
    let mut gateway = Gateway::builder();
    gateway.import::<Quote>(&mut bus, Import::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let mut app = running.subscription(app).expect("the handle");

    let client = zenoh::open(b).wait().expect("the client session opens");
    let publisher = matched_publisher(&client, "llbus/test.quote");
    let bincode = zenoh::bytes::Encoding::from(BINCODE_ENCODING).with_schema("test.quote");
    let attachment = |sequence: u64| {
        Attachment {
            topic_id: Quote::TOPIC_ID,
            fingerprint: Quote::FINGERPRINT,
            stream: 7,
            sequence,
            sent_ns: 0,
        }
        .encode()
        .to_vec()
    };
    // A string whose length prefix claims 2^64-1 bytes: bounded decoding refuses it without
    // allocating.
    let mut huge = Vec::new();
    huge.extend_from_slice(&1.0f64.to_le_bytes());
    huge.extend_from_slice(&1u32.to_le_bytes());
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    let hostile: Vec<(Vec<u8>, zenoh::bytes::Encoding, Option<Vec<u8>>)> = vec![
        // No attachment at all.
        (vec![1, 2, 3], bincode.clone(), None),
        // An attachment of the wrong length.
        (vec![1, 2, 3], bincode.clone(), Some(vec![0; 39])),
        // Truncated bincode.
        (vec![1, 2, 3], bincode.clone(), Some(attachment(0))),
        // A hostile length prefix.
        (huge, bincode.clone(), Some(attachment(1))),
        // JSON of another shape.
        (
            br#"{"px": "high"}"#.to_vec(),
            zenoh::bytes::Encoding::APPLICATION_JSON.with_schema("test.quote"),
            Some(attachment(2)),
        ),
        // An encoding the import does not know.
        (
            vec![0; 24],
            zenoh::bytes::Encoding::TEXT_PLAIN,
            Some(attachment(3)),
        ),
    ];
    let malformed = hostile.len() as u64;
    for (payload, encoding, attachment) in hostile {
        let put = publisher.put(payload).encoding(encoding);
        match attachment {
            Some(a) => put.attachment(a).wait(),
            None => put.wait(),
        }
        .expect("the put");
    }
    // Then a good one, in JSON, with the next sequence number of the stream.
    let good = Quote {
        px: 2.5,
        qty: 1,
        venue: "XLON".to_owned(),
    };
    publisher
        .put(serde_json::to_vec(&good).expect("JSON"))
        .encoding(zenoh::bytes::Encoding::APPLICATION_JSON.with_schema("test.quote"))
        .attachment(attachment(4))
        .wait()
        .expect("the put");
    let got = app.recv_timeout(LIMIT).expect("the good sample arrives");
    assert_eq!(got, good);

    let counts = gateway.counts();
    assert_eq!(counts.malformed, malformed, "{counts:?}");
    assert_eq!((counts.received, counts.published), (malformed + 1, 1));
    assert_eq!(counts.lost, 0, "the stream had no gap: {counts:?}");
    let errors = gateway.errors();
    assert_eq!(errors.len(), 1, "reported once, then counted: {errors:?}");
    assert!(
        errors[0].contains("malformed") && errors[0].contains("'test.quote'"),
        "{}",
        errors[0]
    );

    drop(app);
    running.stop();
    let report = running.join().expect("the bus joins");
    let row = report
        .actor("zenoh-import:test.quote")
        .expect("the import's row in the report");
    assert_eq!(row.metric("zenoh.malformed"), Some(malformed));
    assert_eq!(row.metric("zenoh.received"), Some(malformed + 1));
    gateway.close();
    client.close().wait().expect("the client closes");
}
