//! "Handling datagrams allocates nothing": a warm endpoint's handling of genuine data,
//! handshakes, renewals, NAKs, forgeries and garbage, a warm second of its life, and an allowed
//! host's subscribe/unsubscribe churn allocate nothing. Counted by this build's
//! `#[global_allocator]`, which forwards to the system allocator and counts the calls made on
//! the thread that asks, so tests of other threads running beside it do not disturb the count.
//! Nothing else in the library's test build installs a global allocator.

use super::pair::{
    addr, controls, export, forged_data, forged_heartbeat, handshake, import, nak_datagram, pair,
    psk_config, pub_addr, publisher, sub_addr, subscribe, FP, PUB, PUB_SESSION, SUB, TOPIC,
};
use super::world::{Counted, Got, Outbox, World, MAX, MS};
use crate::{parse_datagram, BatchEncoder, BridgeConfig, Control, Cookie, Endpoint};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;

struct Counting;

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

fn note_alloc() {
    let _ = COUNT_HERE.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
pub(crate) fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|n| n.set(0));
    COUNT_HERE.with(|on| on.set(true));
    f();
    COUNT_HERE.with(|on| on.set(false));
    ALLOCS.with(|n| n.get())
}

/// "Handling datagrams allocates nothing": genuine data, handshakes, renewals, NAKs answered
/// with retransmissions, forgeries and garbage, once the endpoints are warm.
#[test]
fn handling_datagrams_allocates_nothing() {
    let config = BridgeConfig::default();
    let mut w = pair(&config, export(true, 0), import(true));
    let mut none = None;
    let attacker = addr(2, 9000);
    let l =
        handshake(&mut w.hosts[PUB].ep, attacker, TOPIC, 7, w.now, &mut none).expect("admitted");
    let mut net = Outbox::new();
    let mut data = Vec::new();
    for n in 1..=50u64 {
        let mut b = w.hosts[PUB]
            .ep
            .export(0, net.from(pub_addr()))
            .expect("export");
        b.push(&(n, vec![0u8; 1000]));
        drop(b);
        data.extend(
            net.drain()
                .into_iter()
                .filter(|(_, t, _)| *t == sub_addr())
                .map(|(_, _, d)| d),
        );
    }
    let hostile = [
        controls(&[subscribe(TOPIC, 7, 5, None)]),
        controls(&[subscribe(TOPIC, 7, 6, Some(l.cookie))]),
        controls(&[subscribe(TOPIC, 7, 6, Some(Cookie([3; 16])))]),
        nak_datagram(&[TOPIC], l.cookie, 7, 9),
        forged_data(PUB_SESSION, 1 << 40, Some(l.token)),
        forged_heartbeat(PUB_SESSION, 1 << 40, None),
        vec![0xff; 300],
        Vec::new(),
    ];
    // Warm: every path once.
    let mut got = Counted(0);
    for d in &hostile {
        w.hosts[PUB]
            .ep
            .handle(d, attacker, w.now, &mut net, &mut got);
        w.hosts[SUB]
            .ep
            .handle(d, pub_addr(), w.now, &mut net, &mut got);
        net.clear();
    }
    let now = w.now;
    let n = allocations_in(|| {
        for (i, d) in data.iter().enumerate() {
            // Every other one, so the receiver sees gaps, reorders and NAKs.
            if i % 3 != 1 {
                w.hosts[SUB]
                    .ep
                    .handle(d, pub_addr(), now, &mut net, &mut got);
            }
            net.clear();
        }
        for d in &hostile {
            w.hosts[PUB].ep.handle(d, attacker, now, &mut net, &mut got);
            w.hosts[SUB]
                .ep
                .handle(d, pub_addr(), now, &mut net, &mut got);
            net.clear();
        }
    });
    assert!(got.0 > 0);
    assert_eq!(n, 0, "{n} allocations handling datagrams");
}

