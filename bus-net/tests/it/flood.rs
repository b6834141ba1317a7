//! A flood of bad datagrams at a running publisher and subscriber while real traffic flows:
//! real messages still arrive, every bad datagram is counted under a reason (or, if the socket
//! buffer overflowed, by the kernel's drop counter for that socket), nothing panics, and
//! resident memory stays flat.
//!
//! The flood size is `LLBUS_FLOOD` datagrams (default 100,000; CI uses the default). Resident
//! memory may grow by 4 MiB at most over the flood: at the default size a leak of 42 bytes a
//! datagram (less than one small allocation each) fails it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llbus::{Bus, Message, Report, Setup};
use llbus_net::{BatchEncoder, Bridge, Control, DataMeta, SendBatch, SocketConfig, UdpEndpoint};
use tests::metric;

use crate::fixtures::{Feed, Sink, Tick};

/// Every bad datagram the bridge counted: the sum of its `drop.*` metrics.
fn dropped(r: &Report, actor: &str) -> u64 {
    r.actor(actor).map_or(0, |a| {
        a.metrics
            .iter()
            .filter(|(n, _)| n.starts_with("drop."))
            .map(|(_, v)| v)
            .sum()
    })
}

/// The kernel's count of datagrams dropped on the UDP socket bound to `port` (receive buffer
/// full), from /proc/net/udp's last column.
fn kernel_drops(port: u16) -> u64 {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local = cols.get(1)?;
            if local.ends_with(&want) {
                cols.last()?.parse::<u64>().ok()
            } else {
                None
            }
        })
        .sum()
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

