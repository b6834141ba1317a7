//! A multicast member whose network stops and resumes carrying the group, across network
//! namespaces joined by the harness's multi-host wire (which can stop and resume multicast to
//! one namespace while the examples run): it falls back to unicast and returns, best-effort
//! without duplicates, reliable without a loss; a link-local IPv6 group carries the data; and a
//! replayed group Subscribe does not silence a member that fell back.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tests::example_bins::{example, Fields, Running};
use tests::netns::Hosts;

use crate::net::NAMESPACES as SLOTS;

const PUB_PORT: u16 = 7000;
const SUB_PORT: u16 = 7001;
const DATA_GROUP: &str = "239.255.78.1:7100";

fn spawn(hosts: &Hosts, i: usize, name: &str, args: &[&str]) -> Running {
    let mut cmd = Command::new(example(name));
    cmd.args(args);
    Running::spawn(&format!("{name}@{i}"), hosts.wrap(i, &cmd))
}

fn result(p: Running, tag: &str) -> Fields {
    let name = p.name().to_owned();
    let (status, out, err) = p.finish(Duration::from_secs(45));
    assert!(
        status.is_some_and(|s| s.success()),
        "{name} failed or stalled ({status:?}):\n{out}\n{err}"
    );
    Fields::find(&out, tag).unwrap_or_else(|| panic!("{name}: no {tag} line:\n{out}\n{err}"))
}

/// A publisher exporting to a group (reliably if `reliable`) and two subscribers: one in a
/// namespace whose multicast works throughout, one whose multicast stops and resumes every
/// `flap` (longer than the three heartbeat periods after which it falls back), so that it
/// switches between the group and unicast a dozen times. Returns both RESULT lines and the
/// wire's counts of the flapping host.
fn run(reliable: bool, flap: Duration) -> (Fields, Fields, tests::netns::WireCounts) {
    const RATE: u64 = 1_000;
    // The subscribers run long enough for the switches the caller asserts; the publisher sends
    // a margin more, for their late start and, on a best-effort topic, for what the flapping
    // one loses before each fallback (a reliable one repairs it).
    const WANT: u64 = 4_800;
    let count: u64 = if reliable { 5_500 } else { 7_000 };
    let hosts = Hosts::create(3).unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let at = |i: usize, port: u16| SocketAddr::from((hosts.addr(i), port)).to_string();
    let (bind, count, rate) = (at(0, PUB_PORT), count.to_string(), RATE.to_string());
    let mut args = vec![
        "--bind",
        &bind,
        "--rate",
        &rate,
        "--count",
        &count,
        "--idle",
        "park",
        "--allow",
        "10.214.0.0/16",
        "--multicast",
        DATA_GROUP,
        // Best-effort subscribers stop short of the count: no grace period after the last
        // message. Reliable ones may still need retransmissions: the publisher serves until
        // they leave (a clean stop unsubscribes), at most a minute.
        "--grace-ms",
        if reliable { "60000" } else { "0" },
        // A lost unsubscribe ends the grace when the subscription expires instead.
        "--subscriber-timeout-s",
        "5",
    ];
    if reliable {
        args.push("--reliable");
    }
    let mut publ = spawn(&hosts, 0, "publisher", &args);
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "the publisher did not start"
    );
    let want = WANT.to_string();
    let subs: Vec<Running> = (1..3)
        .map(|i| {
            let (bind, publisher) = (at(i, SUB_PORT), at(0, PUB_PORT));
            let mut args = vec![
                "--bind",
                &bind,
                "--count",
                &want,
                "--timeout-s",
                "40",
                "--idle",
                "park",
                "--publisher",
                &publisher,
            ];
            if reliable {
                args.push("--reliable");
            }
            spawn(&hosts, i, "subscriber", &args)
        })
        .collect();
    let stop = AtomicBool::new(false);
    let (mut results, switches) = {
        let (stop, hosts) = (&stop, &hosts);
        std::thread::scope(|scope| {
            let flapper = scope.spawn(move || {
                let until = Instant::now() + Duration::from_secs(40);
                let mut off = false;
                let mut switches = 0u32;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(flap);
                    off = !off;
                    hosts.drop_multicast(2, off);
                    switches += 1;
                }
                hosts.drop_multicast(2, false);
                switches
            });
            let results: Vec<Fields> = subs.into_iter().map(|s| result(s, "RESULT ")).collect();
            stop.store(true, Ordering::Relaxed);
            let switches = flapper.join().unwrap_or(0);
            (results, switches)
        })
    };
    let published = result(publ, "PUBLISHED ");
    let wire = hosts.counts(2);
    eprintln!(
        "multicast_ns::fallback: {} multicast, flapping every {flap:?} ({switches} switches)\n  \
         steady: {}\n  flapping: {}\n  wire of the flapping host: {wire:?}\n  \
         publisher: {published}",
        if reliable { "reliable" } else { "best-effort" },
        results[0],
        results[1]
    );
    assert!(
        switches >= 6,
        "the premise: multicast stopped and resumed ({switches})"
    );
    let flapping = results.pop().unwrap_or_else(|| unreachable!());
    let steady = results.pop().unwrap_or_else(|| unreachable!());
    (steady, flapping, wire)
}

