//! Discovery and multicast across network namespaces: the `publisher` and `subscriber` examples
//! on hosts joined by the harness's multi-host tun wire (`tests::netns::Hosts`), which forwards
//! multicast to every namespace except those told to drop it.
//!
//! - One publisher exporting to a multicast group and three subscribers, one of them in a
//!   namespace that drops multicast: every subscriber gets every message, the two members by
//!   the group, the third by unicast (the wire's counts show which).
//! - A `--discover` subscriber following publishers that join, restart and leave.
//! - A reliable multicast topic with four subscribers at 5% loss on every link: every message
//!   arrives in order, and the publisher retransmits fewer messages than the subscribers lost
//!   in total (one repair to the group answers every subscriber that lost the same message).
//!
//! - The same over IPv6: announcements and data on IPv6 groups.
//!
//! Needs root. Without root it prints a SKIPPED banner and passes, except under CI (`CI` set),
//! where it fails, like `netns`. Run it with
//! `sudo -E cargo test -p tests --test it net::multicast_ns -- --nocapture`.

mod fallback;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, Fields, Running};
use tests::netns::{Hosts, Netem};

/// Writes straight to the process's stderr, past libtest's capture, so the SKIPPED banner and
/// the reports always reach the log.
macro_rules! loud {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn prerequisites() -> bool {
    tests::netns::prerequisites("net::multicast_ns", Hosts::available())
}

use crate::net::NAMESPACES as SLOTS;

const PUB_PORT: u16 = 7000;
const SUB_PORT: u16 = 7001;
/// The data group (the discovery group is the examples' default, 239.255.76.76:7476).
const DATA_GROUP: &str = "239.255.77.1:7100";
const DISCOVERY_GROUP: &str = "239.255.76.76:7476";

fn hosts(n: usize) -> Hosts {
    Hosts::create(n).unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"))
}

fn addr(hosts: &Hosts, i: usize, port: u16) -> SocketAddr {
    SocketAddr::from((hosts.addr(i), port))
}

/// The publisher example in host `i`, at `rate` messages a second for `count`, with `extra`.
fn publisher(hosts: &Hosts, i: usize, rate: u64, count: u64, extra: &[&str]) -> Running {
    // The subscribers are on the other namespaces' addresses, outside the loopback default.
    let bind = addr(hosts, i, PUB_PORT);
    publisher_at(hosts, i, bind, "10.214.0.0/16", rate, count, extra)
}

/// The publisher example in host `i`, bound to `bind`, serving subscribers in `allow`.
fn publisher_at(
    hosts: &Hosts,
    i: usize,
    bind: SocketAddr,
    allow: &str,
    rate: u64,
    count: u64,
    extra: &[&str],
) -> Running {
    let mut cmd = Command::new(example("publisher"));
    cmd.args([
        "--bind",
        &bind.to_string(),
        "--rate",
        &rate.to_string(),
        "--count",
        &count.to_string(),
        "--idle",
        "park",
        "--allow",
        allow,
    ])
    .args(extra);
    let mut p = Running::spawn(&format!("publisher@{i}"), hosts.wrap(i, &cmd));
    assert!(
        p.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "the publisher in host {i} did not start"
    );
    p
}

/// The subscriber example in host `i`, exiting after `count` messages, with `extra`.
fn subscriber(hosts: &Hosts, i: usize, count: u64, extra: &[&str]) -> Running {
    subscriber_at(hosts, i, addr(hosts, i, SUB_PORT), count, extra)
}

/// The subscriber example in host `i`, bound to `bind`, exiting after `count` messages.
fn subscriber_at(hosts: &Hosts, i: usize, bind: SocketAddr, count: u64, extra: &[&str]) -> Running {
    let mut cmd = Command::new(example("subscriber"));
    cmd.args([
        "--bind",
        &bind.to_string(),
        "--count",
        &count.to_string(),
        "--timeout-s",
        "40",
        "--idle",
        "park",
    ])
    .args(extra);
    Running::spawn(&format!("subscriber@{i}"), hosts.wrap(i, &cmd))
}

/// Waits for `p` to exit successfully and returns its line tagged `tag`.
fn result(p: Running, tag: &str) -> Fields {
    let name = p.name().to_owned();
    let (status, out, err) = p.finish(Duration::from_secs(45));
    assert!(
        status.is_some_and(|s| s.success()),
        "{name} failed or stalled ({status:?}):\n{out}\n{err}"
    );
    Fields::find(&out, tag).unwrap_or_else(|| panic!("{name}: no {tag} line:\n{out}\n{err}"))
}

#[test]
fn a_multicast_export_reaches_three_namespaces_and_the_one_without_the_group_by_unicast() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    // About one datagram a message at this rate, which the comparisons of the wire's datagram
    // counts below need: a faster publisher packs several messages a datagram, while the
    // unicast handshake, renewals and heartbeats stay as many a second.
    const COUNT: u64 = 3_000;
    const RATE: u64 = 1_000;
    // The subscribers start a moment after the publisher and count from the first message they
    // get; they stop well short of the end so that they finish while it still sends.
    const WANT: u64 = COUNT * 6 / 10;
    let (pub_bin, sub_bin) = (example("publisher"), example("subscriber"));
    assert!(pub_bin.is_file() && sub_bin.is_file());
    let hosts = hosts(4);
    const NO_GROUP: usize = 3;
    hosts.drop_multicast(NO_GROUP, true);
    let publ = publisher(&hosts, 0, RATE, COUNT, &["--multicast", DATA_GROUP]);
    let pub_addr = addr(&hosts, 0, PUB_PORT).to_string();
    let subs: Vec<Running> = (1..4)
        .map(|i| subscriber(&hosts, i, WANT, &["--publisher", &pub_addr]))
        .collect();
    let results: Vec<Fields> = subs.into_iter().map(|s| result(s, "RESULT ")).collect();
    let published = result(publ, "PUBLISHED ");
    let counts: Vec<_> = (0..4).map(|i| hosts.counts(i)).collect();
    for (i, r) in results.iter().enumerate() {
        loud!(
            "multicast_ns: subscriber in host {} ({}): {r}\n  wire: {:?}",
            i + 1,
            if i + 1 == NO_GROUP {
                "multicast dropped"
            } else {
                "group member"
            },
            counts[i + 1]
        );
    }
    loud!("multicast_ns: publisher: {published}");
    for (i, r) in results.iter().enumerate() {
        // Every message from the first it got: nothing lost, nothing out of order.
        assert!(r.u64("received") >= WANT, "host {}: {r}", i + 1);
        assert_eq!(r.u64("lost"), 0, "host {}: {r}", i + 1);
        assert_eq!(r.u64("errors"), 0, "host {}: {r}", i + 1);
    }
    // The premise: the data went to the group, which reached the members and not the third.
    let (member, fallback) = (counts[1], counts[NO_GROUP]);
    // (Datagrams, not messages: under load a datagram carries several, so counts of datagrams
    // are compared with each other, never with the number of messages.)
    assert_eq!(fallback.multicast_in, 0, "{fallback:?}");
    assert!(member.multicast_in > 0, "{member:?}");
    assert!(
        fallback.multicast_refused * 2 >= member.multicast_in,
        "the group's datagrams did not reach the third host's wire: {fallback:?}, {member:?}"
    );
    // The members are served by the group (their unicast is the handshake, renewals and
    // heartbeats), the third by unicast: it gets several times the unicast datagrams.
    for m in [counts[1], counts[2]] {
        assert!(
            m.unicast_in * 3 < fallback.unicast_in,
            "members {m:?}, fallback {fallback:?}"
        );
    }
    assert!(fallback.unicast_in > 0, "{fallback:?}");
    // The publisher's side of it: about two datagrams a message (the group's and the third
    // subscriber's), where unicast to all three would be three.
    let (datagrams, messages) = (
        published.u64("datagrams_out"),
        published.u64("messages_out"),
    );
    assert!(
        datagrams * 10 < messages * 25,
        "{datagrams} datagrams for {messages} messages"
    );
}

