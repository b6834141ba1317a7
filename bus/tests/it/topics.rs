//! Named topics: several topics of one type on one bus, chosen at run time; the topic each
//! message came on; renaming at deployment; and the names `start()` refuses.

use std::sync::mpsc;
use std::time::Duration;

use crate::fixtures::start_err;
use llbus::{Actor, Backpressure, Bus, Context, Out, Setup, StartError, Topic};
use tests::{assert_balanced, bounded};

/// A quote, as two venues publish it.
#[derive(Clone, Debug, PartialEq)]
pub struct Quote(pub u64);
tests::message!(Quote, "md.quote");

/// A trade: a second type for inboxes of two types.
#[derive(Clone, Debug, PartialEq)]
pub struct Trade(pub u64);
tests::message!(Trade, "md.trade");

/// A message whose hand-written id is another name's: `x.collides` has the id of `md.quote.nyse`.
#[derive(Clone, Debug, PartialEq)]
pub struct Collides;
impl llbus::Message for Collides {
    const TOPIC: &'static str = "x.collides";
    const TOPIC_ID: u64 = llbus::topic_id("md.quote.nyse");
    const FINGERPRINT: u64 = 7;
}

fn topic<T: llbus::Message>(name: &str) -> Topic<T> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Sends `(topic name, value)` for every quote it handles, and `ctx.topic()` in its tick.
struct Venues {
    seen: mpsc::Sender<(Option<String>, u64)>,
}

impl Actor for Venues {
    type In = Quote;
    fn on_message(&mut self, Quote(px): Quote, ctx: &mut Context<'_>) {
        let name = ctx.topic().map(|t| t.to_string());
        let _ = self.seen.send((name, px));
    }
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        // Outside `on_message` there is no current topic.
        let _ = self
            .seen
            .send((ctx.topic().map(|t| t.to_string()), u64::MAX));
    }
}

/// Takes `n` messages from `rx` that are not ticks (value `u64::MAX`), within 30 s.
fn take(rx: &mpsc::Receiver<(Option<String>, u64)>, n: usize) -> Vec<(Option<String>, u64)> {
    let mut got = Vec::new();
    while got.len() < n {
        let m = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a message within 30 s");
        if m.1 != u64::MAX {
            got.push(m);
        }
    }
    got
}

#[test]
fn two_venues_of_one_type_reach_one_actor_that_learns_each_messages_topic() {
    bounded("two venues, one actor", 60, || {
        let (nyse, nasdaq) = (
            topic::<Quote>("md.quote.nyse"),
            topic::<Quote>("md.quote.nasdaq"),
        );
        let mut bus = Bus::builder();
        let to_nyse = bus.publisher_on(&nyse, "nyse-feed");
        let to_nasdaq = bus.publisher_on(&nasdaq, "nasdaq-feed");
        let (tx, rx) = mpsc::channel();
        bus.actor("strategy", move |_: &mut Setup<'_>| Venues {
            seen: tx.clone(),
        })
        .subscribes_to(&nyse)
        .subscribes_to(&nasdaq)
        .tick_every(Duration::from_millis(5));
        let mut running = bus.start().expect("start");
        let mut to_nyse = running.publisher(to_nyse).expect("nyse");
        let mut to_nasdaq = running.publisher(to_nasdaq).expect("nasdaq");
        for i in 0..100 {
            to_nyse.publish(Quote(i)).expect("publish");
            to_nasdaq.publish(Quote(1000 + i)).expect("publish");
        }
        let got = take(&rx, 200);
        for (name, px) in &got {
            let want = if *px < 1000 {
                "md.quote.nyse"
            } else {
                "md.quote.nasdaq"
            };
            assert_eq!(name.as_deref(), Some(want), "quote {px}");
        }
        // Each venue's quotes in order.
        let order = |venue: &str| -> Vec<u64> {
            got.iter()
                .filter(|(n, _)| n.as_deref() == Some(venue))
                .map(|(_, px)| *px)
                .collect()
        };
        assert_eq!(order("md.quote.nyse"), (0..100).collect::<Vec<_>>());
        assert_eq!(order("md.quote.nasdaq"), (1000..1100).collect::<Vec<_>>());
        // And a tick sees no topic.
        let tick = loop {
            let m = rx.recv_timeout(Duration::from_secs(30)).expect("a tick");
            if m.1 == u64::MAX {
                break m;
            }
        };
        assert_eq!(tick.0, None);
        drop((to_nyse, to_nasdaq));
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        for (venue, feed) in [
            ("md.quote.nyse", "nyse-feed"),
            ("md.quote.nasdaq", "nasdaq-feed"),
        ] {
            let e = report.edge(venue, feed, "strategy").expect("edge");
            assert_eq!((e.published, e.handled), (100, 100), "{venue}");
        }
        // The type's default topic is not subscribed once topics are named for it.
        assert!(report.edges.iter().all(|e| e.topic != "md.quote"));
    });
}

