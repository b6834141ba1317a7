//! Set-ups that several modules of this binary use.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use llbus::{Actor, Context, Message, Out, Report};
use llbus_net::DropReason;
use serde::{Deserialize, Serialize};
use tests::metric;

/// Any free port on the IPv4 loopback address, to bind a bridge or a socket to.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A numbered message, for the tests that only need one topic.
#[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "net.beat")]
pub struct Beat(pub u64);

/// A numbered tick.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "net.tick")]
pub struct Tick {
    pub n: u64,
}

/// Publishes a tick, numbered from 1, every tick of its own.
pub struct Feed {
    pub out: Out<Tick>,
    pub n: u64,
}

impl Actor for Feed {
    type In = ();
    fn on_message(&mut self, (): (), _ctx: &mut Context<'_>) {}
    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        self.n += 1;
        ctx.publish(self.out, Tick { n: self.n });
    }
}

/// Counts the ticks it takes.
pub struct Sink {
    pub got: Arc<AtomicU64>,
}

impl Actor for Sink {
    type In = Tick;
    fn on_message(&mut self, _t: Tick, _ctx: &mut Context<'_>) {
        self.got.fetch_add(1, Ordering::Relaxed);
    }
}

/// The drops of `actor` in `report` counted under `reason`.
pub fn drop_count(report: &Report, actor: &str, reason: DropReason) -> u64 {
    metric(report, actor, &format!("drop.{}", reason.name()))
}

/// An ll-udp-pubsub v0.1 Subscribe: a `u32` LE of 0.
pub const COMPAT_SUBSCRIBE: [u8; 4] = [0, 0, 0, 0];

/// The CPU, shared by the tests that start bridges: those that keep a core busy for seconds (a
/// flood, megabyte messages through loss, a NAK storm) take it alone ([`cpu_hungry`]), so
/// that their bounded waits and rates do not depend on what runs beside them, and the others
/// share it ([`cpu_shared`]).
static CPU: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Waits until no other test holds the CPU; the guard lets the others run again.
pub fn cpu_hungry() -> std::sync::RwLockWriteGuard<'static, ()> {
    CPU.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits while a CPU-hungry test runs; other sharing tests run beside this one.
pub fn cpu_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    CPU.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Subscribes `raw` (a socket connected to a bridge) to `topic_id` of `fingerprint` under
/// `session` by the handshake, as any subscriber or caller does: its token and the cookie it
/// was admitted with. Control frames are awaited past anything else the bridge sends.
pub fn raw_subscribe(
    raw: &std::net::UdpSocket,
    topic_id: u64,
    fingerprint: u64,
    session: u64,
) -> (u64, llbus_net::Cookie) {
    use llbus_net::{parse_datagram, BatchEncoder, Control, DEFAULT_MAX_DATAGRAM};
    let subscribe = |nonce, cookie| {
        let mut buf = [0u8; 256];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_control(&Control::Subscribe {
            topic_id,
            fingerprint,
            session,
            nonce,
            cookie,
        })
        .expect("fits");
        enc.as_bytes().to_vec()
    };
    let answer = || {
        let mut buf = [0u8; 2048];
        loop {
            let n = raw.recv(&mut buf).expect("an answer");
            let frame = parse_datagram(&buf[..n], DEFAULT_MAX_DATAGRAM)
                .expect("parses")
                .next()
                .expect("a frame");
            if let Ok(c) = Control::from_frame(&frame) {
                return c;
            }
        }
    };
    raw.send(&subscribe(1, None)).expect("send");
    let Control::CookieChallenge { cookie, .. } = answer() else {
        panic!("no challenge");
    };
    raw.send(&subscribe(2, Some(cookie))).expect("send");
    let Control::SubscribeAck { token, .. } = answer() else {
        panic!("not admitted");
    };
    (token, cookie)
}
