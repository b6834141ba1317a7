//! The `publisher` and `subscriber` examples on two "hosts" (network namespaces joined by one
//! shaped link, `tests::netns`): loss of 1%, 5% and 20%, and 5% loss with 1% duplication and
//! 10% reordering behind a 1 ms delay. For each case the subscriber's counts must add up (every
//! counter value in its window was received or counted lost), the loss must be near the
//! configured rate, duplicates and reordering must be seen when the link makes them, nothing may
//! stall, and the test reports the delivered percentage and the one-way latency. The last case
//! runs again in the ll-udp-pubsub v0.1 format, where the subscriber infers all of it from the
//! counter values (that format has no sequence numbers).
//!
//! Only host A's side is shaped, A -> B: the data direction (data, acknowledgements and
//! heartbeats). Subscriptions travel B -> A unimpaired, so the publisher starts promptly
//! (`--wait-subscriber`) and every case measures the data path alone; losing a subscription
//! would only delay the start until the next renewal a second later.
//!
//! Needs root. Without root it prints a SKIPPED banner and passes, except under CI (`CI` set),
//! where it fails, like the harness's own tests. The link is veth + `tc netem` when the kernel has
//! netem, else the harness's userspace tun wire; each report line names it. Run it with
//! `sudo -E cargo test -p tests --test it net::netns -- --nocapture`.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tests::example_bins::{example, Fields, Running};
use tests::netns::{Netem, Side, TwoHosts};

