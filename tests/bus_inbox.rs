//! An actor whose inbox is a `#[derive(Inbox)]` enum receives every variant, each edge in order,
//! from several publishers, with the derives doing all the wiring.

use std::sync::{Arc, Mutex};

use llbus::{Actor, Bus, Context, Inbox, Message, Out, Setup};
use serde::{Deserialize, Serialize};

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "inbox.quote")]
struct Quote {
    from: u8,
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "inbox.trade")]
struct Trade {
    n: u64,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "inbox.heartbeat")]
struct Heartbeat;

#[derive(Inbox, Debug)]
enum StrategyIn {
    Quote(Quote),
    Trade(Trade),
    Beat(Heartbeat),
}

const COUNT: u64 = 5_000;

/// Publishes `COUNT` quotes (and, with the trade outputs, as many trades and a heartbeat per
/// 1000), then it is done.
struct Venue {
    id: u8,
    next: u64,
    quotes: Out<Quote>,
    trade_out: Option<Out<Trade>>,
    beats: Option<Out<Heartbeat>>,
}

impl Actor for Venue {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        if self.next == COUNT {
            return 0;
        }
        let n = self.next;
        ctx.publish(self.quotes, Quote { from: self.id, n });
        if let (Some(t), Some(b)) = (self.trade_out, self.beats) {
            ctx.publish(t, Trade { n });
            if n % 1000 == 0 {
                ctx.publish(b, Heartbeat);
            }
        }
        self.next += 1;
        1
    }
}

#[derive(Default, Debug)]
struct Seen {
    quotes: [u64; 2],
    trades: u64,
    beats: u64,
}

struct Strategy {
    seen: Arc<Mutex<Seen>>,
}

impl Actor for Strategy {
    type In = StrategyIn;
    fn on_message(&mut self, msg: StrategyIn, ctx: &mut Context<'_>) {
        let mut s = self.seen.lock().unwrap();
        match msg {
            StrategyIn::Quote(q) => {
                let i = usize::from(q.from);
                assert_eq!(
                    q.n, s.quotes[i],
                    "quotes from venue {} out of order",
                    q.from
                );
                s.quotes[i] += 1;
            }
            StrategyIn::Trade(t) => {
                assert_eq!(t.n, s.trades, "trades out of order");
                s.trades += 1;
            }
            StrategyIn::Beat(Heartbeat) => s.beats += 1,
        }
        if s.quotes == [COUNT, COUNT] && s.trades == COUNT && s.beats == COUNT / 1000 {
            ctx.request_stop();
        }
    }
}

#[test]
fn an_inbox_actor_receives_every_variant_in_per_edge_order() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut bus = Bus::builder();
    bus.actor("venue-0", |s: &mut Setup<'_>| Venue {
        id: 0,
        next: 0,
        quotes: s.output(),
        trade_out: Some(s.output()),
        beats: Some(s.output()),
    })
    .publishes::<Quote>()
    .publishes::<Trade>()
    .publishes::<Heartbeat>();
    bus.actor("venue-1", |s: &mut Setup<'_>| Venue {
        id: 1,
        next: 0,
        quotes: s.output(),
        trade_out: None,
        beats: None,
    })
    .publishes::<Quote>();
    let s2 = Arc::clone(&seen);
    bus.actor("strategy", move |_: &mut Setup<'_>| Strategy {
        seen: Arc::clone(&s2),
    })
    .subscribes::<StrategyIn>()
    .capacity::<Quote>(32);
    let report = bus.start().expect("valid").join().expect("no failure");
    let s = seen.lock().unwrap();
    assert_eq!(s.quotes, [COUNT, COUNT]);
    assert_eq!((s.trades, s.beats), (COUNT, COUNT / 1000));
    // One ring per publisher edge: two quote edges, one trade edge, one heartbeat edge.
    assert_eq!(report.edges.len(), 4);
    assert!(report.edge("inbox.quote", "venue-1", "strategy").is_some());
    assert_eq!(
        report.actor("strategy").unwrap().handled,
        3 * COUNT + COUNT / 1000
    );
}
