//! Services across hosts at the bus's edge: what the bridge's actor and the bus exchange for
//! each exported or imported service.
//!
//! The bridge's actor takes no inbox (its rings are its own, `takes_on`), so it can neither
//! serve a service nor call one itself. Each service therefore has a small proxy actor of its
//! own, on one thread per bridge (group `NAME.services`), linked to the bridge's actor by two
//! SPSC rings (`llbus::Ring`), each way one:
//! - an exported service's proxy *calls* it (`.calls(&service)`): the bridge hands it each
//!   remote call `(key, budget, request)`, it calls with `Context::call` (timeout: the
//!   caller's budget) and hands back `(key, result)` as the call settles;
//! - an imported service's proxy *serves* it (`.serves(&service)`): it hands the bridge each
//!   local request `(key, request)` and keeps its responder; the bridge calls the remote
//!   server through the endpoint and hands back `(key, result)` when the call ends, which the
//!   proxy answers with.
//!
//! The proxies poll their rings every round (and every millisecond, their tick); the bridge
//! polls its own in its round. Nothing allocates per call: the rings, the key tables and the
//! endpoint's tables are allocated at start.

use std::marker::PhantomData;
use std::time::Duration;

use llbus::{
    Actor, BusBuilder, CallError, CallId, CallOut, Consumer, Context, Message, Producer, Replies,
    Reply, Request, Responder, Ring, Service, Setup, MAX_CALLS_IN_FLIGHT,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{CallStatus, Endpoint, Wire};

/// The capacity of each ring between a proxy and the bridge: every call a proxy can have in
/// flight, and its answer, fit.
const RING: usize = MAX_CALLS_IN_FLIGHT;

/// How often a proxy looks at its ring when nothing else wakes it.
const PROXY_TICK: Duration = Duration::from_millis(1);

/// The `CallError` a remote call's status ends a local call with.
pub(crate) fn error_of(status: CallStatus) -> CallError {
    match status {
        CallStatus::Timeout => CallError::Timeout,
        CallStatus::ServerPanicked => CallError::ServerPanicked,
        CallStatus::Stopped | CallStatus::Refused => CallError::Stopped,
        CallStatus::QueueFull | CallStatus::OverBudget => CallError::QueueFull,
        CallStatus::Ok | CallStatus::Dropped | CallStatus::TooLarge | CallStatus::Other(_) => {
            CallError::Dropped
        }
    }
}

/// The status a local call's error is sent back with.
pub(crate) fn status_of(error: CallError) -> CallStatus {
    match error {
        CallError::Timeout => CallStatus::Timeout,
        CallError::ServerPanicked => CallStatus::ServerPanicked,
        CallError::Stopped => CallStatus::Stopped,
        CallError::QueueFull => CallStatus::QueueFull,
        _ => CallStatus::Dropped,
    }
}

/// An exported service, as the bridge's actor sees it.
pub(crate) trait ServedPort: Send {
    /// A remote call: decoded and handed to the proxy.
    ///
    /// # Errors
    /// `QueueFull` when the proxy's ring is full, `Dropped` for a request that does not
    /// decode.
    fn deliver(&mut self, key: u64, budget_ms: u32, body: &[u8]) -> Result<(), CallStatus>;

    /// Hands the endpoint the answers the proxy sent back. Returns how many.
    fn pump(&mut self, endpoint: &mut Endpoint, now_ns: u64, wire: &mut dyn Wire) -> usize;
}

/// An imported service, as the bridge's actor sees it.
pub(crate) trait ImportedPort: Send {
    /// Starts the calls the proxy sent (import `service` of the endpoint). Returns how many.
    fn pump(
        &mut self,
        service: usize,
        endpoint: &mut Endpoint,
        now_ns: u64,
        wire: &mut dyn Wire,
    ) -> usize;

    /// A call ended: decoded and handed back to the proxy.
    fn ended(&mut self, key: u64, result: Result<&[u8], CallStatus>);
}

/// Adds a proxy actor to the bus.
pub(crate) type AddProxy = Box<dyn FnOnce(&mut BusBuilder, &str) + Send>;

/// A remote call handed to an exported service's proxy: `(key, budget_ms, request)`.
type Incoming<Req> = (u64, u32, Req);
/// An answer handed back: `(key, result)`.
type Answer<Rep> = (u64, Result<Rep, CallError>);

// ---- Exported: the proxy calls the local service ----

struct Served<Req, Rep> {
    to_proxy: Producer<Incoming<Req>>,
    from_proxy: Consumer<Answer<Rep>>,
}

impl<Req, Rep> ServedPort for Served<Req, Rep>
where
    Req: Message + DeserializeOwned + Clone,
    Rep: Message + Serialize + Clone,
{
    fn deliver(&mut self, key: u64, budget_ms: u32, body: &[u8]) -> Result<(), CallStatus> {
        let request: Req = crate::decode_payload(body).map_err(|_| CallStatus::Dropped)?;
        self.to_proxy
            .try_push((key, budget_ms, request))
            .map_err(|_| CallStatus::QueueFull)
    }

    fn pump(&mut self, endpoint: &mut Endpoint, now_ns: u64, wire: &mut dyn Wire) -> usize {
        self.from_proxy
            .pop_batch(RING, |(key, result)| match &result {
                Ok(reply) => endpoint.answer(key, Ok(reply), now_ns, wire),
                Err(e) => endpoint.answer::<Rep>(key, Err(status_of(*e)), now_ns, wire),
            })
    }
}

/// The proxy of an exported service: calls it for the bridge.
struct Caller<Req, Rep> {
    out: CallOut<Req, Rep>,
    from_bridge: Consumer<Incoming<Req>>,
    to_bridge: Producer<Answer<Rep>>,
    /// The calls in flight: `(local id, bridge's key)`, at most `MAX_CALLS_IN_FLIGHT`.
    keys: Vec<(CallId, u64)>,
}

impl<Req, Rep> Actor for Caller<Req, Rep>
where
    Req: Message + Clone,
    Rep: Message + Clone,
{
    type In = Reply<Rep>;

    fn on_message(&mut self, reply: Reply<Rep>, ctx: &mut Context<'_>) {
        let Some((call, result)) = ctx.settle(reply) else {
            return;
        };
        if let Some(i) = self.keys.iter().position(|(c, _)| *c == call) {
            let (_, key) = self.keys.swap_remove(i);
            // The ring holds every call in flight: it has room.
            let _ = self.to_bridge.try_push((key, result));
        }
    }

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let (out, keys, to_bridge) = (self.out, &mut self.keys, &mut self.to_bridge);
        self.from_bridge
            .pop_batch(RING, |(key, budget_ms, request)| {
                let timeout = Duration::from_millis(u64::from(budget_ms));
                match ctx.call(out, request, timeout) {
                    Ok(call) if keys.len() < keys.capacity() => keys.push((call, key)),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = to_bridge.try_push((key, Err(e)));
                    }
                }
            })
    }

    fn on_tick(&mut self, _ctx: &mut Context<'_>) {}
}