/// One bad datagram of kind `k` into `buf`; returns its length. Every kind is certain to be
/// rejected: wrong magic or version, an impossible length, a reserved kind, a truncated header,
/// a frame that lies about its payload length, a data frame of a topic nobody imports, a data
/// frame of the imported topic from a sender that is not its publisher, or a Subscribe with a
/// replayed cookie (one issued to another address).
fn bad_datagram(
    k: u64,
    rng: &mut fastrand::Rng,
    valid: &[u8],
    replayed: &[u8],
    buf: &mut [u8; 2048],
) -> usize {
    if k % 9 == 8 {
        buf[..replayed.len()].copy_from_slice(replayed);
        return replayed.len();
    }
    match k % 9 {
        // Random bytes of a random length (the magic is "LLU": a random prefix is not it).
        0 => {
            let len = 1 + rng.u64(..1400) as usize;
            for b in &mut buf[..len] {
                *b = rng.u64(..) as u8;
            }
            if buf[..3] == *b"LLU" {
                buf[0] = 0;
            }
            len
        }
        // A valid frame cut short inside its header.
        1 => {
            let len = 1 + rng.u64(..47) as usize;
            buf[..len].copy_from_slice(&valid[..len]);
            len
        }
        // A valid frame with its magic or version flipped.
        2 => {
            buf[..valid.len()].copy_from_slice(valid);
            let at = rng.u64(..4) as usize;
            buf[at] ^= 1 << rng.u64(..8);
            valid.len()
        }
        // A valid frame whose payload length lies (longer than the datagram).
        3 => {
            buf[..valid.len()].copy_from_slice(valid);
            let lie = (valid.len() as u16).wrapping_add(1 + rng.u64(..60000) as u16);
            buf[6..8].copy_from_slice(&lie.to_le_bytes());
            valid.len()
        }
        // A valid frame with a reserved or unknown kind.
        4 => {
            buf[..valid.len()].copy_from_slice(valid);
            buf[4] = 0x20 + rng.u64(..0xc0) as u8;
            valid.len()
        }
        // A valid frame cut anywhere in its payload.
        5 => {
            let len = rng.usize(48..valid.len());
            buf[..len].copy_from_slice(&valid[..len]);
            len
        }
        // A data frame of an unknown topic.
        6 => {
            buf[..valid.len()].copy_from_slice(valid);
            let topic = rng.u64(..) | 1;
            buf[8..16].copy_from_slice(&topic.to_le_bytes());
            valid.len()
        }
        // The imported topic, but not from its publisher: a spoof.
        _ => {
            buf[..valid.len()].copy_from_slice(valid);
            valid.len()
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_flood_of_bad_datagrams_is_counted_and_real_traffic_still_flows() {
    let _cpu = crate::fixtures::cpu_hungry();
    let flood: u64 = std::env::var("LLBUS_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let publisher = Bridge::bind(loopback).unwrap().name("flood-pub");
    let subscriber = Bridge::bind(loopback).unwrap().name("flood-sub");
    let (pub_addr, sub_addr) = (publisher.local_addr(), subscriber.local_addr());
    let publisher = publisher.export::<Tick>();
    let subscriber = subscriber.import::<Tick>(pub_addr);

    let mut a = Bus::builder();
    a.actor("feed", |s: &mut Setup<'_>| Feed {
        out: s.output(),
        n: 0,
    })
    .tick_every(Duration::from_micros(500))
    .publishes::<Tick>();
    a.add(publisher);
    let got = Arc::new(AtomicU64::new(0));
    let mut b = Bus::builder();
    let g = Arc::clone(&got);
    b.actor("sink", move |_: &mut Setup<'_>| Sink {
        got: Arc::clone(&g),
    })
    .subscribes::<Tick>();
    b.add(subscriber);
    let running_a = a.start().unwrap();
    let running_b = b.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "real traffic never started");
        std::thread::sleep(Duration::from_millis(5));
    }

    // A valid data frame of the imported topic, to mutate.
    let mut valid = [0u8; 256];
    let valid_len = {
        let mut enc = BatchEncoder::new(&mut valid);
        let meta = DataMeta {
            topic_id: Tick::TOPIC_ID,
            fingerprint: Tick::FINGERPRINT,
            session: 42,
            seq: 1,
            timestamp_ns: 0,
        };
        enc.push_data(meta, &Tick { n: 7 }).unwrap();
        enc.push_control(&Control::Unsubscribe {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            nonce: 4,
            cookie: None,
        })
        .unwrap();
        enc.len()
    };
    let valid = &valid[..valid_len];

    // A cookie really issued by the publisher, to another address (a victim's), replayed from
    // the attacker's socket: it must not verify there.
    let replayed = {
        let victim = std::net::UdpSocket::bind(loopback).unwrap();
        victim
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let subscribe = |cookie| {
            let mut buf = [0u8; 256];
            let mut enc = BatchEncoder::new(&mut buf);
            enc.push_control(&Control::Subscribe {
                topic_id: Tick::TOPIC_ID,
                fingerprint: Tick::FINGERPRINT,
                session: 9,
                nonce: 10,
                cookie,
            })
            .unwrap();
            enc.as_bytes().to_vec()
        };
        victim.send_to(&subscribe(None), pub_addr).unwrap();
        let mut reply = [0u8; 256];
        let n = victim
            .recv(&mut reply)
            .expect("a cookie challenge for the victim");
        let frame = llbus_net::parse_datagram(&reply[..n], 1472)
            .unwrap()
            .next()
            .unwrap();
        let cookie = match Control::from_frame(&frame).unwrap() {
            Control::CookieChallenge { cookie, .. } => cookie,
            other => panic!("expected a challenge, got {other:?}"),
        };
        subscribe(Some(cookie))
    };

    let before_rss = resident_kib();
    let report_a0 = running_a.report();
    let report_b0 = running_b.report();
    let drops0 = (kernel_drops(pub_addr.port()), kernel_drops(sub_addr.port()));
    let got_before = got.load(Ordering::Relaxed);

    // The attacker is another host (each IP has its own control rate limit, renewals
    // included: on the subscriber's own address it would starve its renewals too).
    let other_host: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let mut attacker = UdpEndpoint::bind(other_host, &SocketConfig::default()).unwrap();
    let mut batch = SendBatch::new(64);
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut bufs = vec![[0u8; 2048]; 64];
    let mut lens = [0usize; 64];
    let mut sent = [0u64; 2];
    let started = Instant::now();
    let mut i = 0;
    while i < flood {
        let n = 64.min(flood - i) as usize;
        for j in 0..n {
            lens[j] = bad_datagram(i + j as u64, &mut rng, valid, &replayed, &mut bufs[j]);
        }
        // Alternate targets batch by batch: the publisher and the subscriber.
        let target = if (i / 64) % 2 == 0 {
            pub_addr
        } else {
            sub_addr
        };
        let datagrams = (0..n).map(|j| (&bufs[j][..lens[j]], target));
        let took = attacker.send_batch(&mut batch, datagrams).unwrap();
        sent[usize::from(target == sub_addr)] += took as u64;
        i += n as u64;
        if (i / 64) % 16 == 0 {
            std::thread::yield_now(); // let the bridges breathe on two cores
        }
    }
    let flood_secs = started.elapsed().as_secs_f64();
    assert_eq!(
        sent[0] + sent[1],
        flood,
        "the kernel refused some of the flood's sends"
    );

    // Wait until both bridges have accounted for every datagram: counted, or dropped by the
    // kernel for a full buffer.
    let accounted = |r_a: &Report, r_b: &Report| {
        let a = dropped(r_a, "flood-pub") - dropped(&report_a0, "flood-pub")
            + kernel_drops(pub_addr.port())
            - drops0.0;
        let b = dropped(r_b, "flood-sub") - dropped(&report_b0, "flood-sub")
            + kernel_drops(sub_addr.port())
            - drops0.1;
        (a, b)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (a, b) = accounted(&running_a.report(), &running_b.report());
        // At least: a few real datagrams may also have been dropped by the kernel meanwhile.
        if a >= sent[0] && b >= sent[1] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every bad datagram was accounted for: publisher {a} of {}, subscriber {b} of {}",
            sent[0],
            sent[1]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Real traffic still flows after the flood.
    let got_after_flood = got.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.load(Ordering::Relaxed) < got_after_flood + 100 {
        assert!(
            Instant::now() < deadline,
            "real traffic stopped after the flood"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after_rss = resident_kib();

    running_a.stop();
    running_b.stop();
    let report_a = running_a.join().expect("the publisher survives the flood");
    let report_b = running_b.join().expect("the subscriber survives the flood");
    let (kernel_a, kernel_b) = (
        kernel_drops(pub_addr.port()) - drops0.0,
        kernel_drops(sub_addr.port()) - drops0.1,
    );
    println!(
        "flood: {flood} bad datagrams in {flood_secs:.2} s; publisher counted {} (+{kernel_a} dropped by the kernel), subscriber counted {} (+{kernel_b}); real messages {} -> {}; rss {before_rss} -> {after_rss} KiB",
        dropped(&report_a, "flood-pub"),
        dropped(&report_b, "flood-sub"),
        got_before,
        got.load(Ordering::Relaxed),
    );
    for (name, v) in report_b.actor("flood-sub").unwrap().metrics.iter() {
        if name.starts_with("drop.") && *v > 0 {
            println!("  subscriber {name} = {v}");
        }
    }
    // The bridges never count more bad datagrams than there were.
    assert!(dropped(&report_a, "flood-pub") - dropped(&report_a0, "flood-pub") <= sent[0]);
    assert!(dropped(&report_b, "flood-sub") - dropped(&report_b0, "flood-sub") <= sent[1]);
    // The spoofed data frames at the subscriber are refused as coming from a stranger.
    assert!(metric(&report_b, "flood-sub", "drop.unknown_sender") > 0);
    assert!(metric(&report_a, "flood-pub", "drop.bad_magic") > 0);
    // Replayed cookies never admit the attacker: counted, and the publisher's only subscriber
    // is still the real one.
    assert!(metric(&report_a, "flood-pub", "drop.bad_cookie") > 0);
    assert_eq!(metric(&report_a, "flood-pub", "subscribers.net.tick"), 1);
    assert!(
        after_rss < before_rss + 4 * 1024,
        "resident memory grew from {before_rss} KiB to {after_rss} KiB"
    );
}