fn prerequisites() -> bool {
    tests::netns::prerequisites("net::multicast_ns::fallback", Hosts::available())
}

/// PROTOCOL.md ("Multicast data"): a member whose multicast stops falls back to unicast
/// and returns when it works again; "the sequence tracker drops the duplicates of a
/// switch". A best-effort subscriber switching a dozen times may lose what was sent while
/// it had not yet noticed, but it is never handed a message twice, and what it lost is
/// counted, as its own counter check confirms. Its bridge delivers a late message
/// (`LatePolicy::Deliver`, the default): the group's and the unicast path's datagrams may
/// cross at a switch, so a message handed out of order is one the bridge counted reordered.
#[test]
fn a_best_effort_member_switching_between_group_and_unicast_gets_no_duplicate() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    let (steady, flapping, wire) = run(false, Duration::from_millis(700));
    for r in [&steady, &flapping] {
        // Counter values that did not exceed the one before: late ones the bridge counted
        // reordered (a late datagram it counts may also carry nothing out of order), never a
        // duplicate.
        assert!(r.u64("out_of_order") <= r.u64("reordered"), "{r}");
        assert_eq!(r.u64("corrupt"), 0, "{r}");
        assert_eq!(r.u64("errors"), 0, "{r}");
        // The bridge's loss count agrees with the counter values' gaps.
        assert_eq!(r.u64("lost"), r.u64("counter_lost"), "{r}");
    }
    assert_eq!(steady.u64("lost"), 0, "{steady}");
    // The premise: it was served both ways.
    assert!(
        wire.multicast_in > 100 && wire.multicast_refused > 100,
        "{wire:?}"
    );
    assert!(
        wire.unicast_in > 100,
        "it never fell back to unicast: {wire:?}"
    );
}

/// PROTOCOL.md ("Multicast data", reliable topics over a group) and README ("reliable
/// topics NAK gaps and never stall"): a reliable member whose multicast stops and resumes
/// a dozen times still gets every message, in order: its NAKs are answered (to the group
/// while the publisher believes it a member, by unicast once it fell back), and nothing is
/// left unrecovered.
#[test]
fn a_reliable_member_switching_between_group_and_unicast_gets_every_message() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    let (steady, flapping, wire) = run(true, Duration::from_millis(700));
    for r in [&steady, &flapping] {
        assert_eq!(r.u64("unrecovered"), 0, "{r}");
        assert_eq!(r.u64("out_of_order"), 0, "{r}");
        assert_eq!(r.u64("counter_lost"), 0, "{r}");
        assert_eq!(r.u64("corrupt"), 0, "{r}");
        assert_eq!(r.u64("errors"), 0, "{r}");
    }
    assert!(
        wire.multicast_in > 100 && wire.multicast_refused > 100,
        "{wire:?}"
    );
    assert!(
        wire.unicast_in > 100,
        "it never fell back to unicast: {wire:?}"
    );
}

