//! Services across hosts, endpoint to endpoint: a caller ([`CALLER`]) calls a service its
//! server ([`SERVER`]) serves; each call ends exactly once (its reply, the server's error, or
//! its deadline), through loss and duplication both ways, and the application behind the
//! server sees each call once. Attacks from an allowed host beside them: requests without a
//! handshake, forged replies, and a request flood against the per-host reply budget.

use std::net::SocketAddr;

use super::pair::{addr, handshake_as, Learned};
use super::world::{Faults, Outbox, World, MS, SEC};
use crate::{
    encode_reply, encode_request, BridgeConfig, CallMeta, CallStatus, Endpoint, Kind,
    ServiceImportSpec, ServiceSpec, Sink, HEADER_LEN, REQUEST_FIXED, TOKEN_LEN,
};

pub(crate) const SERVICE: u64 = 0x5e7c_0001;
/// `Request<Req>`'s and `Reply<Rep>`'s fingerprints.
pub(crate) const REQ_FP: u64 = 0xf00d_1001;
pub(crate) const REP_FP: u64 = 0xf00d_1002;
const SERVER_SESSION: u64 = 0x1111_0000_0000_0001;
const CALLER_SESSION: u64 = 0x2222_0000_0000_0002;

pub(crate) const SERVER: usize = 0;
pub(crate) const CALLER: usize = 1;

pub(crate) fn server_addr() -> SocketAddr {
    addr(1, 7100)
}

pub(crate) fn caller_addr() -> SocketAddr {
    addr(1, 7101)
}

pub(crate) fn served() -> ServiceSpec {
    ServiceSpec {
        service: "calc.add".into(),
        topic_id: SERVICE,
        request_fingerprint: REQ_FP,
        reply_fingerprint: REP_FP,
        shape: None,
        allow: None,
    }
}

pub(crate) fn imported(server: SocketAddr) -> ServiceImportSpec {
    ServiceImportSpec {
        service: "calc.add".into(),
        topic_id: SERVICE,
        request_fingerprint: REQ_FP,
        reply_fingerprint: REP_FP,
        server,
    }
}

pub(crate) fn server(config: &BridgeConfig) -> Endpoint {
    Endpoint::new(
        config,
        super::world::MAX,
        SERVER_SESSION,
        [3; 32],
        vec![],
        vec![],
    )
    .with_services(vec![served()], vec![])
}

pub(crate) fn caller(config: &BridgeConfig, server: SocketAddr) -> Endpoint {
    Endpoint::new(
        config,
        super::world::MAX,
        CALLER_SESSION,
        [5; 32],
        vec![],
        vec![],
    )
    .with_services(vec![], vec![imported(server)])
}

/// A server and a caller on a world with `faults`, the caller's subscription to the service
/// established.
fn pair(config: &BridgeConfig, faults: Faults, seed: u64) -> World {
    let mut w = World::new(seed);
    w.now = MS;
    w.add(server_addr(), server(config));
    w.add(caller_addr(), caller(config, server_addr()));
    for _ in 0..3000 {
        w.step();
        if matches!(
            w.hosts[CALLER].ep.import_state(0),
            Some(crate::ImportState::Established { .. })
        ) {
            w.faults = faults;
            return w;
        }
    }
    panic!("the caller's subscription to the service was not established");
}

/// Calls the service from the caller with `n`, key `key`, `timeout` from now.
fn call(w: &mut World, key: u64, n: u64, timeout: u64) -> Result<(), CallStatus> {
    w.act(CALLER, |ep, wire, now| {
        ep.call(0, key, &n, now + timeout, now, wire)
    })
}

/// The server's application: answers every request waiting with `answer(n)`, once; returns
/// the requests' `n`s.
fn serve(w: &mut World, answer: impl Fn(u64) -> Result<u64, CallStatus>) -> Vec<u64> {
    let requests = std::mem::take(&mut w.hosts[SERVER].got.1.requests);
    let mut seen = Vec::new();
    for (service, key, _budget, body) in requests {
        assert_eq!(service, 0);
        let n: u64 = crate::decode_payload(&body).expect("a request decodes");
        seen.push(n);
        let result = answer(n);
        w.act(SERVER, |ep, wire, now| match &result {
            Ok(v) => ep.answer(key, Ok(v), now, wire),
            Err(status) => ep.answer::<u64>(key, Err(*status), now, wire),
        });
    }
    seen
}