/// Publishes each number it gets on one of two topics of one type: even on `even`, odd on
/// `odd`.
struct Splitter {
    even: Out<Quote>,
    odd: Out<Quote>,
}

impl Actor for Splitter {
    type In = Trade;
    fn on_message(&mut self, Trade(n): Trade, ctx: &mut Context<'_>) {
        let out = if n % 2 == 0 { self.even } else { self.odd };
        ctx.publish(out, Quote(n));
    }
}

#[test]
fn an_actor_publishes_two_topics_of_one_type_and_each_subscriber_gets_its_own() {
    bounded("two outputs of one type", 60, || {
        let (even, odd) = (topic::<Quote>("q.even"), topic::<Quote>("q.odd"));
        let mut bus = Bus::builder();
        let feed = bus.publisher::<Trade>("feed");
        let (e2, o2) = (even.clone(), odd.clone());
        bus.actor("splitter", move |setup: &mut Setup<'_>| Splitter {
            even: setup.output_on(&e2),
            odd: setup.output_on(&o2),
        })
        .subscribes::<Trade>()
        .publishes_to(&even)
        .publishes_to(&odd);
        let evens = bus.subscription_on(&even, "evens", Backpressure::Block, 64);
        let odds = bus.subscription_on(&odd, "odds", Backpressure::Block, 64);
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).expect("feed");
        let mut evens = running.subscription(evens).expect("evens");
        let mut odds = running.subscription(odds).expect("odds");
        for n in 0..40 {
            feed.publish(Trade(n)).expect("publish");
        }
        let mut got = (Vec::new(), Vec::new());
        for _ in 0..20 {
            got.0
                .push(evens.recv_timeout(Duration::from_secs(30)).expect("even").0);
            got.1
                .push(odds.recv_timeout(Duration::from_secs(30)).expect("odd").0);
        }
        assert_eq!(got.0, (0..40).step_by(2).collect::<Vec<_>>());
        assert_eq!(got.1, (1..40).step_by(2).collect::<Vec<_>>());
        drop(feed);
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        assert_eq!(
            report
                .edge("q.even", "splitter", "evens")
                .map(|e| e.handled),
            Some(20)
        );
        assert_eq!(
            report.edge("q.odd", "splitter", "odds").map(|e| e.handled),
            Some(20)
        );
    });
}

#[test]
fn a_remap_renames_a_programs_default_topic_for_its_publishers_and_subscribers() {
    bounded("remap", 60, || {
        let mut bus = Bus::builder();
        bus.remap("md.quote", "site2.md.quote");
        // Code written for the default topic, on both sides.
        let feed = bus.publisher::<Quote>("feed");
        let (tx, rx) = mpsc::channel();
        bus.actor("strategy", move |_: &mut Setup<'_>| Venues {
            seen: tx.clone(),
        })
        .subscribes::<Quote>();
        let mut running = bus.start().expect("start");
        let mut feed = running.publisher(feed).expect("feed");
        feed.publish(Quote(7)).expect("publish");
        assert_eq!(take(&rx, 1), [(Some("site2.md.quote".to_owned()), 7)]);
        drop(feed);
        running.stop();
        let report = running.join().expect("join");
        let e = report
            .edge("site2.md.quote", "feed", "strategy")
            .expect("renamed edge");
        assert_eq!(e.handled, 1);
        assert!(report.edge("md.quote", "feed", "strategy").is_none());
    });
}

