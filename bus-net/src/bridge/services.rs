//! Services across hosts at the bus's edge: what the bridge's actor does on the local bus for
//! each exported or imported service. The actor takes its rings itself, and serves and calls
//! as any actor does, on its own thread (`ActorBuilder::serves_taken`, `calls_taken`):
//! - an exported service's port *calls* it: each remote call the endpoint admits is decoded
//!   and made with `Context::call` (timeout: the remote caller's budget); the port keeps the
//!   call's id with the endpoint's key, and each reply (or timeout, or the stop's end) it
//!   settles from its reply ring goes to the endpoint as that key's answer;
//! - an imported service's port *serves* it: each local request it polls from its request
//!   ring is accepted, its responder kept by key, and the call made through the endpoint
//!   until the local caller's deadline (`Request::deadline`, at most
//!   `ServiceConfig::call_timeout`); the endpoint's end of the call (its reply or error)
//!   answers the responder.
//!
//! Nothing allocates per call: the key tables are allocated at start, the rings by the bus,
//! the endpoint's tables when the services are given.

use std::time::{Duration, Instant};

use llbus::{
    ActorBuilder, CallError, CallId, CallOut, Context, Inputs, Message, Replies, Reply, Request,
    Responder, Service, Setup, MAX_CALLS_IN_FLIGHT,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::BridgeActor;
use crate::{CallStatus, Endpoint, Wire};

/// Replies or requests taken from one service's rings per round.
const BUDGET: usize = 256;

/// The `CallError` a remote call's status ends a local call with.
pub(crate) fn error_of(status: CallStatus) -> CallError {
    match status {
        CallStatus::Timeout => CallError::Timeout,
        CallStatus::ServerPanicked => CallError::ServerPanicked,
        CallStatus::Stopped => CallError::Stopped,
        CallStatus::Refused => CallError::Refused,
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
        CallError::Refused => CallStatus::Refused,
        _ => CallStatus::Dropped,
    }
}

/// An exported service, as the bridge's actor sees it.
pub(crate) trait ServedPort: Send {
    /// A remote call: decoded and called on the local bus.
    ///
    /// # Errors
    /// The status the call ends with at once: `Dropped` for a request that does not decode,
    /// `QueueFull` when the port has `MAX_CALLS_IN_FLIGHT` calls open or the server's ring is
    /// full, and the local call's own refusal otherwise.
    fn deliver(
        &mut self,
        key: u64,
        budget_ms: u32,
        body: &[u8],
        ctx: &mut Context<'_>,
    ) -> Result<(), CallStatus>;

    /// Settles the replies that came and hands each to the endpoint as its call's answer.
    /// Returns how many replies it took.
    fn pump(
        &mut self,
        endpoint: &mut Endpoint,
        now_ns: u64,
        wire: &mut dyn Wire,
        ctx: &mut Context<'_>,
    ) -> usize;
}

/// An imported service, as the bridge's actor sees it.
pub(crate) trait ImportedPort: Send {
    /// Takes the local requests and calls the remote server with each (import `service` of
    /// the endpoint); `stopping`, it answers them `Stopped` instead (no reply would be
    /// received). Returns how many it took.
    #[allow(clippy::too_many_arguments)]
    fn pump(
        &mut self,
        service: usize,
        endpoint: &mut Endpoint,
        now: Instant,
        now_ns: u64,
        wire: &mut dyn Wire,
        ctx: &mut Context<'_>,
        stopping: bool,
    ) -> usize;

    /// The remote call `key` ended: its local caller is answered.
    fn ended(&mut self, key: u64, result: Result<&[u8], CallStatus>, ctx: &mut Context<'_>);
}

/// Makes a service's port from the bridge's setup.
pub(crate) type MakeServed = Box<dyn FnOnce(&mut Setup<'_>) -> Box<dyn ServedPort> + Send>;
/// Likewise for an imported service.
pub(crate) type MakeImported = Box<dyn FnOnce(&mut Setup<'_>) -> Box<dyn ImportedPort> + Send>;
/// Declares, on the bridge's builder, that it calls or serves a service.
pub(crate) type DeclareService =
    Box<dyn for<'a> FnOnce(ActorBuilder<'a, BridgeActor>) -> ActorBuilder<'a, BridgeActor> + Send>;

// ---- Exported: the bridge calls the local service ----

struct Exported<Req, Rep> {
    out: CallOut<Req, Rep>,
    replies: Inputs<Reply<Rep>>,
    /// The calls in flight: `(local id, endpoint's key)`, at most `MAX_CALLS_IN_FLIGHT`.
    keys: Vec<(CallId, u64)>,
}

impl<Req, Rep> ServedPort for Exported<Req, Rep>
where
    Req: Message + DeserializeOwned + Clone,
    Rep: Message + Serialize + Clone,
{
    fn deliver(
        &mut self,
        key: u64,
        budget_ms: u32,
        body: &[u8],
        ctx: &mut Context<'_>,
    ) -> Result<(), CallStatus> {
        let request: Req = crate::decode_payload(body).map_err(|_| CallStatus::Dropped)?;
        if self.keys.len() >= MAX_CALLS_IN_FLIGHT {
            return Err(CallStatus::QueueFull);
        }
        let timeout = Duration::from_millis(u64::from(budget_ms));
        let call = ctx.call(self.out, request, timeout).map_err(status_of)?;
        self.keys.push((call, key));
        Ok(())
    }

    fn pump(
        &mut self,
        endpoint: &mut Endpoint,
        now_ns: u64,
        wire: &mut dyn Wire,
        ctx: &mut Context<'_>,
    ) -> usize {
        let keys = &mut self.keys;
        self.replies.poll(BUDGET, |reply| {
            let Some((call, result)) = ctx.settle(reply) else {
                return; // Late: its call ended with its timeout, answered already.
            };
            let Some(i) = keys.iter().position(|(c, _)| *c == call) else {
                return;
            };
            let (_, key) = keys.swap_remove(i);
            match &result {
                Ok(reply) => endpoint.answer(key, Ok(reply), now_ns, wire),
                Err(e) => endpoint.answer::<Rep>(key, Err(status_of(*e)), now_ns, wire),
            }
        })
    }
}

/// How the bridge exports `service`: its port's maker, and its declaration (the bridge calls
/// it).
pub(crate) fn export<Req, Rep>(service: &Service<Req, Rep>) -> (MakeServed, DeclareService)
where
    Req: Message + DeserializeOwned + Clone,
    Rep: Message + Serialize + Clone,
{
    let called = service.clone();
    let make: MakeServed = Box::new(move |setup: &mut Setup<'_>| {
        Box::new(Exported {
            out: setup.caller(&called),
            replies: setup.call_replies(&called),
            keys: Vec::with_capacity(MAX_CALLS_IN_FLIGHT),
        }) as Box<dyn ServedPort>
    });
    let service = service.clone();
    let declare: DeclareService = Box::new(move |b| b.calls_taken(&service));
    (make, declare)
}

// ---- Imported: the bridge serves the remote service locally ----

struct Imported<Req, Rep: Message + Clone> {
    /// The service's name, for the log.
    name: String,
    /// Whether a request too large for a datagram was logged already.
    warned: bool,
    requests: Inputs<Request<Req>>,
    replies: Replies<Rep>,
    /// The responders of the calls in flight, by key (slot index); `free`: the slots open.
    held: Vec<Option<Responder<Rep>>>,
    free: Vec<u64>,
    /// How long a remote call may last at most.
    timeout: Duration,
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
        now: Instant,
        now_ns: u64,
        wire: &mut dyn Wire,
        ctx: &mut Context<'_>,
        stopping: bool,
    ) -> usize {
        let (replies, held, free) = (&self.replies, &mut self.held, &mut self.free);
        let (name, warned, timeout) = (&self.name, &mut self.warned, self.timeout);
        self.requests.poll(BUDGET, |request| {
            // The local caller's time left, within the bridge's own bound.
            let left = (request.deadline())
                .map_or(timeout, |at| at.saturating_duration_since(now))
                .min(timeout);
            let (request, responder) = replies.accept(request);
            if stopping {
                return ctx.reply(responder, Err(CallError::Stopped));
            }
            if left.is_zero() {
                return ctx.reply(responder, Err(CallError::Timeout));
            }
            let Some(key) = free.pop() else {
                return ctx.reply(responder, Err(CallError::QueueFull));
            };
            let left_ns = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
            let deadline_ns = now_ns.saturating_add(left_ns);
            match endpoint.call(service, key, &request, deadline_ns, now_ns, wire) {
                Ok(()) => {
                    if let Some(slot) = held.get_mut(key as usize) {
                        *slot = Some(responder);
                    }
                }
                Err(status) => {
                    free.push(key);
                    if status == CallStatus::TooLarge && !std::mem::replace(warned, true) {
                        log::warn!(
                            "service '{name}': a request does not fit in one datagram \
                             (services are not fragmented): the call ends with \
                             CallError::Dropped (counted in too_large); make the request \
                             smaller or raise max_datagram"
                        );
                    }
                    ctx.reply(responder, Err(error_of(status)));
                }
            }
        })
    }

    fn ended(&mut self, key: u64, result: Result<&[u8], CallStatus>, ctx: &mut Context<'_>) {
        let Some(responder) = self.held.get_mut(key as usize).and_then(Option::take) else {
            return;
        };
        self.free.push(key);
        let result = match result {
            Ok(body) => crate::decode_payload::<Rep>(body).map_err(|_| CallError::Dropped),
            Err(status) => Err(error_of(status)),
        };
        ctx.reply(responder, result);
    }
}

/// How the bridge imports `service` (each remote call lasting at most `timeout`): its port's
/// maker, and its declaration (the bridge serves it).
pub(crate) fn import<Req, Rep>(
    service: &Service<Req, Rep>,
    timeout: Duration,
) -> (MakeImported, DeclareService)
where
    Req: Message + Serialize + Clone,
    Rep: Message + DeserializeOwned + Clone,
{
    let served = service.clone();
    let make: MakeImported = Box::new(move |setup: &mut Setup<'_>| {
        Box::new(Imported {
            name: served.name().to_string(),
            warned: false,
            requests: setup.inputs_on(&served.requests()),
            replies: setup.replies(&served),
            held: (0..MAX_CALLS_IN_FLIGHT).map(|_| None).collect(),
            free: (0..MAX_CALLS_IN_FLIGHT as u64).rev().collect(),
            timeout,
        }) as Box<dyn ImportedPort>
    });
    let service = service.clone();
    let declare: DeclareService = Box::new(move |b| b.serves_taken(&service));
    (make, declare)
}