/// IPv6 end to end: a subscriber in each of two namespaces finds the publisher by its
/// announcements on an IPv6 discovery group and receives its data by an IPv6 data group (the
/// wire's counts show the data came by multicast, and the publisher sent about one datagram a
/// message for both).
#[test]
fn ipv6_groups_carry_the_announcements_and_the_data() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    // As in the IPv4 export: about one datagram a message, for the comparison of datagrams.
    const COUNT: u64 = 3_000;
    const RATE: u64 = 1_000;
    const WANT: u64 = COUNT * 6 / 10;
    const DISCOVERY6: &str = "[ff15::7476]:7476";
    const DATA6: &str = "[ff15::77:1]:7100";
    let hosts = hosts(3);
    let at = |i: usize, port: u16| SocketAddr::from((hosts.addr6(i), port));
    let allow = "fd6c::/16";
    let discover = ["--discover", DISCOVERY6, "--allow", allow];
    let subs: Vec<Running> = (1..3)
        .map(|i| subscriber_at(&hosts, i, at(i, SUB_PORT), WANT, &discover))
        .collect();
    let extra = ["--announce", DISCOVERY6, "--multicast", DATA6];
    let publ = publisher_at(&hosts, 0, at(0, PUB_PORT), allow, RATE, COUNT, &extra);
    let before: Vec<_> = (0..3).map(|i| hosts.counts(i)).collect();
    let results: Vec<Fields> = subs.into_iter().map(|s| result(s, "RESULT ")).collect();
    let published = result(publ, "PUBLISHED ");
    let counts: Vec<_> = (0..3).map(|i| hosts.counts(i)).collect();
    loud!("multicast_ns: IPv6 publisher: {published}");
    for (i, r) in results.iter().enumerate() {
        let host = i + 1;
        loud!(
            "multicast_ns: IPv6 subscriber in host {host}: {r}\n  wire: {:?}",
            counts[host]
        );
        assert!(r.u64("received") >= WANT, "host {host}: {r}");
        assert_eq!(r.u64("lost"), 0, "host {host}: {r}");
        assert_eq!(r.u64("errors"), 0, "host {host}: {r}");
        // The data came by the group: several times the multicast datagrams of unicast ones
        // (the unicast ones are the handshake, renewals and heartbeats).
        let multicast = counts[host].multicast_in - before[host].multicast_in;
        let unicast = counts[host].unicast_in - before[host].unicast_in;
        assert!(multicast > 3 * unicast, "host {host}: {:?}", counts[host]);
    }
    // About one datagram a message for both subscribers, where unicast would be two.
    let (datagrams, messages) = (
        published.u64("datagrams_out"),
        published.u64("messages_out"),
    );
    assert!(
        datagrams * 10 < messages * 15,
        "{datagrams} datagrams for {messages} messages"
    );
}

