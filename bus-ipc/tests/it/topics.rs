//! Named topics over shared memory: `ShmExport::on` and `ShmImport::on` meet at the channel
//! of the topic's running name, whose header carries that name's id; two topics of one type go
//! over two channels, each subscription getting only its own; a channel of another name or type
//! is refused with an error that says so.

use std::time::Duration;

use llbus::{Backpressure, Bus, Message, StartError, Subscription, Topic};
use llbus_ipc::{topic_channel, ChannelConfig, OpenError, Pod, Receiver, Sender};
use llbus_ipc::{ShmExport, ShmImport};

use crate::fixtures::{config_in, Dir, Tick};

/// Waits until every export and import of `statuses` sees its peer (an export that has not
/// seen its importer yet drops once its ring is full).
fn connected(statuses: &[&llbus_ipc::IpcStatus]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !statuses.iter().all(|s| s.is_connected()) {
        assert!(
            std::time::Instant::now() < deadline,
            "an import never attached: {:?}",
            statuses.iter().map(|s| s.last_error()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn topic<T: Message>(name: &str) -> Topic<T> {
    Topic::named(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A plain-data message of another shape than [`Tick`].
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.wide")]
#[repr(C)]
struct Wide {
    a: u64,
    b: u64,
    c: u64,
}

// SAFETY: `repr(C)` of three u64s: no padding, no pointers, any bits are a `Wide`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Wide {}

/// The next `n` sequence numbers `sub` receives.
fn take(sub: &mut Subscription<Tick>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let t = sub
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("message {i} never came: {e:?}"));
            assert_eq!(t.check, !t.seq, "a torn message");
            t.seq
        })
        .collect()
}

/// docs/IPC.md "Named topics": two topics of one type exported from one bus over two channels
/// (each named after its topic) and imported into another bus as the same two topics: each
/// subscription gets only its own topic's messages, in order.
#[test]
fn two_topics_of_one_type_go_over_two_channels_and_each_subscription_gets_only_its_own() {
    let dir = Dir::new("two-topics");
    let cfg = config_in(&dir.0);
    let (nyse, nasdaq) = (
        topic::<Tick>("md.tick.nyse"),
        topic::<Tick>("md.tick.nasdaq"),
    );

    let mut a = Bus::builder();
    let feed_nyse = a.publisher_on(&nyse, "feed-nyse");
    let feed_nasdaq = a.publisher_on(&nasdaq, "feed-nasdaq");
    let nyse_out = ShmExport::<Tick, Pod>::on(&nyse, &cfg);
    let nasdaq_out = ShmExport::<Tick, Pod>::on(&nasdaq, &cfg);
    let exports = [nyse_out.status(), nasdaq_out.status()];
    a.add(nyse_out);
    a.add(nasdaq_out);

    let mut b = Bus::builder();
    let nyse_in = ShmImport::<Tick, Pod>::on(&nyse, &cfg);
    let nasdaq_in = ShmImport::<Tick, Pod>::on(&nasdaq, &cfg);
    let (nyse_status, nasdaq_status) = (nyse_in.status(), nasdaq_in.status());
    b.add(nyse_in);
    b.add(nasdaq_in);
    let app_nyse = b.subscription_on(&nyse, "app-nyse", Backpressure::Block, 256);
    let app_nasdaq = b.subscription_on(&nasdaq, "app-nasdaq", Backpressure::Block, 256);

    let mut a = a.start().expect("the exporting bus starts");
    let mut b = b.start().expect("the importing bus starts");
    for name in [nyse.name(), nasdaq.name()] {
        let path = cfg.path(&topic_channel(name));
        assert!(path.exists(), "no channel at {}", path.display());
    }
    connected(&[&nyse_status, &nasdaq_status, &exports[0], &exports[1]]);
    let mut feed_nyse = a.publisher(feed_nyse).expect("the handle");
    let mut feed_nasdaq = a.publisher(feed_nasdaq).expect("the handle");
    let mut app_nyse = b.subscription(app_nyse).expect("the handle");
    let mut app_nasdaq = b.subscription(app_nasdaq).expect("the handle");
    for n in 0..200 {
        feed_nyse.publish(Tick::new(n)).expect("published");
        feed_nasdaq
            .publish(Tick::new(10_000 + n))
            .expect("published");
    }
    assert_eq!(take(&mut app_nyse, 200), (0..200).collect::<Vec<_>>());
    assert_eq!(
        take(&mut app_nasdaq, 200),
        (10_000..10_200).collect::<Vec<_>>()
    );
    assert!(app_nyse.recv_timeout(Duration::from_millis(100)).is_err());
    assert!(app_nasdaq.recv_timeout(Duration::from_millis(100)).is_err());
    for s in [&nyse_status, &nasdaq_status] {
        assert_eq!((s.moved(), s.malformed()), (200, 0));
        assert_eq!(s.last_error(), None);
    }
    drop((feed_nyse, feed_nasdaq, app_nyse, app_nasdaq));
    a.stop();
    a.join().expect("the exporting bus stops");
    b.stop();
    b.join().expect("the importing bus stops");
}

/// docs/IPC.md "Named topics": a topic the exporting bus renames meets an import of the name it
/// runs under, at that name's channel.
#[test]
fn a_remapped_topic_meets_at_the_channel_of_the_name_it_runs_under() {
    let dir = Dir::new("remapped");
    let cfg = config_in(&dir.0);
    let mut a = Bus::builder();
    a.remap("ipc.tick", "site2.tick");
    let feed = a.publisher::<Tick>("feed");
    let export = ShmExport::<Tick, Pod>::on(&Topic::of(), &cfg);
    let export_status = export.status();
    a.add(export);
    let site2 = topic::<Tick>("site2.tick");
    let mut b = Bus::builder();
    let import = ShmImport::<Tick, Pod>::on(&site2, &cfg);
    let status = import.status();
    b.add(import);
    let app = b.subscription_on(&site2, "app", Backpressure::Block, 64);
    let mut a = a.start().expect("the exporting bus starts");
    let mut b = b.start().expect("the importing bus starts");
    assert!(cfg.path(&topic_channel(site2.name())).exists());
    assert!(!cfg
        .path(&topic_channel(Topic::<Tick>::of().name()))
        .exists());
    connected(&[&status, &export_status]);
    let mut feed = a.publisher(feed).expect("the handle");
    let mut app = b.subscription(app).expect("the handle");
    for n in 0..10 {
        feed.publish(Tick::new(n)).expect("published");
    }
    assert_eq!(take(&mut app, 10), (0..10).collect::<Vec<_>>());
    drop((feed, app));
    a.stop();
    a.join().expect("the exporting bus stops");
    b.stop();
    b.join().expect("the importing bus stops");
}

/// docs/IPC.md "Named topics": a reader refuses a channel whose header carries another topic's
/// id (`OpenError::Topic`, naming the channel and the topic it expected) or another type of
/// its topic (`OpenError::Fingerprint`, naming the topic); an import whose channel carries
/// another topic never connects and keeps the error in its status.
#[test]
fn a_channel_of_another_name_or_type_is_refused_with_a_clear_error() {
    let dir = Dir::new("refused");
    let cfg = config_in(&dir.0);
    let (nyse, nasdaq) = (
        topic::<Tick>("md.tick.nyse"),
        topic::<Tick>("md.tick.nasdaq"),
    );
    let _tx = Sender::<Tick, Pod>::create_on("venue", &nyse, &cfg).expect("create");

    let other_name = Receiver::<Tick, Pod>::open_on("venue", &nasdaq, &cfg).expect_err("a name");
    match &other_name {
        OpenError::Topic {
            channel,
            ours,
            ours_id,
            theirs_id,
        } => {
            assert_eq!(channel, "venue");
            assert_eq!(ours, "md.tick.nasdaq");
            assert_eq!((*ours_id, *theirs_id), (nasdaq.id(), nyse.id()));
        }
        e => panic!("another name: {e:?}"),
    }
    let text = other_name.to_string();
    assert!(
        text.contains("'venue'") && text.contains("'md.tick.nasdaq'"),
        "{text}"
    );
    // The type's default topic is another name too.
    assert!(matches!(
        Receiver::<Tick, Pod>::open("venue", &cfg),
        Err(OpenError::Topic { .. })
    ));
    // The right name of another type.
    let other_type =
        Receiver::<Wide, Pod>::open_on("venue", &topic("md.tick.nyse"), &cfg).expect_err("a type");
    assert!(
        matches!(&other_type, OpenError::Fingerprint { topic, .. } if topic == "md.tick.nyse"),
        "{other_type:?}"
    );
    // The right name and type: attached.
    Receiver::<Tick, Pod>::open_on("venue", &nyse, &cfg).expect("the topic's own reader");

    // An import of nasdaq whose channel carries nyse.
    let _squat =
        Sender::<Tick, Pod>::create_on(&topic_channel(nasdaq.name()), &nyse, &cfg).expect("create");
    let import = ShmImport::<Tick, Pod>::on(&nasdaq, &cfg);
    let status = import.status();
    let mut b = Bus::builder();
    b.add(import);
    let _app = b.subscription_on(&nasdaq, "app", Backpressure::Block, 8);
    let b = b.start().expect("the bus starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status.last_error().is_none() {
        assert!(std::time::Instant::now() < deadline, "no error reported");
        std::thread::sleep(Duration::from_millis(5));
    }
    let error = status.last_error().unwrap_or_default();
    assert!(
        error.contains("'md.tick.nasdaq'") && error.contains("carries topic id"),
        "{error}"
    );
    assert_eq!(status.connects(), 0);
    assert!(!status.is_connected());
    b.stop();
    b.join().expect("the bus stops");
}

/// docs/IPC.md "Named topics": a named export creates its channel when its bus starts; a
/// channel a live writer holds makes `start()` fail, naming the channel and why.
#[test]
fn a_named_export_whose_channel_is_held_fails_start_naming_it() {
    let dir = Dir::new("held");
    let cfg: ChannelConfig = config_in(&dir.0);
    let nyse = topic::<Tick>("md.tick.nyse");
    let _holder =
        Sender::<Tick, Pod>::create_on(&topic_channel(nyse.name()), &nyse, &cfg).expect("create");
    let mut a = Bus::builder();
    let _feed = a.publisher_on(&nyse, "feed");
    a.add(ShmExport::<Tick, Pod>::on(&nyse, &cfg));
    match a.start() {
        Ok(running) => {
            running.stop();
            panic!("an export started on a channel a live writer holds");
        }
        Err(StartError::FactoryPanicked { actor, message }) => {
            assert_eq!(actor, "ipc-export-md.tick.nyse");
            assert!(
                message.contains(&topic_channel(nyse.name())) && message.contains("in use"),
                "{message}"
            );
        }
        Err(e) => panic!("another error: {e}"),
    }
}