/// The ends of the caller's calls: `(key, reply or status)`.
fn ends(w: &World) -> Vec<(u64, Result<u64, CallStatus>)> {
    ends_of(w, CALLER)
}

/// The ends of host `i`'s calls.
fn ends_of(w: &World, i: usize) -> Vec<(u64, Result<u64, CallStatus>)> {
    (w.hosts[i].got.1.ends.iter())
        .map(|(_, key, r)| {
            let r = match r {
                Ok(body) => Ok(crate::decode_payload::<u64>(body).expect("a reply decodes")),
                Err(status) => Err(*status),
            };
            (*key, r)
        })
        .collect()
}

fn lossless() -> Faults {
    Faults::default()
}

#[test]
fn a_call_gets_its_reply_and_the_servers_errors_end_it() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 1);
    call(&mut w, 10, 41, SEC).expect("called");
    call(&mut w, 11, 7, SEC).expect("called");
    w.deliver();
    let seen = serve(&mut w, |n| match n {
        7 => Err(CallStatus::ServerPanicked),
        n => Ok(n + 1),
    });
    assert_eq!(seen, [41, 7]);
    w.deliver();
    assert_eq!(
        ends(&w),
        [(10, Ok(42)), (11, Err(CallStatus::ServerPanicked))]
    );
    let m = &w.hosts[CALLER].ep.metrics().service;
    assert_eq!((m.calls.get(), m.timeouts.get(), m.late.get()), (2, 0, 0));
    let m = &w.hosts[SERVER].ep.metrics().service;
    assert_eq!(
        (m.requests.get(), m.replies.get(), m.refused.get()),
        (2, 2, 0)
    );
    // Nothing more comes, however long the world runs.
    w.run(2000);
    assert_eq!(ends(&w).len(), 2);
}

#[test]
fn a_call_sealed_with_a_key_gets_its_reply_and_a_keyless_forger_is_dropped() {
    let config = super::pair::psk_config();
    let mut w = pair(&config, lossless(), 10);
    w.capture = Some(server_addr());
    call(&mut w, 1, 41, SEC).expect("called");
    w.deliver();
    let sealed = captured_requests(&w).pop().expect("a request went out");
    assert_ne!(sealed[5] & crate::Flags::MAC, 0, "the request is sealed");
    serve(&mut w, |n| Ok(n + 1));
    w.deliver();
    assert_eq!(ends(&w), [(1, Ok(42))]);
    // Replayed, the sealed request is dropped before it reaches the services.
    w.inject(caller_addr(), server_addr(), sealed);
    w.deliver();
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(
        w.hosts[SERVER]
            .ep
            .metrics()
            .dropped(crate::DropReason::Replayed),
        1
    );
    // Unsealed, a request (even with a good guess at a token) is not even parsed.
    w.handle(
        SERVER,
        &forged_request(CALLER_SESSION, 2, Some(1)),
        caller_addr(),
    );
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(
        w.hosts[SERVER]
            .ep
            .metrics()
            .dropped(crate::DropReason::BadMac),
        1
    );
}

#[test]
fn a_request_larger_than_a_datagram_is_refused_at_once() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 11);
    let big = vec![7u8; 2000];
    let refused = w.act(CALLER, |ep, wire, now| {
        ep.call(0, 1, &big, now + SEC, now, wire)
    });
    assert_eq!(refused, Err(CallStatus::TooLarge));
    assert!(
        w.hosts[CALLER].got.1.ends.is_empty(),
        "a call refused never ends"
    );
    // What just fits goes: a datagram less the header, the fixed part, the token and the
    // vector's length prefix.
    let fits = vec![7u8; super::world::MAX - HEADER_LEN - REQUEST_FIXED - TOKEN_LEN - 8];
    w.act(CALLER, |ep, wire, now| {
        ep.call(0, 2, &fits, now + SEC, now, wire)
    })
    .expect("fits");
    w.deliver();
    assert_eq!(w.hosts[SERVER].got.1.requests.len(), 1);
}