/// The crate's contract: encoding a batch, renewing and expiring subscribers, sealing and
/// opening allocate nothing. Once warm, a second of a bridge's life driven through the
/// endpoint (exports pushed, datagrams delivered, heartbeats, renewals, NAK timers, with and
/// without a key) allocates nothing.
#[test]
fn a_warm_endpoints_second_allocates_nothing() {
    for config in [BridgeConfig::default(), psk_config()] {
        let key = config.psk.is_some();
        let mut w = pair(&config, export(true, 0), import(true));
        let mut got = Counted(0);
        let mut queue: Vec<(SocketAddr, SocketAddr, Vec<u8>)> = (0..256)
            .map(|_| (pub_addr(), pub_addr(), Vec::with_capacity(MAX + 64)))
            .collect();
        // Driven here rather than on the world's link, whose queue allocates.
        let mut net = Outbox::new();
        let mut run = |w: &mut World, got: &mut Counted, from: u64, to: u64| {
            for n in from..to {
                let now = w.now + n * MS;
                let mut b = w.hosts[PUB]
                    .ep
                    .export(0, net.from(pub_addr()))
                    .expect("export");
                b.push(&(n, [7u8; 32]));
                drop(b);
                w.hosts[PUB].ep.on_timer(now, net.from(pub_addr()), got);
                w.hosts[SUB].ep.on_timer(now, net.from(sub_addr()), got);
                // Deliver what was sent, dropping every seventh datagram to make NAKs.
                for round in 0..4 {
                    let len = net.len();
                    for i in 0..len.min(queue.len()) {
                        let (f, t, d) = &net.sent()[i];
                        queue[i].0 = *f;
                        queue[i].1 = *t;
                        queue[i].2.clear();
                        queue[i].2.extend_from_slice(d);
                    }
                    net.clear();
                    for (i, (f, t, d)) in queue.iter().take(len).enumerate() {
                        if round == 0 && (n as usize + i) % 7 == 0 {
                            continue;
                        }
                        if *t == pub_addr() {
                            w.hosts[PUB]
                                .ep
                                .handle(d, *f, now, net.from(pub_addr()), got);
                        } else if *t == sub_addr() {
                            w.hosts[SUB]
                                .ep
                                .handle(d, *f, now, net.from(sub_addr()), got);
                        }
                    }
                }
                net.clear();
            }
        };
        run(&mut w, &mut got, 1, 1500);
        let before = got.0;
        let n = allocations_in(|| run(&mut w, &mut got, 1500, 2500));
        assert!(
            got.0 > before + 500,
            "key {key}: delivered {}",
            got.0 - before
        );
        assert_eq!(n, 0, "key {key}: {n} allocations in a warm second");
    }
}

/// The first cookie or acknowledgement in what `net` holds (parsed in place: no allocation).
fn first_answer(net: &Outbox) -> Option<Control> {
    let (_, _, d) = net.sent().first()?;
    let mut frames = parse_datagram(d, MAX + 64).ok()?;
    frames.next().and_then(|f| Control::from_frame(&f).ok())
}

/// `Endpoint::new`: "handling datagrams allocates nothing". An allowed host that subscribes
/// and unsubscribes again and again (within the rate limit) makes a `SubscribersChanged`
/// event each time; a driver that does not poll events (nothing says it must) sees `handle`
/// allocate as the event queue grows past its capacity, and the queue grows without bound
/// at the remote host's pace.
#[test]
fn churn_of_an_allowed_host_allocates_nothing_in_handle() {
    let config = BridgeConfig::default();
    let mut publ = publisher(&config, vec![export(false, 0)]);
    let src = addr(2, 9000);
    let mut net = Outbox::new();
    let mut got = Got::default();
    let mut now = MS;
    let mut cycle = |publ: &mut Endpoint, net: &mut Outbox, now: u64, n: u64| -> bool {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&subscribe(TOPIC, n, 2 * n, None));
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        let Some(Control::CookieChallenge { cookie, .. }) = first_answer(net) else {
            return false;
        };
        net.clear();
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&subscribe(TOPIC, n, 2 * n + 1, Some(cookie)));
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        let Some(Control::SubscribeAck { cookie, .. }) = first_answer(net) else {
            return false;
        };
        net.clear();
        let mut enc = BatchEncoder::new(&mut buf[..]);
        let _ = enc.push_control(&Control::Unsubscribe {
            topic_id: TOPIC,
            fingerprint: FP,
            session: n,
            nonce: 0,
            cookie: Some(cookie),
        });
        publ.handle(enc.as_bytes(), src, now, net, &mut got);
        net.clear();
        true
    };
    for n in 0..4 {
        now += 200 * MS;
        assert!(cycle(&mut publ, &mut net, now, n), "warm-up cycle {n}");
    }
    let mut ok = 0;
    let allocs = allocations_in(|| {
        for n in 4..400 {
            now += 200 * MS;
            if cycle(&mut publ, &mut net, now, n) {
                ok += 1;
            }
        }
    });
    assert!(ok > 300, "only {ok} cycles went through");
    let mut queued = 0;
    while publ.poll_event().is_some() {
        queued += 1;
    }
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in handle; {queued} events queued"
    );
}

/// "A call allocates nothing": once warm, a call of an imported service, its request handled
/// by the server, the answer and the reply handled by the caller allocate nothing on either
/// side.
#[test]
fn a_call_across_hosts_allocates_nothing() {
    use super::services::{round_trips, warm_pair, Tally};
    let mut w = warm_pair();
    let mut nets = [Outbox::new(), Outbox::new()];
    let mut tally = Tally::default();
    round_trips(&mut w, 50, &mut nets, &mut tally);
    let n = allocations_in(|| round_trips(&mut w, 1000, &mut nets, &mut tally));
    assert_eq!((tally.requests, tally.ok), (1050, 1050));
    assert_eq!(n, 0, "{n} allocations in 1000 calls");
}