/// Writes straight to the process's stderr, past libtest's capture (as `netns_harness` does),
/// so the SKIPPED banner and the reports always reach the log.
macro_rules! loud {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn prerequisites() -> bool {
    tests::netns::prerequisites("net::netns", TwoHosts::available())
}

use crate::net::NAMESPACES as SLOTS;

/// How fast the publisher sends in the counter cases. At this rate the debug-built publisher
/// packs a few messages into each datagram, and the link draws its loss per datagram: a
/// case's statistical power is the number of datagrams, so each case sends as many messages
/// as its check needs (see the callers of [`run_case`]).
const RATE: u64 = 2_500;
/// Messages for the loss bands at 5% and 20%, and for the reliable topic at 1% (which must
/// see losses to NAK): enough datagrams that the measured loss is many standard deviations
/// inside its band, and that no loss at all is out of the question.
const COUNT: u64 = 6_000;
/// Messages for the 1% loss band, whose losses are the fewest: the most datagrams.
const COUNT_1PCT: u64 = 10_000;
/// Messages for checks that need no loss statistics (a clean link; a reliable topic at 5% or
/// 20%, where NAKs are certain after a few hundred datagrams).
const COUNT_SHORT: u64 = 3_000;
const PUB_PORT: u16 = 7000;
const SUB_PORT: u16 = 7001;

/// Runs the publisher in A, sending `count` messages, and the subscriber in B over a link
/// shaped by `shape` (A -> B) and returns the subscriber's RESULT fields, after checking that
/// both exited cleanly and that the counts add up.
fn run_case(name: &str, shape: Netem, count: u64) -> Fields {
    run_case_in(name, shape, false, false, count)
}

/// [`run_case`], in the ll-udp-pubsub v0.1 format when `compat`, on a reliable topic when
/// `reliable` (the subscriber then expects every message and fails on any unrecovered or out
/// of order).
fn run_case_in(name: &str, shape: Netem, compat: bool, reliable: bool, count: u64) -> Fields {
    run_case_with(name, shape, compat, reliable, Load::counter(count))
}

/// What the publisher sends in a case: how many messages, how fast, and how large a payload.
#[derive(Clone, Copy, Debug)]
struct Load {
    count: u64,
    rate: u64,
    /// `--size BYTES` for both examples (the subscriber checks each payload's content).
    size: Option<usize>,
}

impl Load {
    /// The counter cases: `count` messages at [`RATE`] a second, no payload.
    fn counter(count: u64) -> Load {
        Load {
            count,
            rate: RATE,
            size: None,
        }
    }
}

/// [`run_case_in`] with `load`.
fn run_case_with(name: &str, shape: Netem, compat: bool, reliable: bool, load: Load) -> Fields {
    let Load { count, rate, size } = load;
    // Built (once) before the namespaces exist.
    let (pub_bin, sub_bin) = (example("publisher"), example("subscriber"));
    // A megabyte a message keeps the debug-built examples busy encoding and checking: such a
    // case runs alone among the namespace cases, so that no other starves it of a core.
    let _slot = if size.is_some_and(|s| s > 100_000) {
        SLOTS.take_all()
    } else {
        SLOTS.take()
    };
    let hosts = TwoHosts::create().unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    hosts
        .shape(Side::A, shape)
        .unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let pub_addr = SocketAddr::from((hosts.addr(Side::A), PUB_PORT));
    let sub_addr = SocketAddr::from((hosts.addr(Side::B), SUB_PORT));
    // The subscriber stops short of the deliveries to expect, so that it finishes while the
    // publisher is still sending whatever the loss draws. The margin is wide: on a busy machine
    // the tun wire (a thread of this process) adds loss of its own when it falls behind, and a
    // publisher that fell behind sends several messages per datagram, so one lost datagram
    // loses several messages.
    let want = if reliable {
        (count as f64 * 0.85) as u64
    } else {
        (count as f64 * (1.0 - shape.loss_pct / 100.0) * 0.85) as u64
    };

    let mut publ = Command::new(pub_bin);
    publ.args([
        "--bind",
        &pub_addr.to_string(),
        "--rate",
        &rate.to_string(),
        "--count",
        &count.to_string(),
        "--wait-subscriber",
        "--idle",
        "park",
        // The subscriber is on the other namespace's address, outside the loopback default.
        "--allow",
        "10.213.0.0/16",
        "--grace-ms",
        // A best-effort subscriber finishes while the publisher is still sending (above):
        // nobody needs a grace period. A reliable one may still be waiting for retransmissions
        // when the count is done (a debug-built subscriber on a busy machine lags): the
        // publisher serves until it leaves (a clean stop unsubscribes), at most a minute.
        if reliable { "60000" } else { "0" },
        // A lost unsubscribe ends the grace when the subscription expires instead.
        "--subscriber-timeout-s",
        "5",
    ]);
    if compat {
        publ.args(["--compat", "ll-udp"]);
    }
    if reliable {
        publ.arg("--reliable");
    }
    if let Some(size) = size {
        publ.args(["--size", &size.to_string()]);
    }
    let mut publ = Running::spawn("publisher", hosts.wrap(Side::A, &publ));
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "[{name}] the publisher did not start"
    );
    let mut sub = Command::new(sub_bin);
    sub.args([
        "--bind",
        &sub_addr.to_string(),
        "--publisher",
        &pub_addr.to_string(),
        "--count",
        &want.to_string(),
        "--timeout-s",
        "30",
        "--idle",
        "park",
    ]);
    if compat {
        sub.args(["--compat", "ll-udp"]);
    }
    if reliable {
        sub.arg("--reliable");
    }
    if let Some(size) = size {
        sub.args(["--size", &size.to_string()]);
    }
    let sub = Running::spawn("subscriber", hosts.wrap(Side::B, &sub));

    let (status, out, err) = sub.finish(Duration::from_secs(45));
    assert!(
        status.is_some_and(|s| s.success()),
        "[{name}] subscriber failed or stalled ({status:?}):\n{out}\n{err}"
    );
    let r = Fields::find(&out, "RESULT ")
        .unwrap_or_else(|| panic!("[{name}] no RESULT line:\n{out}\n{err}"));
    let (status, pout, perr) = publ.finish(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "[{name}] publisher failed or stalled ({status:?}):\n{pout}\n{perr}"
    );
    let p = Fields::find(&pout, "PUBLISHED ")
        .unwrap_or_else(|| panic!("[{name}] no PUBLISHED line:\n{pout}\n{perr}"));
    assert_eq!(p.u64("published"), count, "[{name}] {p}");

    let (received, lost) = (r.u64("received"), r.u64("lost"));
    let (first, highest) = (r.u64("first"), r.u64("highest"));
    let accounted = received + r.u64("ring_dropped") + lost;
    let latency = if compat {
        "n/a (the compat import drops sent_ts)".to_string()
    } else {
        format!(
            "p50={}us p99={}us p99.9={}us max={}us",
            r.u64("p50_us"),
            r.u64("p99_us"),
            r.u64("p999_us"),
            r.u64("max_us")
        )
    };
    loud!(
        "netns report [{name}] link={} published={} sent={} subscriber window={}..={} \
         received={received} lost={lost} delivered={:.2}% duplicates={} reordered={} stale={} invalid={} \
         datagrams out={} in={} one-way latency {latency}",
        hosts.link(),
        p.u64("published"),
        p.u64("messages_out"),
        first,
        highest,
        100.0 * received as f64 / accounted.max(1) as f64,
        r.u64("duplicates"),
        r.u64("reordered"),
        r.u64("stale"),
        r.u64("invalid"),
        p.u64("datagrams_out"),
        r.u64("datagrams_in"),
    );

    assert!(received >= want, "[{name}] {r}");
    assert!(highest < count, "[{name}] {r}");
    // Every counter value in the subscriber's window arrived or is counted lost. The window's
    // sequence tracking may begin one step earlier than `first` (at the acknowledgement, if the
    // first data datagrams were lost), and a heartbeat may announce a few more that were lost
    // at the tail or are still in flight when the subscriber stops.
    let span = highest - first + 1;
    if compat {
        // No sequence numbers or heartbeats: the subscriber counts by counter value alone.
        assert_eq!(
            accounted, span,
            "[{name}] received + lost != counter values {first}..={highest}: {r}"
        );
    } else {
        assert!(
            accounted >= span && accounted <= highest + 1 + 50,
            "[{name}] received + lost = {accounted}, counter values {first}..={highest}: {r}"
        );
    }
    assert_eq!(r.u64("publisher_restarts"), 0, "[{name}] {r}");
    assert_eq!(r.u64("invalid"), 0, "[{name}] {r}");
    assert_eq!(r.u64("corrupt"), 0, "[{name}] {r}");
    r
}

