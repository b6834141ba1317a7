//! The tokio adapter of the handles: async code feeds a bus through a channel and reads its
//! output through another, in order, with the channels' and the edges' bounds holding, and
//! both ends learn when the bus stops.

use std::time::Duration;

use llbus::{Actor, Backpressure, Bus, Context, Out, Setup};

#[derive(Clone, Debug, PartialEq)]
struct Num(u64);
tests::message!(Num, "tokio.num");

#[derive(Clone, Debug, PartialEq)]
struct Doubled(u64);
tests::message!(Doubled, "tokio.doubled");

struct Doubler {
    out: Out<Doubled>,
}
impl Actor for Doubler {
    type In = Num;
    fn on_message(&mut self, Num(n): Num, ctx: &mut Context<'_>) {
        ctx.publish(self.out, Doubled(n * 2));
    }
}

#[test]
fn async_code_feeds_and_reads_a_bus_through_tokio_channels() {
    tests::bounded("tokio adapter", 120, || {
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Num>("feed");
        bus.actor("doubler", |s: &mut Setup<'_>| Doubler { out: s.output() })
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
                tx
            };
            let receiver = async {
                for i in 0..N {
                    let got = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                        .await
                        .expect("a message within 30 s");
                    assert_eq!(got, Some(Doubled(2 * i)));
                }
            };
            let (tx, ()) = tokio::join!(sender, receiver);
            running.stop();
            // Once the bus stops, the forwarding thread ends and a send hands the value back.
            let refused = tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    if let Err(e) = tx.send(Num(u64::MAX)).await {
                        return e.0;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the sender learns that the bus stopped");
            assert_eq!(refused, Num(u64::MAX));
        });
        let report = running.join().expect("join");
        // The subscription's channel ends after the bus exits.
        let end =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), rx.recv()).await });
        assert_eq!(end, Ok(None));
        let e = report.edge("tokio.doubled", "doubler", "tap").unwrap();
        assert_eq!(e.handled, N);
        let into = report.edge("tokio.num", "feed", "doubler").unwrap();
        // Every value sent before the stop was published and handled; the one sent after it
        // was refused (handed back above), never published.
        assert_eq!((into.published, into.handled), (N, N), "{into:?}");
    });
}