#[test]
fn per_topic_settings_override_the_types() {
    let (nyse, nasdaq) = (
        topic::<Quote>("md.quote.nyse"),
        topic::<Quote>("md.quote.nasdaq"),
    );
    let mut bus = Bus::builder();
    let _a = bus.publisher_on(&nyse, "nyse-feed");
    let _b = bus.publisher_on(&nasdaq, "nasdaq-feed");
    let (tx, _rx) = mpsc::channel();
    bus.actor("strategy", move |_: &mut Setup<'_>| Venues {
        seen: tx.clone(),
    })
    .subscribes_to(&nyse)
    .subscribes_to(&nasdaq)
    .backpressure::<Quote>(Backpressure::DropNewest)
    .backpressure_on(&nyse, Backpressure::Latest);
    let running = bus.start().expect("start");
    let report = running.snapshot();
    let policy = |venue: &str, feed: &str| report.edge(venue, feed, "strategy").map(|e| e.policy);
    assert_eq!(
        policy("md.quote.nyse", "nyse-feed"),
        Some(Backpressure::Latest)
    );
    assert_eq!(
        policy("md.quote.nasdaq", "nasdaq-feed"),
        Some(Backpressure::DropNewest)
    );
    running.stop();
}

#[test]
fn start_refuses_two_types_on_one_name_naming_both() {
    let mut bus = Bus::builder();
    let _q = bus.publisher_on(&topic::<Quote>("md.shared"), "quotes");
    let _t = bus.publisher_on(&topic::<Trade>("md.shared"), "trades");
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::TopicClash { topic, .. } if topic == "md.shared"),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("Quote") && text.contains("Trade"), "{text}");
}

#[test]
fn start_refuses_two_names_with_one_id_naming_both() {
    let mut bus = Bus::builder();
    let _q = bus.publisher_on(&topic::<Quote>("md.quote.nyse"), "quotes");
    let _c = bus.publisher::<Collides>("collides");
    let e = start_err(bus);
    match &e {
        StartError::TopicIdCollision { id, first, second } => {
            assert_eq!(*id, llbus::topic_id("md.quote.nyse"));
            let mut names = [first.to_string(), second.to_string()];
            names.sort();
            assert_eq!(names, ["md.quote.nyse", "x.collides"]);
        }
        other => panic!("expected TopicIdCollision, got {other}"),
    }
    assert!(e.to_string().contains("md.quote.nyse") && e.to_string().contains("x.collides"));
}

#[test]
fn start_refuses_a_named_topic_of_a_type_the_inbox_does_not_take() {
    let mut bus = Bus::builder();
    let _t = bus.publisher_on(&topic::<Trade>("md.trade.nyse"), "trades");
    let (tx, _rx) = mpsc::channel();
    bus.actor("strategy", move |_: &mut Setup<'_>| Venues {
        seen: tx.clone(),
    })
    .subscribes_to(&topic::<Trade>("md.trade.nyse"));
    let e = start_err(bus).to_string();
    assert!(
        e.contains("strategy") && e.contains("md.trade.nyse") && e.contains("does not take"),
        "{e}"
    );
}

#[test]
fn start_refuses_bad_and_conflicting_remaps_naming_them() {
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("md.quote", "md..quote")], "md..quote"),
        (&[("md quote", "md.quote")], "md quote"),
        (
            &[("md.quote", "a.b"), ("md.quote", "c.d")],
            "remapped twice",
        ),
    ];
    for (remaps, says) in cases {
        let mut bus = Bus::builder();
        for (from, to) in remaps {
            bus.remap(from, to);
        }
        let _q = bus.publisher::<Quote>("quotes");
        let e = start_err(bus).to_string();
        assert!(e.contains(says), "{remaps:?}: {e}");
    }
}

#[test]
fn start_refuses_a_topic_received_twice_once_remapped() {
    let mut bus = Bus::builder();
    bus.remap("md.quote.nasdaq", "md.quote.nyse");
    let _a = bus.publisher_on(&topic::<Quote>("md.quote.nyse"), "feed");
    let (tx, _rx) = mpsc::channel();
    bus.actor("strategy", move |_: &mut Setup<'_>| Venues {
        seen: tx.clone(),
    })
    .subscribes_to(&topic::<Quote>("md.quote.nyse"))
    .subscribes_to(&topic::<Quote>("md.quote.nasdaq"));
    let e = start_err(bus).to_string();
    assert!(
        e.contains("strategy") && e.contains("md.quote.nyse") && e.contains("twice"),
        "{e}"
    );
}