#[test]
fn a_call_with_no_server_times_out_once_at_its_deadline() {
    let config = BridgeConfig::default();
    let mut w = World::new(2);
    w.now = MS;
    w.add(caller_addr(), caller(&config, addr(1, 7999)));
    w.act(0, |ep, wire, now| {
        ep.call(0, 1, &5u64, now + 300 * MS, now, wire)
    })
    .expect("called: sent once established");
    w.run(299);
    assert!(ends_of(&w, 0).is_empty(), "ended before its deadline");
    w.run(2);
    assert_eq!(ends_of(&w, 0), [(1, Err(CallStatus::Timeout))]);
    w.run(1000);
    assert_eq!(ends_of(&w, 0).len(), 1);
    assert_eq!(w.hosts[0].ep.metrics().service.timeouts.get(), 1);
}

#[test]
fn a_server_that_never_answers_makes_the_call_time_out_and_its_late_reply_is_dropped() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 3);
    call(&mut w, 1, 5, 100 * MS).expect("called");
    w.run(50);
    let requests = std::mem::take(&mut w.hosts[SERVER].got.1.requests);
    assert_eq!(requests.len(), 1, "resends reach the application once");
    w.run(51);
    assert_eq!(ends(&w), [(1, Err(CallStatus::Timeout))]);
    // The answer after the caller's deadline: sent (the server does not know), dropped late.
    let key = requests[0].1;
    w.act(SERVER, |ep, wire, now| ep.answer(key, Ok(&6u64), now, wire));
    w.deliver();
    assert_eq!(ends(&w).len(), 1, "a call ends once");
    assert_eq!(w.hosts[CALLER].ep.metrics().service.late.get(), 1);
}

#[test]
fn every_call_ends_once_over_loss_and_duplication_both_ways() {
    let faults = Faults {
        loss: 200,
        dup: 50,
        max_delay: 3,
        ..Faults::default()
    };
    let mut w = pair(&BridgeConfig::default(), faults, 4);
    let calls = 300u64;
    let mut seen = Vec::new();
    // A call every 4 ms: the calls answered within a reply's resends (10 + 20 + ... +
    // 160 ms) stay within the cache kept per caller (64).
    for key in 0..calls {
        call(&mut w, key, key, 2 * SEC).expect("called");
        for _ in 0..4 {
            w.step();
            seen.extend(serve(&mut w, |n| Ok(n * 2)));
        }
    }
    for _ in 0..2500 {
        w.step();
        seen.extend(serve(&mut w, |n| Ok(n * 2)));
    }
    let ends = ends(&w);
    let mut keys: Vec<u64> = ends.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        (0..calls).collect::<Vec<_>>(),
        "each call ends exactly once"
    );
    for (key, r) in &ends {
        if let Ok(v) = r {
            assert_eq!(*v, key * 2, "call {key} got another call's reply");
        }
    }
    let replied = ends.iter().filter(|(_, r)| r.is_ok()).count();
    let failed: Vec<_> = ends.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.iter().all(|(_, r)| *r == Err(CallStatus::Timeout)));
    assert!(
        replied as u64 >= calls * 98 / 100,
        "only {replied} of {calls} replied: {failed:?}"
    );
    assert!(
        replied as u64 >= calls * 98 / 100,
        "only {replied} of {calls} replied"
    );
    // The application saw each call at most once, whatever the resends and duplicates.
    let mut once = seen.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(
        once.len(),
        seen.len(),
        "a request reached the application twice"
    );
    let m = &w.hosts[SERVER].ep.metrics().service;
    assert!(m.duplicates.get() > 0, "the faults made no duplicate");
    assert!(w.hosts[CALLER].ep.metrics().service.resent.get() > 0);
}

/// The request datagrams the caller sent, captured on the link to the server (byte 4 of a
/// frame is its kind: sealed datagrams do not parse without the key).
fn captured_requests(w: &World) -> Vec<Vec<u8>> {
    (w.captured.iter())
        .filter(|(src, d)| *src == caller_addr() && d.get(4) == Some(&(Kind::Request as u8)))
        .map(|(_, d)| d.clone())
        .collect()
}