/// The bridge's port of an exported service, and how to add its proxy.
pub(crate) fn export<Req, Rep>(service: &Service<Req, Rep>) -> (Box<dyn ServedPort>, AddProxy)
where
    Req: Message + DeserializeOwned + Clone,
    Rep: Message + Serialize + Clone,
{
    let (to_proxy, from_bridge) = Ring::<Incoming<Req>>::new(RING);
    let (to_bridge, from_proxy) = Ring::<Answer<Rep>>::new(RING);
    let service = service.clone();
    let mut parts = Some((from_bridge, to_bridge));
    let add: AddProxy = Box::new(move |bus: &mut BusBuilder, bridge: &str| {
        let name = format!("{bridge}.calls.{}", service.name());
        let called = service.clone();
        bus.actor(&name, move |setup: &mut Setup<'_>| {
            let Some((from_bridge, to_bridge)) = parts.take() else {
                panic!("a service proxy cannot be made twice");
            };
            Caller {
                out: setup.caller(&called),
                from_bridge,
                to_bridge,
                keys: Vec::with_capacity(MAX_CALLS_IN_FLIGHT),
            }
        })
        .calls(&service)
        .group(&format!("{bridge}.services"))
        .tick_every(PROXY_TICK);
    });
    let port = Served::<Req, Rep> {
        to_proxy,
        from_proxy,
    };
    (Box::new(port), add)
}

// ---- Imported: the proxy serves the remote service locally ----

struct Imported<Req, Rep> {
    /// The service's name, for the log.
    name: String,
    /// Whether a request too large for a datagram was logged already.
    warned: bool,
    from_proxy: Consumer<(u64, Req)>,
    to_proxy: Producer<Answer<Rep>>,
    /// How long a remote call may last.
    timeout_ns: u64,
    _t: PhantomData<fn(Req) -> Rep>,
}