#[test]
fn a_factory_asking_for_an_undeclared_named_output_is_refused_naming_it() {
    let mut bus = Bus::builder();
    bus.actor("splitter", |setup: &mut Setup<'_>| Splitter {
        even: setup.output_on(&topic::<Quote>("q.even")),
        odd: setup.output_on(&topic::<Quote>("q.odd")),
    })
    .subscribes::<Trade>()
    .publishes_to(&topic::<Quote>("q.even"));
    let _feed = bus.publisher::<Trade>("feed");
    let e = start_err(bus).to_string();
    assert!(e.contains("splitter") && e.contains("q.odd"), "{e}");
}

#[test]
fn taken_rings_of_two_topics_come_with_their_topic_ids() {
    bounded("takes_on", 60, || {
        let (nyse, nasdaq) = (
            topic::<Quote>("md.quote.nyse"),
            topic::<Quote>("md.quote.nasdaq"),
        );
        let mut bus = Bus::builder();
        let to_nyse = bus.publisher_on(&nyse, "nyse-feed");
        let to_nasdaq = bus.publisher_on(&nasdaq, "nasdaq-feed");
        let (tx, rx) = mpsc::channel::<(u64, u64)>();
        struct Taker {
            rings: llbus::Inputs<Quote>,
            seen: mpsc::Sender<(u64, u64)>,
        }
        impl Actor for Taker {
            type In = ();
            fn on_message(&mut self, (): (), _: &mut Context<'_>) {}
            fn poll(&mut self, _: &mut Context<'_>) -> usize {
                let seen = &self.seen;
                self.rings.poll_topics(64, |Quote(px), id| {
                    let _ = seen.send((id, px));
                })
            }
        }
        bus.actor("taker", move |setup: &mut Setup<'_>| Taker {
            rings: setup.inputs::<Quote>(),
            seen: tx.clone(),
        })
        .supervision(llbus::Supervision::Stop)
        .takes_on(&nyse)
        .takes_on(&nasdaq);
        let mut running = bus.start().expect("start");
        let mut to_nyse = running.publisher(to_nyse).expect("nyse");
        let mut to_nasdaq = running.publisher(to_nasdaq).expect("nasdaq");
        to_nyse.publish(Quote(1)).expect("publish");
        to_nasdaq.publish(Quote(2)).expect("publish");
        let mut got: Vec<(u64, u64)> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(30)).expect("a quote"))
            .collect();
        got.sort_by_key(|(_, px)| *px);
        assert_eq!(got, [(nyse.id(), 1), (nasdaq.id(), 2)]);
        drop((to_nyse, to_nasdaq));
        running.stop();
        assert_balanced(&running.join().expect("join"));
    });
}

/// An inbox of two types, as `#[derive(Inbox)]` writes it.
#[derive(llbus::Inbox)]
enum Market {
    Quote(Quote),
    Trade(Trade),
}

/// Sends the topic and value of every message of its two-type inbox.
struct MarketLog {
    seen: mpsc::Sender<(Option<String>, u64)>,
}

impl Actor for MarketLog {
    type In = Market;
    fn on_message(&mut self, m: Market, ctx: &mut Context<'_>) {
        let n = match m {
            Market::Quote(Quote(n)) | Market::Trade(Trade(n)) => n,
        };
        let _ = self.seen.send((ctx.topic().map(|t| t.to_string()), n));
    }
}

#[test]
fn a_derived_inbox_takes_named_topics_for_one_type_and_the_default_for_the_other() {
    bounded("derived inbox", 60, || {
        let (nyse, nasdaq) = (
            topic::<Quote>("md.quote.nyse"),
            topic::<Quote>("md.quote.nasdaq"),
        );
        let mut bus = Bus::builder();
        let to_nyse = bus.publisher_on(&nyse, "nyse-feed");
        let to_nasdaq = bus.publisher_on(&nasdaq, "nasdaq-feed");
        let trades = bus.publisher::<Trade>("trades");
        let (tx, rx) = mpsc::channel();
        bus.actor("log", move |_: &mut Setup<'_>| MarketLog {
            seen: tx.clone(),
        })
        .subscribes::<Market>()
        .subscribes_to(&nyse)
        .subscribes_to(&nasdaq);
        let mut running = bus.start().expect("start");
        running
            .publisher(to_nyse)
            .expect("nyse")
            .publish(Quote(1))
            .expect("publish");
        running
            .publisher(to_nasdaq)
            .expect("nasdaq")
            .publish(Quote(2))
            .expect("publish");
        running
            .publisher(trades)
            .expect("trades")
            .publish(Trade(3))
            .expect("publish");
        let mut got = take(&rx, 3);
        got.sort_by_key(|(_, n)| *n);
        let names: Vec<_> = got.iter().map(|(t, _)| t.as_deref()).collect();
        assert_eq!(
            names,
            [
                Some("md.quote.nyse"),
                Some("md.quote.nasdaq"),
                Some("md.trade")
            ]
        );
        running.stop();
        assert_balanced(&running.join().expect("join"));
    });
}