/// The served calls' table (4 slots, 2 answered kept per caller session): over its share,
/// a caller's oldest answered call goes (a resend of it is then dropped, never run again);
/// with every slot in progress a new call is answered `QueueFull` at once; with every slot
/// answered, the oldest answered goes for a new call (`evicted`); a call in progress whose
/// answer never comes frees its slot a grace after its deadline.
#[test]
fn the_served_calls_table_forgets_the_oldest_answered_and_frees_what_is_past_its_deadline() {
    let config = BridgeConfig {
        services: crate::ServiceConfig {
            served_calls: 4,
            cached_per_source: 2,
            ..crate::ServiceConfig::default()
        },
        ..BridgeConfig::default()
    };
    let mut w = pair(&config, lossless(), 9);
    w.capture = Some(server_addr());
    let evicted = |w: &World| w.hosts[SERVER].ep.metrics().service.evicted.get();
    // Three calls answered: the first is over the caller's share of two, forgotten.
    for key in 1..=3 {
        call(&mut w, key, key, 10 * SEC).expect("called");
        w.deliver();
        assert_eq!(serve(&mut w, |n| Ok(n * 10)), [key]);
        w.deliver();
    }
    assert_eq!(ends(&w), [(1, Ok(10)), (2, Ok(20)), (3, Ok(30))]);
    assert_eq!(evicted(&w), 1);
    let requests = captured_requests(&w);
    let replies_before = w.hosts[SERVER].ep.metrics().service.replies.get();
    let late_before = w.hosts[CALLER].ep.metrics().service.late.get();
    // Call 1 resent: forgotten, but seen: dropped, not run, not answered.
    w.inject(caller_addr(), server_addr(), requests[0].clone());
    w.deliver();
    assert!(
        w.hosts[SERVER].got.1.requests.is_empty(),
        "a forgotten call ran again"
    );
    assert_eq!(w.hosts[CALLER].ep.metrics().service.late.get(), late_before);
    // Call 3 resent: kept, answered from the cache (late at the caller, which ended it).
    w.inject(caller_addr(), server_addr(), requests[2].clone());
    w.deliver();
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(
        w.hosts[CALLER].ep.metrics().service.late.get(),
        late_before + 1
    );
    assert_eq!(
        w.hosts[SERVER].ep.metrics().service.replies.get(),
        replies_before,
        "a resend of a kept reply is not a new reply"
    );
    // Two answered kept (2, 3); two calls in progress fill the table.
    for key in 4..=5 {
        call(&mut w, key, key, 100 * MS).expect("called");
    }
    w.deliver();
    let held = std::mem::take(&mut w.hosts[SERVER].got.1.requests);
    assert_eq!(held.len(), 2);
    // A third call takes the oldest answered slot (call 2's, before its deadline: evicted).
    call(&mut w, 6, 6, 100 * MS).expect("called");
    w.deliver();
    assert_eq!(evicted(&w), 2);
    let held6 = std::mem::take(&mut w.hosts[SERVER].got.1.requests);
    assert_eq!(held6.len(), 1, "the new call runs");
    // Then call 3's: all four in progress now (4, 5, 6, 7).
    call(&mut w, 7, 7, 100 * MS).expect("called");
    w.deliver();
    assert_eq!(evicted(&w), 3);
    assert_eq!(std::mem::take(&mut w.hosts[SERVER].got.1.requests).len(), 1);
    // Every slot in progress: the next call is answered QueueFull at once, not run.
    call(&mut w, 8, 8, 100 * MS).expect("called");
    w.deliver();
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(ends(&w).last(), Some(&(8, Err(CallStatus::QueueFull))));
    // No answer ever comes; a grace (1 s) after their deadlines the slots are free again.
    w.run(1200);
    call(&mut w, 9, 9, 100 * MS).expect("called");
    w.deliver();
    assert_eq!(serve(&mut w, |n| Ok(n * 10)), [9], "a freed slot serves");
    w.deliver();
    assert_eq!(ends(&w).last(), Some(&(9, Ok(90))));
    // The answers that never came, now given: ignored (their slots moved on).
    for (_, key, _, _) in held {
        w.act(SERVER, |ep, wire, now| ep.answer(key, Ok(&0u64), now, wire));
    }
    w.deliver();
    assert_eq!(ends(&w).last(), Some(&(9, Ok(90))));
}

