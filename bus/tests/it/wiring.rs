//! Wiring mistakes fail in `start()`, naming the actor, topic or core at fault.

use std::time::Duration;

use llbus::{Actor, Backpressure, Bus, Context, Idle, Out, Setup, StartError};

use crate::fixtures::start_err;

#[derive(Clone, Debug)]
struct Quote(#[allow(dead_code)] u64);
tests::message!(Quote, "md.quote");

#[derive(Clone, Debug)]
struct Impostor(#[allow(dead_code)] u64);
tests::message!(Impostor, "md.quote");

#[derive(Clone, Debug)]
struct Order(#[allow(dead_code)] u64);
tests::message!(Order, "ex.order");

struct Feed {
    _out: Option<Out<Quote>>,
}
impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}
fn feed(s: &mut Setup<'_>) -> Feed {
    Feed {
        _out: Some(s.output()),
    }
}
fn silent_feed(_: &mut Setup<'_>) -> Feed {
    Feed { _out: None }
}

struct Strategy;
impl Actor for Strategy {
    type In = Quote;
    fn on_message(&mut self, _q: Quote, _ctx: &mut Context<'_>) {}
}

struct ImpostorSink;
impl Actor for ImpostorSink {
    type In = Impostor;
    fn on_message(&mut self, _q: Impostor, _ctx: &mut Context<'_>) {}
}

#[test]
fn duplicate_actor_name() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("feed", feed).publishes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::DuplicateActor(n) if n == "feed"),
        "{e}"
    );
    assert!(e.to_string().contains("'feed'"));
}

#[test]
fn subscription_without_publisher() {
    let mut bus = Bus::builder();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .subscribes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::NoPublisher { actor, topic } if actor == "strategy" && *topic == "md.quote"),
        "{e}"
    );
}

#[test]
fn receiving_actor_that_does_not_subscribe() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy);
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::NotSubscribed { actor, .. } if actor == "strategy"),
        "{e}"
    );
    assert!(e.to_string().contains(".subscribes::<Quote>()"), "{e}");
}

#[test]
fn two_types_with_one_topic_name() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .subscribes::<Quote>();
    bus.actor("impostor", |_: &mut Setup<'_>| ImpostorSink)
        .subscribes::<Impostor>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::TopicClash { topic, .. } if *topic == "md.quote"),
        "{e}"
    );
}

#[test]
fn core_that_does_not_exist() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).on_core(4096).publishes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::NoSuchCore { thread, core: 4096, .. } if thread == "feed"),
        "{e}"
    );
}

#[test]
fn two_busy_spinning_threads_on_one_core() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed)
        .on_core(0)
        .idle(Idle::BusySpin)
        .publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .on_core(0)
        .idle(Idle::BusySpin)
        .subscribes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::SharedBusyCore { core: 0, .. }),
        "{e}"
    );
}

#[test]
fn block_subscription_within_one_thread() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).group("io").publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .group("io")
        .subscribes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::SameThreadBlock { thread, .. } if thread == "io"),
        "{e}"
    );
}

#[test]
fn a_drop_newest_subscription_within_one_thread_is_fine() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).group("io").publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .group("io")
        .subscribes::<Quote>()
        .backpressure::<Quote>(Backpressure::DropNewest);
    let running = bus
        .start()
        .expect("no deadlock is possible with DropNewest");
    running.stop();
    running.join().expect("clean stop");
}

#[test]
fn core_set_on_a_grouped_actor() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed)
        .group("io")
        .on_core(0)
        .publishes::<Quote>();
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::Invalid(m) if m.contains("group 'io'")),
        "{e}"
    );
}

#[test]
fn output_asked_for_but_not_declared() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed);
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::Setup(m) if m.contains("md.quote") && m.contains("'feed'")),
        "{e}"
    );
}

#[test]
fn factory_that_panics() {
    let mut bus = Bus::builder();
    bus.actor("feed", |_: &mut Setup<'_>| -> Feed {
        panic!("no config file")
    });
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::FactoryPanicked { actor, message } if actor == "feed" && message == "no config file"),
        "{e}"
    );
}

#[test]
fn zero_capacity() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("strategy", |_: &mut Setup<'_>| Strategy)
        .subscribes::<Quote>()
        .capacity::<Quote>(0);
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::Invalid(m) if m.contains("capacity of 0")),
        "{e}"
    );
}

#[test]
fn published_but_never_subscribed_is_a_warning_not_an_error() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("orders", silent_feed).publishes::<Order>();
    bus.stop_timeout(Duration::from_secs(5));
    let running = bus.start().expect("a warning does not stop the start");
    assert_eq!(running.warnings().len(), 2);
    assert!(running.warnings()[0].contains("md.quote"));
    running.stop();
    running.join().expect("clean stop");
}

struct Taker;
impl Actor for Taker {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
}

#[test]
fn an_actor_that_takes_its_rings_cannot_be_restarted() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("taker", |_: &mut Setup<'_>| Taker)
        .takes::<Quote>()
        .supervision(llbus::Supervision::Restart(llbus::RestartLimit::default()));
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::Invalid(m) if m.contains("cannot be restarted")),
        "{e}"
    );
}

#[test]
fn rings_asked_for_but_not_taken() {
    let mut bus = Bus::builder();
    bus.actor("feed", feed).publishes::<Quote>();
    bus.actor("taker", |s: &mut Setup<'_>| {
        let _inputs: llbus::Inputs<Quote> = s.inputs();
        Taker
    });
    let e = start_err(bus);
    assert!(
        matches!(&e, StartError::Setup(m) if m.contains(".takes::<Quote>()")),
        "{e}"
    );
}