#[test]
fn a_factory_learns_the_name_each_declared_topic_runs_under() {
    let mut bus = Bus::builder();
    bus.remap("md.quote", "site2.md.quote");
    let (tx, rx) = mpsc::channel();
    bus.actor("feed", move |setup: &mut Setup<'_>| {
        let renamed = setup.topic(&Topic::<Quote>::of());
        let kept = setup.topic(&topic::<Quote>("md.quote.nyse"));
        let _ = tx.send((
            renamed.name().to_string(),
            renamed.id(),
            kept.name().to_string(),
        ));
        Splitter {
            even: setup.output(),
            odd: setup.output(),
        }
    })
    .subscribes::<Trade>()
    .publishes::<Quote>();
    let _trades = bus.publisher::<Trade>("trades");
    let _quotes = bus.subscription_on(
        &topic::<Quote>("site2.md.quote"),
        "tap",
        Backpressure::Block,
        8,
    );
    let running = bus.start().expect("start");
    let (renamed, id, kept) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the factory ran");
    assert_eq!(renamed, "site2.md.quote");
    assert_eq!(id, llbus::topic_id("site2.md.quote"));
    assert_eq!(kept, "md.quote.nyse");
    running.stop();
}

#[test]
fn a_running_bus_tells_code_outside_it_the_name_each_topic_runs_under() {
    let mut bus = Bus::builder();
    bus.remap("md.quote", "site2.md.quote");
    let _feed = bus.publisher::<Quote>("feed");
    let running = bus.start().expect("start");
    let renamed = running.topic(&Topic::<Quote>::of());
    assert_eq!(renamed.name().as_str(), "site2.md.quote");
    assert_eq!(renamed.id(), llbus::topic_id("site2.md.quote"));
    let kept = running.topic(&topic::<Quote>("md.quote.nyse"));
    assert_eq!(kept.name().as_str(), "md.quote.nyse");
    assert_eq!(kept.id(), llbus::topic_id("md.quote.nyse"));
    running.stop();
}

/// Publishes every trade's number as a quote on each topic its pattern matched.
struct Fanner {
    outs: Vec<Out<Quote>>,
}

impl Actor for Fanner {
    type In = Trade;
    fn on_message(&mut self, Trade(n): Trade, ctx: &mut Context<'_>) {
        for &out in &self.outs {
            ctx.publish(out, Quote(n));
        }
    }
}