#[test]
fn duplicate_request_frames_reach_the_application_once_and_are_answered_from_the_cache() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 5);
    w.capture = Some(server_addr());
    call(&mut w, 1, 20, SEC).expect("called");
    w.deliver();
    let request = captured_requests(&w).pop().expect("a request went out");
    for _ in 0..5 {
        w.inject(caller_addr(), server_addr(), request.clone());
    }
    w.deliver();
    assert_eq!(
        w.hosts[SERVER].got.1.requests.len(),
        1,
        "in progress: ignored"
    );
    serve(&mut w, |n| Ok(n + 1));
    w.deliver();
    assert_eq!(ends(&w), [(1, Ok(21))]);
    // Answered: each duplicate is answered with the kept reply, never run again.
    for _ in 0..3 {
        w.inject(caller_addr(), server_addr(), request.clone());
    }
    w.deliver();
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(ends(&w).len(), 1, "the resent replies end nothing");
    assert_eq!(w.hosts[SERVER].ep.metrics().service.duplicates.get(), 8);
    assert_eq!(w.hosts[CALLER].ep.metrics().service.late.get(), 3);
}

/// Subscribes `attacker` (an allowed host) to the service itself, with session 7.
fn subscribe_as(w: &mut World, attacker: SocketAddr) -> Learned {
    let mut none = None;
    let now = w.now;
    handshake_as(
        &mut w.hosts[SERVER].ep,
        attacker,
        (SERVICE, REQ_FP),
        7,
        now,
        &mut none,
    )
    .expect("an allowed host subscribes")
}

/// A request frame of the service from `session`, followed by `token` if any.
fn forged_request(session: u64, call: u64, token: Option<u64>) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let meta = CallMeta {
        topic_id: SERVICE,
        fingerprint: REQ_FP,
        session,
    };
    let n = encode_request(&mut buf, meta, token.is_some(), call, 1000, &1u64).expect("fits");
    buf.truncate(n);
    if let Some(t) = token {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    buf
}

#[test]
fn a_request_without_a_handshake_is_dropped_and_draws_nothing() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 6);
    let attacker = addr(1, 9000);
    for (session, token) in [(7, None), (7, Some(0x1234)), (CALLER_SESSION, Some(1))] {
        let sent = w.handle(SERVER, &forged_request(session, 1, token), attacker);
        assert!(sent.is_empty(), "an unproven source was sent {sent:?}");
    }
    // The genuine caller's session and call id from another address: still unproven.
    let sent = w.handle(
        SERVER,
        &forged_request(CALLER_SESSION, 1, Some(1)),
        addr(1, 7102),
    );
    assert!(sent.is_empty());
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    assert_eq!(w.hosts[SERVER].ep.metrics().service.refused.get(), 4);
    // A proven host with the wrong token: refused.
    let l = subscribe_as(&mut w, attacker);
    let sent = w.handle(SERVER, &forged_request(7, 1, Some(l.token ^ 1)), attacker);
    assert!(sent.is_empty());
    assert!(w.hosts[SERVER].got.1.requests.is_empty());
    // With its own token it is a caller like any other.
    w.handle(SERVER, &forged_request(7, 1, Some(l.token)), attacker);
    assert_eq!(w.hosts[SERVER].got.1.requests.len(), 1);
}

/// A reply frame to call `call` from `session`, followed by `token`.
fn forged_reply(session: u64, call: u64, token: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let meta = CallMeta {
        topic_id: SERVICE,
        fingerprint: REP_FP,
        session,
    };
    let n = encode_reply(&mut buf, meta, true, call, Ok(&666u64)).expect("fits");
    buf.truncate(n);
    buf.extend_from_slice(&token.to_le_bytes());
    buf
}

#[test]
fn a_forged_reply_to_another_callers_call_is_dropped() {
    let mut w = pair(&BridgeConfig::default(), lossless(), 7);
    w.capture = Some(server_addr());
    call(&mut w, 1, 3, SEC).expect("called");
    w.deliver();
    // The attacker saw nothing of the caller's traffic but guesses its first call id (1);
    // it holds a token of its own from its own handshake.
    let attacker = addr(1, 9000);
    let l = subscribe_as(&mut w, attacker);
    for call_id in 0..4 {
        // From its own address, and spoofing the server's, with its own token.
        w.handle(
            CALLER,
            &forged_reply(SERVER_SESSION, call_id, l.token),
            attacker,
        );
        w.handle(
            CALLER,
            &forged_reply(SERVER_SESSION, call_id, l.token),
            server_addr(),
        );
    }
    w.deliver();
    assert!(
        ends(&w).is_empty(),
        "a forged reply ended a call: {:?}",
        ends(&w)
    );
    let drops = &w.hosts[CALLER].ep.metrics();
    assert_eq!(drops.dropped(crate::DropReason::UnknownSender), 4);
    assert_eq!(drops.dropped(crate::DropReason::BadToken), 4);
    // The genuine reply still ends the call, once.
    serve(&mut w, |n| Ok(n + 1));
    w.deliver();
    assert_eq!(ends(&w), [(1, Ok(4))]);
}

