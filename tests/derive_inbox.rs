//! `#[derive(Inbox)]`: the topics an inbox enum subscribes to, and the conversions it provides.
//!
//! That an actor receives every variant in per-edge order needs the running bus and is tested
//! with it.
#![allow(dead_code)] // Variant payloads are only converted into, never read back here.

use std::any::TypeId;

use llbus::{Inbox, Message, TopicSpec};

#[derive(Message, Clone, Debug, PartialEq)]
#[message(topic = "md.quote")]
struct Quote {
    px: f64,
}

#[derive(Message, Clone, Debug, PartialEq)]
#[message(topic = "md.trade")]
struct Trade {
    px: f64,
    qty: u32,
}

#[derive(Message, Clone, Debug, PartialEq)]
struct Heartbeat;

#[derive(Inbox, Debug, PartialEq)]
enum StrategyIn {
    Quote(Quote),
    Trade(Trade),
    Tick(Heartbeat),
}

fn topics_of<I: Inbox>() -> Vec<TopicSpec> {
    let mut out = Vec::new();
    I::topics(&mut out);
    out
}

#[test]
fn inbox_subscribes_to_every_variant_in_order() {
    let topics = topics_of::<StrategyIn>();
    let names: Vec<_> = topics.iter().map(|t| t.name).collect();
    assert_eq!(names, ["md.quote", "md.trade", "Heartbeat"]);
    let expected = [
        TopicSpec::of::<Quote>(),
        TopicSpec::of::<Trade>(),
        TopicSpec::of::<Heartbeat>(),
    ];
    for (got, want) in topics.iter().zip(&expected) {
        assert_eq!(got.id, want.id);
        assert_eq!(got.fingerprint, want.fingerprint);
        assert_eq!(got.type_id, want.type_id);
    }
    assert_eq!(topics[1].type_id, TypeId::of::<Trade>());
    assert_eq!(topics[1].id, llbus::topic_id("md.trade"));
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
        StrategyIn::from(Quote { px: 1.5 }),
        StrategyIn::Quote(Quote { px: 1.5 })
    );
    let trade: StrategyIn = Trade { px: 2.0, qty: 7 }.into();
    assert_eq!(trade, StrategyIn::Trade(Trade { px: 2.0, qty: 7 }));
    assert_eq!(StrategyIn::from(Heartbeat), StrategyIn::Tick(Heartbeat));
}

#[test]
fn single_variant_inbox_has_one_topic() {
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
        #[derive(llbus::Message)]
        #[message(topic = "feed.status")]
        pub struct Status {
            pub up: bool,
        }
    }
    #[derive(Inbox)]
    enum ControlIn {
        Status(feed::Status),
        Quote(crate::Quote),
    }
    let names: Vec<_> = topics_of::<ControlIn>().iter().map(|t| t.name).collect();
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