#[test]
fn a_pattern_output_reaches_every_matching_subscription_of_its_type_and_no_other() {
    bounded("pattern outputs", 60, || {
        let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
        let mut bus = Bus::builder();
        // `venue.b` runs as `md.quote.nasdaq`: patterns match running names.
        bus.remap("venue.b", "md.quote.nasdaq");
        let feed = bus.publisher::<Trade>("feed");
        let (tx, rx) = mpsc::channel();
        let p = pattern.clone();
        bus.actor("fanner", move |setup: &mut Setup<'_>| {
            let matched = setup.outputs_matching::<Quote>(&p);
            let _ = tx.send(matched.iter().map(|(t, _)| t.name().to_string()).collect());
            Fanner {
                outs: matched.into_iter().map(|(_, out)| out).collect(),
            }
        })
        .subscribes::<Trade>()
        // Its own subscription matches, and is never fed by its own pattern.
        .takes_on(&topic::<Quote>("md.quote.own"))
        .publishes_matching::<Quote>(&pattern);
        let nyse = bus.subscription_on(
            &topic::<Quote>("md.quote.nyse"),
            "nyse",
            Backpressure::Block,
            64,
        );
        let nasdaq = bus.subscription_on(
            &topic::<Quote>("venue.b"),
            "nasdaq",
            Backpressure::Block,
            64,
        );
        // Not matched: one segment too many, and a matching name of another type.
        let l2_topic = topic::<Quote>("md.quote.nyse.l2");
        let _l2_feed = bus.publisher_on(&l2_topic, "l2-feed");
        let l2 = bus.subscription_on(&l2_topic, "l2", Backpressure::Block, 64);
        let trades_topic = topic::<Trade>("md.quote.trades");
        let _trades_feed = bus.publisher_on(&trades_topic, "trades-feed");
        let trades = bus.subscription_on(&trades_topic, "trades", Backpressure::Block, 64);
        let _own_feed = bus.publisher_on(&topic::<Quote>("md.quote.own"), "own-feed");
        let mut running = bus.start().expect("start");
        let mut names: Vec<String> = rx.recv_timeout(Duration::from_secs(30)).expect("names");
        names.sort();
        assert_eq!(names, ["md.quote.nasdaq", "md.quote.nyse"]);
        let mut feed = running.publisher(feed).expect("feed");
        let mut nyse = running.subscription(nyse).expect("nyse");
        let mut nasdaq = running.subscription(nasdaq).expect("nasdaq");
        let mut l2 = running.subscription(l2).expect("l2");
        let mut trades = running.subscription(trades).expect("trades");
        for n in 0..10 {
            feed.publish(Trade(n)).expect("publish");
        }
        for n in 0..10 {
            assert_eq!(
                nyse.recv_timeout(Duration::from_secs(30)).expect("nyse"),
                Quote(n)
            );
            assert_eq!(
                nasdaq
                    .recv_timeout(Duration::from_secs(30))
                    .expect("nasdaq"),
                Quote(n)
            );
        }
        assert!(l2.try_recv().is_err() && trades.try_recv().is_err());
        drop((feed, nyse, nasdaq, l2, trades));
        running.stop();
        let report = running.join().expect("join");
        assert_balanced(&report);
        for (topic, to) in [("md.quote.nyse", "nyse"), ("md.quote.nasdaq", "nasdaq")] {
            assert_eq!(
                report.edge(topic, "fanner", to).map(|e| e.handled),
                Some(10),
                "{topic}"
            );
        }
        assert!(report.edge("md.quote.own", "fanner", "fanner").is_none());
        assert!(report.edge("md.quote.nyse.l2", "fanner", "l2").is_none());
    });
}

#[test]
fn a_factory_asking_for_an_undeclared_pattern_is_refused_naming_it() {
    let mut bus = Bus::builder();
    let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
    bus.actor("fanner", move |setup: &mut Setup<'_>| Fanner {
        outs: (setup.outputs_matching::<Quote>(&pattern).into_iter())
            .map(|(_, out)| out)
            .collect(),
    })
    .subscribes::<Trade>();
    let _feed = bus.publisher::<Trade>("feed");
    let e = start_err(bus).to_string();
    assert!(e.contains("fanner") && e.contains("md.quote.*"), "{e}");
}

/// Takes the rings of the topic it is given and publishes by pattern: a bridge that exports
/// a topic and discovers a pattern that matches it, reduced to the bus's part.
struct ExportAndDiscover {
    rings: llbus::Inputs<Quote>,
    outs: Vec<Out<Quote>>,
}

impl Actor for ExportAndDiscover {
    type In = ();
    fn on_message(&mut self, (): (), _: &mut Context<'_>) {}
    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        // What it "exports" it does not publish back; what it would "import" it publishes
        // on every pattern output: a self edge would loop the export into itself.
        let outs = &self.outs;
        self.rings.poll(64, |q| {
            for &out in outs {
                ctx.try_publish(out, q.clone());
            }
        })
    }
}