/// PROTOCOL.md ("Discovery", "Multicast data"): "IPv6 groups work from an IPv6 or
/// dual-stack bridge, on the interface of its bound address". A link-local group (`ff02::/16`,
/// the scope of one link, as the hosts of one switch are) is an IPv6 group like any other:
/// subscribers in two namespaces must receive the data by it, not fall back to unicast.
#[test]
fn an_ipv6_link_local_group_carries_the_data() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    // About one datagram a message at 1000 a second, for the comparison of datagrams below.
    const COUNT: u64 = 3_000;
    const WANT: u64 = COUNT * 6 / 10;
    let hosts = Hosts::create(3).unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let at = |i: usize, port: u16| SocketAddr::from((hosts.addr6(i), port)).to_string();
    let (bind, publisher) = (at(0, PUB_PORT), at(0, PUB_PORT));
    let count = COUNT.to_string();
    let mut publ = spawn(
        &hosts,
        0,
        "publisher",
        &[
            "--bind",
            &bind,
            "--rate",
            "1000",
            "--count",
            &count,
            "--idle",
            "park",
            "--allow",
            "fd6c::/16",
            "--multicast",
            "[ff02::78:1]:7100",
        ],
    );
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "the publisher did not start"
    );
    let want = WANT.to_string();
    let before: Vec<_> = (0..3).map(|i| hosts.counts(i)).collect();
    let subs: Vec<Running> = (1..3)
        .map(|i| {
            let bind = at(i, SUB_PORT);
            spawn(
                &hosts,
                i,
                "subscriber",
                &[
                    "--bind",
                    &bind,
                    "--count",
                    &want,
                    "--timeout-s",
                    "40",
                    "--idle",
                    "park",
                    "--publisher",
                    &publisher,
                ],
            )
        })
        .collect();
    let results: Vec<Fields> = subs.into_iter().map(|s| result(s, "RESULT ")).collect();
    let published = result(publ, "PUBLISHED ");
    eprintln!("multicast_ns::fallback: ff02 publisher: {published}");
    for (i, r) in results.iter().enumerate() {
        let host = i + 1;
        let wire = hosts.counts(host);
        eprintln!("multicast_ns::fallback: ff02 subscriber in host {host}: {r}\n  wire: {wire:?}");
        assert!(r.u64("received") >= WANT, "host {host}: {r}");
        let multicast = wire.multicast_in - before[host].multicast_in;
        let unicast = wire.unicast_in - before[host].unicast_in;
        assert!(
            multicast > 3 * unicast,
            "host {host} was served by unicast, not by the group: {wire:?}"
        );
    }
}

/// An eavesdropper on the publisher's host (a packet socket there, which sees what
/// arrives): it captures the first `Subscribe` claiming the group (flag 0x08) that
/// `argv[3]:argv[4]` sends to `argv[1]:argv[2]`, prints `captured`, waits `argv[5]`
/// seconds, then sends that IP packet again, as it was, every 50 ms for `argv[6]` seconds.
const REPLAYER: &str = r#"
import socket, sys, time
pub_ip, pub_port, sub_ip, sub_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
wait, length = float(sys.argv[5]), float(sys.argv[6])
cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
cap.settimeout(0.2)
until = time.time() + 20
packet = None
while packet is None and time.time() < until:
try:
    p = cap.recv(65536)
except socket.timeout:
    continue
if len(p) < 28 or p[9] != 17:
    continue
ihl = (p[0] & 15) * 4
src, dst = socket.inet_ntoa(p[12:16]), socket.inet_ntoa(p[16:20])
sport, dport = int.from_bytes(p[ihl:ihl+2], 'big'), int.from_bytes(p[ihl+2:ihl+4], 'big')
body = p[ihl+8:]
if (src, sport, dst, dport) == (sub_ip, sub_port, pub_ip, pub_port) and len(body) == 72 \
        and body[4] == 0x10 and body[5] & 0x08:
    packet = p[:int.from_bytes(p[2:4], 'big')]
if packet is None:
print("nothing captured", flush=True)
sys.exit(1)
print("captured", flush=True)
time.sleep(wait)
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
n, end = 0, time.time() + length
while time.time() < end:
raw.sendto(packet, (pub_ip, 0))
n += 1
time.sleep(0.05)
print("replayed", n, flush=True)
"#;

