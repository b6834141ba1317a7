//! Proof of the two-host harness (`tests::netns`) with raw UDP, no llbus involved: numbered
//! datagrams from host A to host B over a shaped link, and the receiver's counts checked
//! against what the sender sent.
//!
//! The sender and receiver are this test binary itself, re-executed inside a namespace with
//! `LLBUS_NETNS_ROLE=send|recv` and run as the `netns_child_role` test (which does nothing in a
//! normal run).
//!
//! Needs root. Without root it prints a SKIPPED banner and passes, except under CI (`CI` set),
//! where it fails. Run it with
//! `sudo -E cargo test -p tests --test it netns_harness -- --nocapture`.

use std::collections::HashMap;
use std::env;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use tests::netns::{self, KillOnDrop, Netem, Side, TwoHosts};

const ROLE: &str = "LLBUS_NETNS_ROLE";
const BIND: &str = "LLBUS_NETNS_BIND";
const DEST: &str = "LLBUS_NETNS_DEST";
const COUNT: &str = "LLBUS_NETNS_COUNT";
const RATE: &str = "LLBUS_NETNS_RATE";
const PORT: u16 = 47_000;
/// Sequence number of the end-of-stream markers (sent several times; loss may eat some).
const END: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------------
// The child roles.

/// CLOCK_MONOTONIC in nanoseconds. Network namespaces share it, so a timestamp taken in one
/// namespace can be compared with a reading in the other.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn env_parse<T: std::str::FromStr>(name: &str) -> T {
    env::var(name)
        .unwrap_or_else(|_| panic!("{name} not set"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} does not parse"))
}

fn send_one(sock: &UdpSocket, buf: &[u8], dest: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sock.send_to(buf, dest) {
            Ok(_) => return,
            // A full socket or device queue: wait and retry, so that every datagram counted
            // as sent really left the sender.
            Err(e)
                if (e.kind() == io::ErrorKind::WouldBlock
                    || e.raw_os_error() == Some(libc::ENOBUFS))
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("send_to {dest}: {e}"),
        }
    }
}

fn sender() {
    let bind: SocketAddr = env_parse(BIND);
    let dest: SocketAddr = env_parse(DEST);
    let count: u64 = env_parse(COUNT);
    let rate: u64 = env_parse(RATE);
    let sock = UdpSocket::bind(bind).expect("sender bind");
    let start = Instant::now();
    let mut buf = [0u8; 16];
    for seq in 0..count {
        let due = start + Duration::from_nanos(seq * 1_000_000_000 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        buf[..8].copy_from_slice(&seq.to_le_bytes());
        buf[8..].copy_from_slice(&mono_ns().to_le_bytes());
        send_one(&sock, &buf, dest);
    }
    for _ in 0..20 {
        buf[..8].copy_from_slice(&END.to_le_bytes());
        buf[8..].copy_from_slice(&mono_ns().to_le_bytes());
        send_one(&sock, &buf, dest);
        std::thread::sleep(Duration::from_millis(2));
    }
    println!(
        "SENT count={count} secs={:.3}",
        start.elapsed().as_secs_f64()
    );
}

fn receiver() {
    let bind: SocketAddr = env_parse(BIND);
    let count: u64 = env_parse(COUNT);
    let sock = UdpSocket::bind(bind).expect("receiver bind");
    // A deep receive buffer, so that a descheduled receiver does not add loss of its own.
    let bytes: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `bytes` is a valid c_int for the duration of the call.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
    }
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("read timeout");
    println!("READY {bind}");

    let mut seen = vec![false; count as usize];
    let (mut received, mut unique, mut dups, mut reordered, mut bogus) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut highest: Option<u64> = None;
    let mut latencies_ns = Vec::with_capacity(count as usize);
    let start = Instant::now();
    let hard_deadline = start + Duration::from_secs(60);
    let mut last_packet = Instant::now();
    let mut end_seen: Option<Instant> = None;
    let mut buf = [0u8; 64];
    loop {
        let now = Instant::now();
        // Stop: a while after the first end marker (stragglers are at most the link delay
        // behind), after a long silence, or at the hard deadline. Nothing can stall it.
        if end_seen.is_some_and(|t| now - t > Duration::from_millis(500))
            || now - last_packet > Duration::from_secs(10)
            || now > hard_deadline
        {
            break;
        }
        let n = match sock.recv_from(&mut buf) {
            Ok((n, _)) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => panic!("recv_from: {e}"),
        };
        let arrived = mono_ns();
        last_packet = Instant::now();
        if n != 16 {
            bogus += 1;
            continue;
        }
        let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let sent = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
        if seq == END {
            end_seen.get_or_insert(last_packet);
            continue;
        }
        if seq >= count {
            bogus += 1;
            continue;
        }
        received += 1;
        if seen[seq as usize] {
            dups += 1;
            continue;
        }
        seen[seq as usize] = true;
        unique += 1;
        if highest.is_some_and(|h| seq < h) {
            reordered += 1;
        }
        highest = Some(highest.map_or(seq, |h| h.max(seq)));
        latencies_ns.push(arrived.saturating_sub(sent));
    }
    latencies_ns.sort_unstable();
    let pct = |p: f64| -> u64 {
        if latencies_ns.is_empty() {
            0
        } else {
            let i = ((latencies_ns.len() as f64 - 1.0) * p).round() as usize;
            latencies_ns[i] / 1000
        }
    };
    println!(
        "RESULT received={received} unique={unique} duplicates={dups} reordered={reordered} \
         missing={} bogus={bogus} end_seen={} p50_us={} p99_us={} max_us={}",
        count - unique,
        u64::from(end_seen.is_some()),
        pct(0.50),
        pct(0.99),
        pct(1.0),
    );
}