#[test]
fn a_pattern_never_feeds_the_actors_own_subscription_when_another_actor_subscribes_too() {
    let pattern = llbus::TopicPattern::new("md.quote.*").expect("pattern");
    let own = topic::<Quote>("md.quote.own");
    let mut bus = Bus::builder();
    let _feed = bus.publisher_on(&own, "feed");
    let (tx, rx) = mpsc::channel();
    let (p, o) = (pattern.clone(), own.clone());
    bus.actor("bridge", move |setup: &mut Setup<'_>| {
        let matched = setup.outputs_matching::<Quote>(&p);
        let _ = tx.send(
            matched
                .iter()
                .map(|(t, _)| t.name().to_string())
                .collect::<Vec<_>>(),
        );
        ExportAndDiscover {
            rings: setup.inputs_on(&o),
            outs: matched.into_iter().map(|(_, out)| out).collect(),
        }
    })
    .never_waits()
    .supervision(llbus::Supervision::Stop)
    .takes_on(&own)
    .publishes_matching::<Quote>(&pattern);
    // Another subscriber of the topic the bridge takes: the pattern must still leave it out
    // of the bridge's outputs, or the bridge feeds its own export.
    let _tap = bus.subscription_on(&own, "tap", Backpressure::Block, 16);
    let running = bus.start().expect("start");
    let names: Vec<String> = rx.recv_timeout(Duration::from_secs(30)).expect("names");
    assert!(
        names.is_empty(),
        "the pattern gave the bridge its own topic: {names:?}"
    );
    let report = running.report();
    assert!(
        report.edge("md.quote.own", "bridge", "bridge").is_none(),
        "the bridge is wired to itself"
    );
    running.stop();
}

/// Sends `(topic, value)` of each message and `(topic, u64::MAX)` from `on_start`; panics on
/// value 0 (its supervision restarts it).
struct Flaky {
    seen: mpsc::Sender<(Option<String>, u64)>,
}

impl Actor for Flaky {
    type In = Quote;
    fn on_start(&mut self, ctx: &mut Context<'_>) {
        let _ = self
            .seen
            .send((ctx.topic().map(|t| t.to_string()), u64::MAX));
    }
    fn on_message(&mut self, Quote(px): Quote, ctx: &mut Context<'_>) {
        assert!(px != 0, "a poisoned quote");
        let _ = self.seen.send((ctx.topic().map(|t| t.to_string()), px));
    }
}

#[test]
fn a_restarted_actor_still_learns_each_messages_topic_and_none_outside_on_message() {
    bounded("restart and topics", 60, || {
        let (nyse, nasdaq) = (
            topic::<Quote>("md.quote.nyse"),
            topic::<Quote>("md.quote.nasdaq"),
        );
        let mut bus = Bus::builder();
        bus.remap("md.quote.nasdaq", "md.quote.xnas");
        let to_nyse = bus.publisher_on(&nyse, "nyse-feed");
        let to_nasdaq = bus.publisher_on(&nasdaq, "nasdaq-feed");
        let (tx, rx) = mpsc::channel();
        bus.actor("flaky", move |_: &mut Setup<'_>| Flaky { seen: tx.clone() })
            .supervision(llbus::Supervision::Restart(llbus::RestartLimit::new(
                5,
                Duration::from_secs(60),
            )))
            .subscribes_to(&nyse)
            .subscribes_to(&nasdaq);
        let mut running = bus.start().expect("start");
        let mut to_nyse = running.publisher(to_nyse).expect("nyse");
        let mut to_nasdaq = running.publisher(to_nasdaq).expect("nasdaq");
        let next = || rx.recv_timeout(Duration::from_secs(30)).expect("a report");
        assert_eq!(next(), (None, u64::MAX), "on_start has no topic");
        // A panic in the middle of a NASDAQ ring's messages: the restarted actor starts with
        // no topic, and each later message is named by the ring it came on.
        to_nasdaq.publish(Quote(0)).expect("publish");
        assert_eq!(
            next(),
            (None, u64::MAX),
            "the restart's on_start has no topic"
        );
        to_nyse.publish(Quote(1)).expect("publish");
        assert_eq!(next(), (Some("md.quote.nyse".to_owned()), 1));
        to_nasdaq.publish(Quote(2)).expect("publish");
        assert_eq!(next(), (Some("md.quote.xnas".to_owned()), 2));
        drop((to_nyse, to_nasdaq));
        running.stop();
        running.join().expect("join");
    });
}

#[test]
fn several_blocking_subscribers_on_broadcast_rings_each_learn_each_messages_topic() {
    bounded("broadcast and topics", 60, || {
        let (nyse, nasdaq) = (
            topic::<Quote>("md.quote.nyse"),
            topic::<Quote>("md.quote.nasdaq"),
        );
        let mut bus = Bus::builder();
        let (tx, rx) = mpsc::channel();
        // One actor publishes both topics, so that each of its outputs has three Block
        // subscribers: broadcast rings.
        bus.actor("venues", |setup: &mut Setup<'_>| {
            let (nyse, nasdaq) = (
                topic::<Quote>("md.quote.nyse"),
                topic::<Quote>("md.quote.nasdaq"),
            );
            Splitter {
                even: setup.output_on(&nyse),
                odd: setup.output_on(&nasdaq),
            }
        })
        .subscribes::<Trade>()
        .publishes_to(&nyse)
        .publishes_to(&nasdaq);
        let trades = bus.publisher::<Trade>("trades");
        for i in 0..3 {
            let tx = tx.clone();
            bus.actor(&format!("reader{i}"), move |_: &mut Setup<'_>| Venues {
                seen: tx.clone(),
            })
            .subscribes_to(&nyse)
            .subscribes_to(&nasdaq);
        }
        let mut running = bus.start().expect("start");
        let mut trades = running.publisher(trades).expect("trades");
        for n in 1..=20 {
            trades.publish(Trade(n)).expect("publish");
        }
        let got = take(&rx, 60);
        for (name, n) in &got {
            let want = if n % 2 == 0 {
                "md.quote.nyse"
            } else {
                "md.quote.nasdaq"
            };
            assert_eq!(name.as_deref(), Some(want), "{n}: {got:?}");
        }
        drop(trades);
        running.stop();
        assert_balanced(&running.join().expect("join"));
    });
}