/// Loss as a percentage of the subscriber's window: the numbers that never arrived. A datagram
/// reordered by more than the sequence window (128) arrives "stale" and stays counted as lost
/// by the tracker; the tun wire does that when it falls behind and then releases a backlog, so
/// stale arrivals are taken out here (and reported).
fn loss_pct(r: &Fields) -> f64 {
    let lost = r.u64("lost");
    let never_arrived = lost.saturating_sub(r.u64("stale")) as f64;
    100.0 * never_arrived / (r.u64("received") + lost).max(1) as f64
}

fn check_loss(name: &str, r: &Fields, band: std::ops::RangeInclusive<f64>) {
    let pct = loss_pct(r);
    assert!(
        band.contains(&pct),
        "[{name}] loss {pct:.2}% outside {band:?}: {r}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn counter_over_a_clean_link() {
    if !prerequisites() {
        return;
    }
    let r = run_case("clean", Netem::default(), COUNT_SHORT);
    assert!(loss_pct(&r) <= 0.5, "[clean] {r}");
    assert_eq!(r.u64("duplicates"), 0, "[clean] {r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn counter_under_1pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 1.0,
        ..Netem::default()
    };
    let r = run_case("loss 1%", shape, COUNT_1PCT);
    check_loss("loss 1%", &r, 0.3..=3.0);
    assert_eq!(r.u64("duplicates"), 0, "[loss 1%] {r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn counter_under_5pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 5.0,
        ..Netem::default()
    };
    let r = run_case("loss 5%", shape, COUNT);
    check_loss("loss 5%", &r, 2.5..=10.0);
    assert_eq!(r.u64("duplicates"), 0, "[loss 5%] {r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn counter_under_20pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 20.0,
        ..Netem::default()
    };
    let r = run_case("loss 20%", shape, COUNT);
    check_loss("loss 20%", &r, 15.0..=27.0);
    assert_eq!(r.u64("duplicates"), 0, "[loss 20%] {r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn counter_under_loss_duplication_reorder_and_delay() {
    if !prerequisites() {
        return;
    }
    let name = "loss 5% dup 1% reorder 10% delay 1ms";
    let shape = Netem {
        loss_pct: 5.0,
        duplicate_pct: 1.0,
        reorder_pct: 10.0,
        delay_ms: 1,
        ..Netem::default()
    };
    let r = run_case(name, shape, COUNT);
    check_loss(name, &r, 2.5..=10.0);
    assert!(r.u64("duplicates") > 0, "[{name}] no duplicates: {r}");
    assert!(r.u64("reordered") > 0, "[{name}] nothing reordered: {r}");
    // 90% of the datagrams wait the 1 ms delay, so the median must show it.
    assert!(
        r.u64("p50_us") >= 900,
        "[{name}] median one-way latency {}us under a 1 ms delay: is the link shaped? {r}",
        r.u64("p50_us")
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn compat_counter_under_loss_duplication_reorder_and_delay() {
    if !prerequisites() {
        return;
    }
    let name = "ll-udp-pubsub format, loss 5% dup 1% reorder 10% delay 1ms";
    let shape = Netem {
        loss_pct: 5.0,
        duplicate_pct: 1.0,
        reorder_pct: 10.0,
        delay_ms: 1,
        ..Netem::default()
    };
    let r = run_case_in(name, shape, true, false, COUNT);
    // One message per datagram in this format, so message loss is datagram loss.
    check_loss(name, &r, 2.5..=10.0);
    assert!(r.u64("duplicates") > 0, "[{name}] no duplicates: {r}");
    assert!(r.u64("reordered") > 0, "[{name}] nothing reordered: {r}");
    assert_eq!(r.get("p50_us"), Some("na"), "[{name}] {r}");
}

/// A reliable topic over the shaped link: every message from the first the subscriber sees to
/// the last, in order, none unrecovered, none counted lost; and NAKs were needed. The
/// publisher sends `count` messages.
fn reliable_case(name: &str, shape: Netem, count: u64) {
    let r = run_case_in(name, shape, false, true, count);
    let (first, highest, received) = (r.u64("first"), r.u64("highest"), r.u64("received"));
    loud!(
        "netns report [{name}] reliable: received={received} unrecovered={} nak_sent={} \
         out_of_order={}",
        r.u64("unrecovered"),
        r.u64("nak_sent"),
        r.u64("out_of_order")
    );
    assert_eq!(
        highest - first + 1,
        received,
        "[{name}] a gap was delivered: {r}"
    );
    assert_eq!(r.u64("unrecovered"), 0, "[{name}] {r}");
    assert_eq!(r.u64("out_of_order"), 0, "[{name}] {r}");
    assert_eq!(r.u64("lost"), 0, "[{name}] {r}");
    assert!(
        r.u64("nak_sent") > 0,
        "[{name}] loss and no NAK: is the link shaped? {r}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn reliable_counter_under_1pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 1.0,
        ..Netem::default()
    };
    reliable_case("reliable, loss 1%", shape, COUNT);
}

#[test]
#[cfg_attr(miri, ignore)]
fn reliable_counter_under_5pct_loss_duplication_and_reorder() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 5.0,
        duplicate_pct: 1.0,
        reorder_pct: 10.0,
        delay_ms: 1,
        ..Netem::default()
    };
    reliable_case(
        "reliable, loss 5% dup 1% reorder 10% delay 1ms",
        shape,
        COUNT_SHORT,
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn reliable_counter_under_20pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 20.0,
        ..Netem::default()
    };
    reliable_case("reliable, loss 20%", shape, COUNT_SHORT);
}

/// 1 MB messages (about 700 fragments each) for 2.5 s on a reliable topic under 1% loss: every
/// message from the first the subscriber sees to the last arrives, in order and intact (the
/// subscriber checks each payload's content), none unrecovered or incomplete; the lost fragments
/// were NAKed and retransmitted alone. 30 messages a second from optimized examples; 5 from the
/// debug build `cargo test` makes, whose unoptimized encoding and content check of a megabyte
/// take longer than a thirtieth of a second.
#[test]
#[cfg_attr(miri, ignore)]
fn reliable_1mb_messages_under_1pct_loss() {
    if !prerequisites() {
        return;
    }
    let shape = Netem {
        loss_pct: 1.0,
        ..Netem::default()
    };
    let (count, rate) = if cfg!(debug_assertions) {
        (13, 5)
    } else {
        (75, 30)
    };
    let name = &format!("reliable 1 MB messages at {rate}/s, loss 1%");
    let load = Load {
        count,
        rate,
        size: Some(1_000_000),
    };
    let r = run_case_with(name, shape, false, true, load);
    let (first, highest, received) = (r.u64("first"), r.u64("highest"), r.u64("received"));
    loud!(
        "netns report [{name}] received={received} unrecovered={} incomplete={} nak_sent={} \
         out_of_order={} corrupt={} datagrams_in={}",
        r.u64("unrecovered"),
        r.u64("incomplete"),
        r.u64("nak_sent"),
        r.u64("out_of_order"),
        r.u64("corrupt"),
        r.u64("datagrams_in"),
    );
    assert_eq!(highest - first + 1, received, "[{name}] a gap: {r}");
    assert_eq!(r.u64("unrecovered"), 0, "[{name}] {r}");
    assert_eq!(r.u64("incomplete"), 0, "[{name}] {r}");
    assert_eq!(r.u64("out_of_order"), 0, "[{name}] {r}");
    assert!(
        r.u64("nak_sent") > 0,
        "[{name}] 1% loss of {} fragments and no NAK: {r}",
        received * 700
    );
    assert!(
        r.u64("datagrams_in") > received * 700,
        "[{name}] 1 MB in datagrams of at most 1472 bytes: {r}"
    );
}