/// The child entry point: does nothing unless this binary was started as a child role.
#[test]
#[cfg_attr(miri, ignore)]
fn netns_child_role() {
    match env::var(ROLE).as_deref() {
        Ok("send") => sender(),
        Ok("recv") => receiver(),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The parent side.

/// Writes straight to the process's stderr. libtest captures `eprintln!` of passing tests (it
/// shows only with `--nocapture`); a direct write is not captured, so the SKIPPED banner and the
/// reports always reach the log.
macro_rules! loud {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn prerequisites() -> bool {
    tests::netns::prerequisites("netns_harness", TwoHosts::available())
}

/// The name libtest gives `netns_child_role`: its module path without the crate's name.
fn child_test_name() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{module}::netns_child_role")
}

/// The child command: this test binary, running only `netns_child_role`.
fn child(role: &str) -> Command {
    let exe = env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([
        child_test_name().as_str(),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role);
    cmd
}

/// The part of `line` from `tag` on. (libtest prints "test ...::netns_child_role ... " without a
/// newline, so the child's first line starts after it.)
fn tagged<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|i| &line[i..])
}

fn parse_kv(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Sends `count` datagrams at `rate`/s from A to B over a link shaped by `shape` (on A's
/// egress), and returns the receiver's counts.
fn udp_a_to_b(hosts: &TwoHosts, count: u64, rate: u64) -> HashMap<String, u64> {
    let b_addr = SocketAddr::from((hosts.addr(Side::B), PORT));
    let a_addr = SocketAddr::from((hosts.addr(Side::A), PORT));

    let mut recv_cmd = child("recv");
    recv_cmd
        .env(BIND, b_addr.to_string())
        .env(COUNT, count.to_string());
    let mut recv = KillOnDrop::new(hosts.spawn(Side::B, &recv_cmd).expect("spawn receiver"));
    let recv_lines = netns::lines(recv.child_mut().stdout.take().expect("piped stdout"));
    let ready_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = ready_deadline.saturating_duration_since(Instant::now());
        match recv_lines.recv_timeout(left) {
            Ok(l) if tagged(&l, "READY ").is_some() => break,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => panic!("receiver not ready within 30 s"),
            Err(RecvTimeoutError::Disconnected) => panic!("receiver exited before READY"),
        }
    }

    let mut send_cmd = child("send");
    send_cmd
        .env(BIND, a_addr.to_string())
        .env(DEST, b_addr.to_string())
        .env(COUNT, count.to_string())
        .env(RATE, rate.to_string());
    let send = hosts.spawn(Side::A, &send_cmd).expect("spawn sender");
    let budget = Duration::from_secs(30 + count / rate.max(1) * 3);
    let send_out = netns::wait_with_timeout(send, budget).expect("sender finishes");
    let send_stdout = String::from_utf8_lossy(&send_out.stdout);
    assert!(
        send_out.status.success(),
        "sender failed: {}\n{send_stdout}",
        send_out.status
    );
    let sent_line = send_stdout
        .lines()
        .find_map(|l| tagged(l, "SENT "))
        .unwrap_or_else(|| panic!("no SENT line from the sender:\n{send_stdout}"));
    assert_eq!(parse_kv(sent_line)["count"], count, "{sent_line}");

    let result_deadline = Instant::now() + Duration::from_secs(90);
    let result = loop {
        let left = result_deadline.saturating_duration_since(Instant::now());
        match recv_lines.recv_timeout(left) {
            Ok(l) => {
                if let Some(r) = tagged(&l, "RESULT ") {
                    break r.to_string();
                }
            }
            Err(e) => panic!("no RESULT from the receiver: {e:?}"),
        }
    };
    let recv_out = netns::wait_with_timeout(recv.into_inner(), Duration::from_secs(30))
        .expect("receiver exits");
    assert!(
        recv_out.status.success(),
        "receiver failed: {}",
        recv_out.status
    );
    let r = parse_kv(&result);
    for key in [
        "received",
        "unique",
        "duplicates",
        "reordered",
        "missing",
        "p50_us",
    ] {
        assert!(r.contains_key(key), "{key} missing from {result}");
    }
    r
}

fn report(name: &str, hosts: &TwoHosts, count: u64, r: &HashMap<String, u64>) {
    loud!(
        "netns report [{name}] link={} sent={count} received={} unique={} delivered={:.2}% \
         duplicates={} reordered={} missing={} one-way latency p50={}us p99={}us max={}us",
        hosts.link(),
        r["received"],
        r["unique"],
        100.0 * r["unique"] as f64 / count as f64,
        r["duplicates"],
        r["reordered"],
        r["missing"],
        r["p50_us"],
        r["p99_us"],
        r["max_us"],
    );
}

/// The counts add up whatever the shaping: every sent number is either received or missing,
/// and every datagram received is a first copy or a duplicate.
fn check_consistent(count: u64, r: &HashMap<String, u64>) {
    assert_eq!(r["unique"] + r["missing"], count, "{r:?}");
    assert_eq!(r["received"], r["unique"] + r["duplicates"], "{r:?}");
    assert!(r["unique"] <= count, "{r:?}");
    assert_eq!(r["bogus"], 0, "datagrams that the sender never sent: {r:?}");
    assert_eq!(r["end_seen"], 1, "no end marker arrived: {r:?}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn udp_under_loss_duplication_reorder_and_delay() {
    if env::var_os(ROLE).is_some() || !prerequisites() {
        return;
    }
    // Hundreds of losses and of duplicates expected: the loss band is many standard deviations
    // wide, and duplicates and reordering are certain.
    const N: u64 = 5_000;
    let hosts = TwoHosts::create().unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    hosts
        .shape(
            Side::A,
            Netem {
                loss_pct: 5.0,
                duplicate_pct: 1.0,
                reorder_pct: 10.0,
                delay_ms: 1,
                ..Netem::default()
            },
        )
        .unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let r = udp_a_to_b(&hosts, N, 10_000);
    report("loss 5% dup 1% reorder 10% delay 1ms", &hosts, N, &r);
    check_consistent(N, &r);
    let loss_pct = 100.0 * r["missing"] as f64 / N as f64;
    assert!(
        (2.0..=10.0).contains(&loss_pct),
        "loss {loss_pct:.2}% outside 2..10% for netem loss 5%: {r:?}"
    );
    assert!(
        r["duplicates"] > 0,
        "no duplicates under duplicate 1%: {r:?}"
    );
    assert!(
        r["reordered"] > 0,
        "nothing reordered under reorder 10%: {r:?}"
    );
    // 90% of the packets wait the 1 ms delay, so the median must show it.
    assert!(
        r["p50_us"] >= 900,
        "median one-way latency {}us under a 1 ms delay: is the link shaped? {r:?}",
        r["p50_us"]
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn udp_over_a_clean_link() {
    if env::var_os(ROLE).is_some() || !prerequisites() {
        return;
    }
    const N: u64 = 2_000;
    let hosts = TwoHosts::create().unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let r = udp_a_to_b(&hosts, N, 5_000);
    report("clean", &hosts, N, &r);
    check_consistent(N, &r);
    assert_eq!(r["duplicates"], 0, "duplicates on a clean link: {r:?}");
    assert!(
        r["missing"] <= N / 200,
        "more than 0.5% lost on a clean link: {r:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn udp_under_heavy_loss_and_jittered_delay() {
    if env::var_os(ROLE).is_some() || !prerequisites() {
        return;
    }
    const N: u64 = 5_000;
    let hosts = TwoHosts::create().unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    hosts
        .shape(
            Side::A,
            Netem {
                loss_pct: 20.0,
                delay_ms: 2,
                jitter_ms: 1,
                ..Netem::default()
            },
        )
        .unwrap_or_else(|e| panic!("\n\n*** {e} ***\n"));
    let r = udp_a_to_b(&hosts, N, 10_000);
    report("loss 20% delay 2ms +-1ms", &hosts, N, &r);
    check_consistent(N, &r);
    let loss_pct = 100.0 * r["missing"] as f64 / N as f64;
    assert!(
        (15.0..=26.0).contains(&loss_pct),
        "loss {loss_pct:.2}% outside 15..26% for netem loss 20%: {r:?}"
    );
    assert_eq!(r["duplicates"], 0, "duplicates without duplication: {r:?}");
    assert!(
        r["p50_us"] >= 1_500,
        "median one-way latency {}us under a 2 +-1 ms delay: is the link shaped? {r:?}",
        r["p50_us"]
    );
}