#[test]
fn a_remap_onto_a_topic_of_another_type_is_refused_naming_both_types_and_the_remap() {
    let mut bus = Bus::builder();
    bus.remap("md.quote", "md.trade");
    let _q = bus.publisher::<Quote>("quotes");
    let _t = bus.publisher::<Trade>("trades");
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::TopicClash { topic, .. } if topic == "md.trade"),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("Quote") && text.contains("Trade"), "{text}");
    assert!(
        text.contains("md.quote"),
        "the refusal does not say that the clash comes from remapping 'md.quote': {text}"
    );
}

#[test]
fn remaps_apply_once_so_a_chain_renames_each_name_one_step() {
    let mut bus = Bus::builder();
    bus.remap("q.a", "q.b").remap("q.b", "q.c");
    let a = topic::<Quote>("q.a");
    let b = topic::<Quote>("q.b");
    let feed = bus.publisher_on(&a, "feed");
    let tap = bus.subscription_on(&a, "tap", Backpressure::Block, 8);
    let _other = bus.publisher_on(&b, "other");
    let mut running = bus.start().expect("start");
    assert_eq!(running.topic(&a).name().as_str(), "q.b");
    assert_eq!(running.topic(&b).name().as_str(), "q.c");
    let mut feed = running.publisher(feed).expect("feed");
    let mut tap = running.subscription(tap).expect("tap");
    feed.publish(Quote(7)).expect("publish");
    assert_eq!(
        tap.recv_timeout(Duration::from_secs(30)).expect("tap"),
        Quote(7)
    );
    assert!(running.report().edge("q.b", "feed", "tap").is_some());
    drop((feed, tap));
    running.stop();
}

/// A hand-written message whose id is not its name's (`TOPIC_ID` may differ, say for a legacy
/// wire id).
#[derive(Clone, Debug, PartialEq)]
pub struct Legacy(pub u64);
impl llbus::Message for Legacy {
    const TOPIC: &'static str = "legacy.quote";
    const TOPIC_ID: u64 = 0x1e9a_c1d0;
    const FINGERPRINT: u64 = 9;
}

#[test]
fn start_refuses_one_name_with_two_ids_naming_both() {
    // The type's default topic and a topic named with the same text: one name, two ids. The
    // bus would run them as two topics that every report calls by one name.
    let mut bus = Bus::builder();
    let named = topic::<Legacy>("legacy.quote");
    let _default_feed = bus.publisher::<Legacy>("default-feed");
    let _default_tap = bus.subscription::<Legacy>("default-tap");
    let _named_feed = bus.publisher_on(&named, "named-feed");
    let _named_tap = bus.subscription_on(&named, "named-tap", Backpressure::Block, 8);
    let e = start_err(bus).to_string();
    assert!(
        e.contains("legacy.quote")
            && e.contains(&format!("{:#018x}", llbus::topic_id("legacy.quote")))
            && e.contains(&format!("{:#018x}", 0x1e9a_c1d0u64)),
        "{e}"
    );
}
