//! The live counters: each export and import is a handle of the bus whose named metrics show
//! in the bus's live counters file.

use std::time::{Duration, Instant};

use llbus::{Backpressure, Bus};
use llbus_zenoh::zenoh::{self, Wait};
use llbus_zenoh::{Export, Gateway, Import};

use crate::fixtures::*;

/// The crate's rustdoc "Live counters": each export and import is a handle with named metrics,
/// "shown in the bus's report and its live counters file like any other figure" (what `llbus
/// stat` reads). Once the traffic settles, the file's rows carry the gateway's figures.
#[cfg(unix)]
#[test]
fn the_live_counters_file_shows_the_gateways_figures() {
    let _zenoh = crate::fixtures::zenoh_threads(false);
    let (a, b) = peers();
    let mut bus = Bus::builder();
    bus.name(&format!("test-zenoh-{}", std::process::id()));
    bus.counters_file(true);
    let app = bus.subscription_with::<Tick>("app", Backpressure::DropNewest, 64);
    let quotes = bus.publisher::<Quote>("quotes");
    let mut gateway = Gateway::builder();
    gateway.import::<Tick>(&mut bus, Import::new());
    gateway.export::<Quote>(&mut bus, Export::new());
    let mut running = bus.start().expect("the bus starts");
    let gateway = gateway.start(&mut running, a).expect("the gateway starts");
    let app = running.subscription(app).expect("the handle");
    let mut quotes = running.publisher(quotes).expect("the handle");
    let path = running
        .counters_path()
        .expect("the bus writes a counters file")
        .to_owned();

    let client = zenoh::open(b).wait().expect("the client session opens");
    let t = matched_publisher(&client, "llbus/test.tick");
    for n in 0..45u64 {
        let put = t
            .put(bincode_of(&Tick { n }))
            .encoding(bincode_encoding::<Tick>());
        match n % 9 {
            0..=5 => put.attachment(attachment::<Tick>(0, 6, n).to_vec()).wait(),
            6 | 7 => put.attachment(attachment::<Tick>(1, 6, n).to_vec()).wait(),
            _ => put.wait(),
        }
        .expect("the put");
    }
    for n in 0..7 {
        quotes.publish(quote(n)).expect("published");
    }
    let counts = counts_when(&gateway, |c| c.received == 45 && c.put == 7);
    assert_eq!(
        (
            counts.published,
            counts.refused,
            counts.malformed,
            counts.put
        ),
        (30, 10, 5, 7),
        "{counts:?}"
    );
    let want = [
        ("zenoh-import:test.tick", "zenoh.received", 45),
        ("zenoh-import:test.tick", "zenoh.published", 30),
        ("zenoh-import:test.tick", "zenoh.refused", 10),
        ("zenoh-import:test.tick", "zenoh.malformed", 5),
        ("zenoh-export:test.quote", "zenoh.put", 7),
    ];
    let deadline = Instant::now() + LIMIT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(snapshot) = llbus::read_counters_file(&path) {
            seen = want
                .iter()
                .map(|(row, metric, _)| {
                    snapshot
                        .actors
                        .iter()
                        .find(|a| a.name == *row)
                        .and_then(|a| a.metrics.iter().find(|(n, _)| n == metric))
                        .map(|(_, v)| *v)
                })
                .collect();
            if seen
                .iter()
                .zip(&want)
                .all(|(got, (_, _, w))| *got == Some(*w))
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop((app, quotes));
    running.stop();
    running.join().expect("the bus joins");
    gateway.close();
    client.close().wait().expect("the client closes");
    let wanted: Vec<Option<u64>> = want.iter().map(|w| Some(w.2)).collect();
    assert_eq!(seen, wanted, "the counters file's rows {want:?}");
}
