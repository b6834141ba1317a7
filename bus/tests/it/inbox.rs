//! `#[derive(Inbox)]`: the topics an inbox enum subscribes to and the conversions it provides,
//! and an actor whose inbox is such an enum receiving every variant, each edge in order, from
//! several publishers, with the derives doing all the wiring.

use std::any::TypeId;
use std::sync::{Arc, Mutex};

use llbus::{Actor, Bus, Context, Inbox, Message, Out, Setup, TopicSpec};

#[derive(Message, Clone, Debug, PartialEq)]
#[message(topic = "md.quote")]
struct Quote {
    from: u8,
    n: u64,
}

#[derive(Message, Clone, Debug, PartialEq)]
#[message(topic = "md.trade")]
struct Trade {
    n: u64,
}

/// Its topic is its name, as written.
#[derive(Message, Clone, Debug, PartialEq)]
struct Heartbeat;

#[derive(Inbox, Debug, PartialEq)]
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
    assert!(report.edge("md.quote", "venue-1", "strategy").is_some());
    assert_eq!(
        report.actor("strategy").unwrap().handled,
        3 * COUNT + COUNT / 1000
    );
}

/// The topics an inbox `I` subscribes to, in order.
fn topics_of<I: Inbox>() -> Vec<TopicSpec> {
    let mut out = Vec::new();
    I::topics(&mut out);
    out
}

#[test]
fn inbox_subscribes_to_every_variant_in_order() {
    let topics = topics_of::<StrategyIn>();
    let names: Vec<_> = topics.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["md.quote", "md.trade", "Heartbeat"]);
    let expected = [
        TopicSpec::of::<Quote>(),
        TopicSpec::of::<Trade>(),
        TopicSpec::of::<Heartbeat>(),
    ];
    for (got, want) in topics.iter().zip(&expected) {
        assert_eq!(got.name, want.name);
        assert_eq!(got.fingerprint, want.fingerprint);
        assert_eq!(got.type_id, want.type_id);
    }
    assert_eq!(topics[1].type_id, TypeId::of::<Trade>());
    assert_eq!(topics[1].name.id(), llbus::topic_id("md.trade"));
}

#[test]
fn inbox_appends_to_what_is_there() {
    let mut out = vec![TopicSpec::of::<Heartbeat>()];
    StrategyIn::topics(&mut out);
    assert_eq!(out.len(), 4);
}

#[test]
fn each_variant_converts_from_its_message() {
    assert_eq!(
        StrategyIn::from(Quote { from: 1, n: 15 }),
        StrategyIn::Quote(Quote { from: 1, n: 15 })
    );
    let trade: StrategyIn = Trade { n: 7 }.into();
    assert_eq!(trade, StrategyIn::Trade(Trade { n: 7 }));
    assert_eq!(StrategyIn::from(Heartbeat), StrategyIn::Beat(Heartbeat));
}

#[test]
fn single_variant_inbox_has_one_topic() {
    #[allow(dead_code)] // Only its topics are read.
    #[derive(Inbox)]
    enum OnlyTrades {
        Trade(Trade),
    }
    let topics = topics_of::<OnlyTrades>();
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].name, "md.trade");
}

#[test]
fn variant_types_may_be_paths() {
    mod feed {
        #[allow(dead_code)] // Only its topic is read.
        #[derive(llbus::Message)]
        #[message(topic = "feed.status")]
        pub struct Status {
            pub up: bool,
        }
    }
    #[allow(dead_code)] // Only its topics are read.
    #[derive(Inbox)]
    enum ControlIn {
        Status(feed::Status),
        Quote(crate::inbox::Quote),
    }
    let names: Vec<_> = topics_of::<ControlIn>()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["feed.status", "md.quote"]);
}

/// The receivers are one `Inputs<M>` per variant, in declaration order: the type says so.
#[test]
fn receivers_are_one_input_per_variant() {
    fn same<T: 'static, U: 'static>() -> bool {
        TypeId::of::<T>() == TypeId::of::<U>()
    }
    type Expected = (
        llbus::Inputs<Quote>,
        llbus::Inputs<Trade>,
        llbus::Inputs<Heartbeat>,
    );
    assert!(same::<<StrategyIn as Inbox>::Receivers, Expected>());
}

/// The generated code names everything by absolute path, so it compiles without the prelude.
mod hygiene {
    #![no_implicit_prelude]
    #![allow(dead_code)] // Decoys and an inbox whose topics alone are read.

    pub struct Inputs;
    pub struct Vec;

    #[derive(::llbus::Inbox)]
    pub(super) enum BareIn {
        Quote(super::Quote),
    }
}

#[test]
fn inbox_derive_needs_no_prelude() {
    assert_eq!(topics_of::<hygiene::BareIn>()[0].name, "md.quote");
}