/// Waits until every host of `members` receives the data: by the group when `group` (over a
/// tenth of a second, the wire brought it several times more multicast than unicast
/// datagrams), else by unicast.
fn wait_for_data(hosts: &Hosts, members: std::ops::Range<usize>, group: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut before: Vec<_> = members.clone().map(|i| hosts.counts(i)).collect();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now: Vec<_> = members.clone().map(|i| hosts.counts(i)).collect();
        let receiving = before.iter().zip(&now).all(|(b, n)| {
            let multicast = n.multicast_in - b.multicast_in;
            let unicast = n.unicast_in - b.unicast_in;
            if group {
                multicast > 20 && unicast * 4 < multicast
            } else {
                unicast > 20
            }
        });
        if receiving {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every subscriber receives the data: {now:?}"
        );
        before = now;
    }
}

/// Sends SIGTERM to `p`, which the publisher example answers by stopping cleanly.
fn terminate(p: &mut Running) {
    let pid = p.pid() as libc::pid_t;
    // SAFETY: kill(2) with a pid of a child this test started and has not yet reaped.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

#[test]
fn a_discovering_subscriber_follows_publishers_that_join_restart_and_leave() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    let (pub_bin, sub_bin) = (example("publisher"), example("subscriber"));
    assert!(pub_bin.is_file() && sub_bin.is_file());
    let hosts = hosts(3);
    let announce = ["--announce", DISCOVERY_GROUP];
    let mut sub = Some(subscriber(
        &hosts,
        0,
        u64::MAX / 2,
        // Announcements are believed from the allowlist's networks only (loopback by default).
        &["--discover", DISCOVERY_GROUP, "--allow", "10.214.0.0/16"],
    ));
    let (one, two) = (addr(&hosts, 1, PUB_PORT), addr(&hosts, 2, PUB_PORT));
    let found = |sub: &mut Option<Running>, who: SocketAddr| -> String {
        let prefix = format!("discovered: publisher {who} (session ");
        wait_line(sub, Duration::from_secs(15), |l| {
            l.starts_with(&prefix) && l.ends_with(", subscribed")
        })
    };
    let session = |line: &str| -> String {
        line.split("(session ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .unwrap_or_default()
            .to_owned()
    };

    let start = std::time::Instant::now();
    // One publisher joins, then a second.
    let mut p1 = publisher(&hosts, 1, 200, 1_000_000, &announce);
    let first = found(&mut sub, one);
    let mut p2 = publisher(&hosts, 2, 200, 1_000_000, &announce);
    found(&mut sub, two);
    loud!(
        "multicast_ns: discovered both after {:?}: {first}",
        start.elapsed()
    );

    // The first restarts (a new session at the same address) and is followed.
    terminate(&mut p1);
    let _ = result(p1, "PUBLISHED ");
    let p1 = publisher(&hosts, 1, 200, 1_000_000, &announce);
    let again = loop {
        let line = found(&mut sub, one);
        if session(&line) != session(&first) {
            break line;
        }
    };
    loud!(
        "multicast_ns: followed the restart after {:?}: {again}",
        start.elapsed()
    );

    // The second leaves and is forgotten; the first is still served.
    terminate(&mut p2);
    let _ = result(p2, "PUBLISHED ");
    let gone = format!("discovered: publisher {two} is gone");
    wait_line(&mut sub, Duration::from_secs(20), |l| l == gone);
    loud!("multicast_ns: {gone} after {:?}", start.elapsed());
    p1.kill();
    if let Some(sub) = sub {
        sub.kill();
    }
}

/// Waits for a line of `p`'s stdout that satisfies `pred`; if none comes within `timeout`,
/// stops it and fails with everything it wrote.
fn wait_line(p: &mut Option<Running>, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
    if let Some(line) = p.as_mut().and_then(|r| r.wait_line(timeout, &pred)) {
        return line;
    }
    let Some(r) = p.take() else {
        panic!("no process to wait for");
    };
    let name = r.name().to_owned();
    let (status, out, err) = r.finish(Duration::ZERO);
    panic!("{name}: the line awaited did not come ({status:?}):\n{out}\n{err}");
}

/// What a reliable run at 5% loss came to.
struct Repairs {
    /// Datagrams the wire lost on their way to the subscribers, summed over them.
    lost: u64,
    /// NAK frames the subscribers sent.
    naks: u64,
    /// Messages the publisher retransmitted.
    retransmitted: u64,
}

/// A reliable topic (to the data group when `multicast`, else by unicast) with four
/// subscribers, 5% loss on every host's way out once all four receive the data the way they
/// should: every message arrives in order at each, and each is still served that way at the
/// end.
fn reliable_run(multicast: bool) -> Repairs {
    // Over a thousand datagrams to each subscriber at 5% loss: hundreds of losses, NAKs and
    // repairs in all, enough to compare the two runs' repairs per loss.
    const COUNT: u64 = 2_000;
    const RATE: u64 = 1_500;
    const WANT: u64 = COUNT * 6 / 10;
    let how = if multicast { "multicast" } else { "unicast" };
    let hosts = hosts(5);
    let mut extra = vec!["--reliable"];
    if multicast {
        extra.extend(["--multicast", DATA_GROUP]);
    }
    let publ = publisher(&hosts, 0, RATE, COUNT, &extra);
    let pub_addr = addr(&hosts, 0, PUB_PORT).to_string();
    let subs: Vec<Running> = (1..5)
        .map(|i| subscriber(&hosts, i, WANT, &["--reliable", "--publisher", &pub_addr]))
        .collect();
    // The loss starts once every subscriber receives the data as it should: the publisher
    // tells a subscriber the group once, at its admission (PROTOCOL.md, "Multicast data"), and
    // one whose `Group` datagram is lost is served by unicast from then on, which is the
    // fallback working, not the repair to the group this case is about.
    let members = 1..5;
    wait_for_data(&hosts, members.clone(), multicast);
    let lossy = Netem {
        loss_pct: 5.0,
        ..Netem::default()
    };
    for i in 0..5 {
        hosts
            .shape(i, lossy)
            .unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    }
    let before: Vec<_> = members.clone().map(|i| hosts.counts(i)).collect();
    // The subscriber exits non-zero if any message was unrecovered, out of order or corrupt.
    let results: Vec<Fields> = subs.into_iter().map(|s| result(s, "RESULT ")).collect();
    let published = result(publ, "PUBLISHED ");
    let (mut lost, mut naks) = (0, 0);
    for (i, r) in results.iter().enumerate() {
        let wire = hosts.counts(i + 1);
        loud!(
            "multicast_ns: reliable {how} subscriber in host {}: {r}\n  wire: {wire:?}",
            i + 1
        );
        assert!(r.u64("received") >= WANT, "host {}: {r}", i + 1);
        assert_eq!(r.u64("unrecovered"), 0, "host {}: {r}", i + 1);
        assert_eq!(r.u64("out_of_order"), 0, "host {}: {r}", i + 1);
        // What the subscriber saw lost: the datagrams the wire dropped on their way to it
        // (data, repairs and heartbeats alike; a reliable import counts no loss it repaired).
        lost += wire.lost_in;
        naks += r.u64("nak_sent");
        // Still served as at the start: a member's unicast brought only heartbeats, renewals'
        // answers and repairs (a few hundred datagrams), not the data.
        let unicast = wire.unicast_in - before[i].unicast_in;
        let multicast_in = wire.multicast_in - before[i].multicast_in;
        if multicast {
            assert!(
                unicast < WANT / 4,
                "host {} fell back to unicast: {wire:?}",
                i + 1
            );
        } else {
            assert!(multicast_in < WANT / 4, "host {}: {wire:?}", i + 1);
        }
    }
    let retransmitted = published.u64("retransmitted");
    loud!(
        "multicast_ns: reliable {how}, 5% loss, 4 subscribers: losses seen {lost} in total, \
         NAKs sent {naks}, messages retransmitted {retransmitted}; publisher: {published}"
    );
    assert!(
        lost > 0,
        "the premise: the wire lost datagrams to the subscribers"
    );
    assert!(naks > 0, "the premise: the subscribers NAKed");
    Repairs {
        lost,
        naks,
        retransmitted,
    }
}

#[test]
fn a_reliable_multicast_topic_at_5_percent_loss_reaches_4_subscribers_with_naks_suppressed() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    let (pub_bin, sub_bin) = (example("publisher"), example("subscriber"));
    assert!(pub_bin.is_file() && sub_bin.is_file());
    let group = reliable_run(true);
    // The same topic by unicast, for comparison: each subscriber's NAK draws its own repair.
    let unicast = reliable_run(false);
    let ratio = |r: &Repairs| r.retransmitted as f64 / r.lost as f64;
    loud!(
        "multicast_ns: retransmitted per loss seen: multicast {:.2} ({} / {}, {} NAKs), \
         unicast {:.2} ({} / {}, {} NAKs)",
        ratio(&group),
        group.retransmitted,
        group.lost,
        group.naks,
        ratio(&unicast),
        unicast.retransmitted,
        unicast.lost,
        unicast.naks
    );
    // Unsuppressed, every subscriber's NAK would draw its own repair: at least one
    // retransmission per loss seen, as by unicast.
    assert!(
        group.retransmitted < group.lost,
        "NAKs not suppressed: {} retransmissions for {} losses seen",
        group.retransmitted,
        group.lost
    );
    assert!(ratio(&group) < ratio(&unicast));
}