impl<Req, Rep> ImportedPort for Imported<Req, Rep>
where
    Req: Message + Serialize + Clone,
    Rep: Message + DeserializeOwned + Clone,
{
    fn pump(
        &mut self,
        service: usize,
        endpoint: &mut Endpoint,
        now_ns: u64,
        wire: &mut dyn Wire,
    ) -> usize {
        let deadline = now_ns.saturating_add(self.timeout_ns);
        let (to_proxy, name, warned) = (&mut self.to_proxy, &self.name, &mut self.warned);
        self.from_proxy.pop_batch(RING, |(key, request)| {
            if let Err(status) = endpoint.call(service, key, &request, deadline, now_ns, wire) {
                if status == CallStatus::TooLarge && !std::mem::replace(warned, true) {
                    log::warn!(
                        "service '{name}': a request does not fit in one datagram (services \
                         are not fragmented): the call ends with CallError::Dropped (counted \
                         in too_large); make the request smaller or raise max_datagram"
                    );
                }
                let _ = to_proxy.try_push((key, Err(error_of(status))));
            }
        })
    }

    fn ended(&mut self, key: u64, result: Result<&[u8], CallStatus>) {
        let result = match result {
            Ok(body) => crate::decode_payload::<Rep>(body).map_err(|_| CallError::Dropped),
            Err(status) => Err(error_of(status)),
        };
        let _ = self.to_proxy.try_push((key, result));
    }
}

/// The proxy of an imported service: serves it locally for the bridge.
struct Server<Req, Rep: Message + Clone> {
    replies: Replies<Rep>,
    to_bridge: Producer<(u64, Req)>,
    from_bridge: Consumer<Answer<Rep>>,
    /// The responders of the calls in flight, by key (slot index); `free`: the slots open.
    held: Vec<Option<Responder<Rep>>>,
    free: Vec<u64>,
}

impl<Req, Rep> Actor for Server<Req, Rep>
where
    Req: Message + Clone,
    Rep: Message + Clone,
{
    type In = Request<Req>;

    fn on_message(&mut self, request: Request<Req>, ctx: &mut Context<'_>) {
        let (request, responder) = self.replies.accept(request);
        let Some(key) = self.free.pop() else {
            ctx.reply(responder, Err(CallError::QueueFull));
            return;
        };
        match self.to_bridge.try_push((key, request)) {
            Ok(()) => {
                if let Some(slot) = self.held.get_mut(key as usize) {
                    *slot = Some(responder);
                }
            }
            Err(_) => {
                self.free.push(key);
                ctx.reply(responder, Err(CallError::QueueFull));
            }
        }
    }

    fn poll(&mut self, ctx: &mut Context<'_>) -> usize {
        let (held, free) = (&mut self.held, &mut self.free);
        self.from_bridge.pop_batch(RING, |(key, result)| {
            if let Some(responder) = held.get_mut(key as usize).and_then(Option::take) {
                free.push(key);
                ctx.reply(responder, result);
            }
        })
    }

    fn on_tick(&mut self, _ctx: &mut Context<'_>) {}
}

/// The bridge's port of an imported service (each remote call lasting at most `timeout`),
/// and how to add its proxy.
pub(crate) fn import<Req, Rep>(
    service: &Service<Req, Rep>,
    timeout: Duration,
) -> (Box<dyn ImportedPort>, AddProxy)
where
    Req: Message + Serialize + Clone,
    Rep: Message + DeserializeOwned + Clone,
{
    let (to_bridge, from_proxy) = Ring::<(u64, Req)>::new(RING);
    let (to_proxy, from_bridge) = Ring::<Answer<Rep>>::new(RING);
    let name = service.name().to_string();
    let service = service.clone();
    let mut parts = Some((to_bridge, from_bridge));
    let add: AddProxy = Box::new(move |bus: &mut BusBuilder, bridge: &str| {
        let name = format!("{bridge}.serves.{}", service.name());
        let served = service.clone();
        bus.actor(&name, move |setup: &mut Setup<'_>| {
            let Some((to_bridge, from_bridge)) = parts.take() else {
                panic!("a service proxy cannot be made twice");
            };
            Server {
                replies: setup.replies(&served),
                to_bridge,
                from_bridge,
                held: (0..RING).map(|_| None).collect(),
                free: (0..RING as u64).rev().collect(),
            }
        })
        .serves(&service)
        .group(&format!("{bridge}.services"))
        .tick_every(PROXY_TICK);
    });
    let port = Imported::<Req, Rep> {
        name,
        warned: false,
        from_proxy,
        to_proxy,
        timeout_ns: u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
        _t: PhantomData,
    };
    (Box::new(port), add)
}