/// SECURITY.md ("Forged multicast data"): "only an acknowledged Subscribe (its address
/// proven) counts: one forged under a subscriber's address neither silences it nor doubles
/// its data"; PROTOCOL.md: a member whose network stops multicast "falls back by itself".
/// An eavesdropper that saw the member's Subscribe claiming the group replays it, under
/// the member's address, once the member's network stops carrying multicast: the member
/// must still be served by unicast.
#[test]
#[ignore = "known limit without a key (SECURITY.md, Forged multicast data: a captured GROUP Subscribe replayed within its cookie's life silences a member that fell back; with a key it is dropped, bus-net/src/tests/multicast/forged.rs::with_a_key_replayed_subscribes_cannot_move_a_subscriber_onto_or_off_the_group)"]
fn a_replayed_group_subscribe_does_not_silence_a_member_that_fell_back() {
    if !prerequisites() {
        return;
    }
    let _slot = SLOTS.take();
    let hosts = Hosts::create(2).unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let (pub_ip, sub_ip) = (hosts.addr(0).to_string(), hosts.addr(1).to_string());
    let at = |i: usize, port: u16| SocketAddr::from((hosts.addr(i), port)).to_string();
    let (bind, publisher) = (at(0, PUB_PORT), at(0, PUB_PORT));
    let mut publ = spawn(
        &hosts,
        0,
        "publisher",
        &[
            "--bind",
            &bind,
            "--rate",
            "1000",
            "--count",
            "30000",
            "--idle",
            "park",
            "--allow",
            "10.214.0.0/16",
            "--multicast",
            DATA_GROUP,
        ],
    );
    assert!(
        publ.wait_line(Duration::from_secs(20), |l| l
            .starts_with("publisher: topic"))
            .is_some(),
        "the publisher did not start"
    );
    let mut replayer = Command::new("python3");
    let (pub_port, sub_port) = (PUB_PORT.to_string(), SUB_PORT.to_string());
    replayer.args([
        "-c", REPLAYER, &pub_ip, &pub_port, &sub_ip, &sub_port, "2.5", "2.5",
    ]);
    let mut replayer = Running::spawn("replayer@0", hosts.wrap(0, &replayer));
    let sub_bind = at(1, SUB_PORT);
    let sub = spawn(
        &hosts,
        1,
        "subscriber",
        &[
            "--bind",
            &sub_bind,
            "--count",
            "1000000",
            "--timeout-s",
            "30",
            "--idle",
            "park",
            "--publisher",
            &publisher,
        ],
    );
    let captured = replayer
        .wait_line(Duration::from_secs(20), |l| l.starts_with("captured"))
        .is_some();
    // Its network stops multicast: it falls back to unicast within a few heartbeats.
    hosts.drop_multicast(1, true);
    let unicast_over = |from: Duration, to: Duration| {
        std::thread::sleep(from);
        let a = hosts.counts(1).unicast_in;
        std::thread::sleep(to - from);
        hosts.counts(1).unicast_in - a
    };
    let fallen_back = unicast_over(Duration::from_millis(700), Duration::from_millis(2_200));
    // The replays start 2.5 s after the capture, and last 2.5 s.
    let replayed = unicast_over(Duration::from_millis(600), Duration::from_millis(2_000));
    sub.kill();
    publ.kill();
    let (_, said, _) = replayer.finish(Duration::from_secs(5));
    eprintln!(
        "multicast_ns::fallback: datagrams by unicast to the member, 1.5 s each: {fallen_back} \
         once fallen back, {replayed} while its Subscribe was replayed; the \
         eavesdropper: {said:?}"
    );
    assert!(
        captured,
        "the premise: the eavesdropper saw a Subscribe claiming the group"
    );
    assert!(
        fallen_back > 500,
        "the premise: the member fell back to unicast"
    );
    assert!(
        replayed * 2 > fallen_back,
        "the replays silenced the member: {replayed} datagrams instead of about {fallen_back}"
    );
}