#[test]
fn a_request_flood_gets_no_more_reply_bytes_than_its_hosts_budget() {
    // The default budget: 1 MiB at once, 4 MiB/s after.
    let config = BridgeConfig::default();
    let (per_second, burst) = config.services.reply_rate;
    assert_eq!((per_second, burst), (4 << 20, 1 << 20));
    let mut w = pair(&config, lossless(), 8);
    let attacker = addr(2, 9000);
    let l = subscribe_as(&mut w, attacker);
    let start = w.now;
    let mut sent_back = 0usize;
    let mut call_id = 0;
    let big = vec![0xabu8; 1300];
    // 20 ms of 200 requests a millisecond, each answered with a 1300-byte reply.
    for _ in 0..20 {
        w.now += MS;
        for _ in 0..200 {
            call_id += 1;
            let d = forged_request(7, call_id, Some(l.token));
            let mut out = Outbox::new();
            let now = w.now;
            let ep = &mut w.hosts[SERVER].ep;
            let mut got = super::world::Got::default();
            ep.handle(&d, attacker, now, out.from(server_addr()), &mut got);
            for (_, key, _, _) in got.1.requests {
                ep.answer(key, Ok(&big), now, out.from(server_addr()));
            }
            sent_back += out.to_addr(attacker);
        }
    }
    let elapsed = w.now - start;
    let budget = burst as usize + (per_second as u128 * elapsed as u128 / SEC as u128) as usize;
    let m = &w.hosts[SERVER].ep.metrics().service;
    assert!(
        sent_back <= budget,
        "{sent_back} reply bytes sent in {elapsed} ns, over the budget of {budget}"
    );
    // The budget was used (all but 1%), and what it could not carry was counted; requests
    // over the rate limit were refused unanswered.
    assert!(
        sent_back * 100 >= budget * 99,
        "only {sent_back} of {budget} bytes sent"
    );
    assert!(m.over_budget.get() > 0);
    assert!(
        m.refused.get() > 0,
        "the request rate limit refused nothing"
    );
}

/// A sink that keeps nothing: counts calls and ends, remembers the last request's key.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) last_key: u64,
    pub(crate) ends: u64,
    pub(crate) ok: u64,
}

impl Sink for Tally {
    fn deliver(&mut self, _: usize, _: &[u8]) -> Result<(), crate::DropReason> {
        Ok(())
    }

    fn request(&mut self, _: usize, key: u64, _: u32, _: &[u8]) -> Result<(), CallStatus> {
        self.requests += 1;
        self.last_key = key;
        Ok(())
    }

    fn reply(&mut self, _: usize, _: u64, result: Result<&[u8], CallStatus>) {
        self.ends += 1;
        self.ok += u64::from(result.is_ok());
    }
}

/// `calls` calls, one a millisecond, each carried by hand from the caller to the server and
/// back, through two outboxes whose buffers are reused: what the allocation test counts.
pub(crate) fn round_trips(w: &mut World, calls: u64, nets: &mut [Outbox; 2], tally: &mut Tally) {
    let [to_server, to_caller] = nets;
    let (first, second) = w.hosts.split_at_mut(1);
    let (server, caller) = (&mut first[0].ep, &mut second[0].ep);
    for key in 0..calls {
        w.now += MS;
        let now = w.now;
        to_server.clear();
        caller
            .call(0, key, &key, now + SEC, now, to_server.from(caller_addr()))
            .expect("called");
        to_caller.clear();
        let Some((_, _, request)) = to_server.sent().first() else {
            panic!("no request sent");
        };
        server.handle(
            request,
            caller_addr(),
            now,
            to_caller.from(server_addr()),
            tally,
        );
        server.answer(tally.last_key, Ok(&key), now, to_caller);
        to_server.clear();
        let Some((_, _, reply)) = to_caller.sent().first() else {
            panic!("no reply sent");
        };
        caller.handle(reply, server_addr(), now, to_server, tally);
    }
}

/// The world of [`round_trips`]: a server and a caller, established.
pub(crate) fn warm_pair() -> World {
    pair(&BridgeConfig::default(), lossless(), 9)
}
