//! Starting a declared bus, in named steps: validate the declaration, make each thread's idle
//! strategy, make every ring and wire it to its publisher's output and its subscriber's inbox,
//! turn each actor's declaration into a slot on its thread (or an external handle), spawn and
//! pin the threads (every factory runs on its actor's thread), spawn the stop driver, and only
//! when all of that succeeded let the actors start. On any failure nothing is left running.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::builder::BusBuilder;
use super::control::{Control, GO_ABORT, GO_RUN};
use super::decl::{ActorDecl, HandleDecl, OutputKey, SlotParts};
use super::edge::{AnyOutput, Wiring};
use super::error::StartError;
use super::handle::{handle_idle, HandleParts};
use super::metrics::{ActorCounters, CallCounters, EdgeCounters};
use super::names::Renames;
use super::runner::{run_thread, ThreadPlan};
use super::running::RunningBus;
use super::stop::{Driver, Finished};
use super::validate::{validate, Plan};
use super::Backpressure;
use crate::ring::Notify;
use crate::topic::TopicName;
use crate::wait::{Doorbell, IdleStrategy};

/// How long a stop may take when the builder does not say.
pub(super) const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);

type Idle = Box<dyn IdleStrategy>;
type Threads = Vec<(String, std::thread::JoinHandle<()>)>;
/// Each actor's outputs, in declaration order.
type Outputs = Vec<Vec<Box<dyn AnyOutput>>>;

pub(super) fn start(mut bus: BusBuilder) -> Result<RunningBus, StartError> {
    // The process's allowed cores, read once: pinned cores must be among them, and unpinned
    // threads run on all of them (not on whatever core the caller of `start()` is pinned to).
    let allowed = crate::wait::allowed_cores();
    let renames = Arc::new(super::names::resolve(&mut bus)?);
    let plan = validate(
        &bus,
        &allowed,
        crate::wait::online_cores(),
        crate::wait::total_memory(),
    )
    .map_err(|e| e.with_renames(&renames))?;
    for w in &plan.warnings {
        log::warn!("{w}");
    }
    let decls = std::mem::take(&mut bus.actors);
    let handle_thread = threads_where(&decls, &plan, |a| a.handle.is_some());
    let idles = make_idles(&decls, &plan, &handle_thread);
    let bells: Vec<Option<Arc<Doorbell>>> = idles.iter().map(|i| i.doorbell()).collect();
    let (outputs, wirings, edges) = make_rings(&decls, &plan, &bells);
    let calls = call_books(&decls);
    let (thread_plans, actors, handle_decls) = make_slots(
        decls,
        &plan,
        &allowed,
        Made {
            idles,
            bells: &bells,
            outputs,
            wirings,
            calls: &calls,
        },
        &renames,
    );

    // Handles' "threads" are never spawned: the handle takes the thread's idle strategy. The
    // others are numbered for `Control` in the order they are spawned.
    let mut handle_idles: Vec<Option<Idle>> = Vec::new();
    let mut spawn = Vec::new();
    for (mut thread_plan, is_handle) in thread_plans.into_iter().zip(&handle_thread) {
        if *is_handle {
            handle_idles.push(Some(thread_plan.idle));
        } else {
            handle_idles.push(None);
            thread_plan.index = spawn.len();
            spawn.push(thread_plan);
        }
    }
    let control = Arc::new(Control::new(
        spawn.len(),
        bells.into_iter().flatten().collect(),
    ));
    let handles = make_handles(bus.handles, handle_decls, handle_idles, &control);
    let thread_names: Vec<String> = spawn.iter().map(|t| t.name.clone()).collect();
    let threads = match spawn_threads(spawn, &control) {
        Ok(threads) => threads,
        Err((e, threads)) => return Err(abort(&control, threads, e)),
    };
    let driver = Driver {
        control: Arc::clone(&control),
        edges: edges
            .iter()
            .filter(|e| !e.to_handle)
            .map(|e| Arc::clone(&e.counters))
            .collect(),
        threads,
        stop_timeout: bus.stop_timeout.unwrap_or(DEFAULT_STOP_TIMEOUT),
    };
    let driver = match spawn_driver(driver) {
        Ok(driver) => driver,
        Err((e, threads)) => return Err(abort(&control, threads, e)),
    };
    control.set_go(GO_RUN);
    #[cfg(unix)]
    let counters_file = open_counters_file(&bus, &edges, &actors, &calls);
    Ok(RunningBus {
        #[cfg(unix)]
        counters_file,
        control,
        driver: Some(driver),
        thread_names,
        edges,
        actors,
        calls,
        warnings: plan.warnings,
        handles,
        serial: bus.serial,
        renames,
    })
}

/// For each planned thread, whether any actor on it satisfies `which`.
fn threads_where(
    decls: &[ActorDecl],
    plan: &Plan,
    which: impl Fn(&ActorDecl) -> bool,
) -> Vec<bool> {
    let mut marked = vec![false; plan.threads.len()];
    for (i, a) in decls.iter().enumerate() {
        if which(a) {
            marked[plan.thread_of[i]] = true;
        }
    }
    marked
}

/// Each thread's idle strategy (made first: their doorbells are wired into the rings). A
/// handle's "thread" gets the handles' `Park`; a thread running an actor that watches file
/// descriptors gets a `Backoff` that sleeps on them.
fn make_idles(decls: &[ActorDecl], plan: &Plan, handle_thread: &[bool]) -> Vec<Idle> {
    let watches_fds = threads_where(decls, plan, |a| a.watches_fds);
    plan.thread_idle
        .iter()
        .zip(handle_thread.iter().zip(&watches_fds))
        .map(|(i, (&h, &fds))| if h { handle_idle() } else { i.make(fds) })
        .collect()
}

/// How many `Block` subscribers of one output it takes to share a broadcast ring.
// NB: a lone subscriber keeps a `Ring` of its own: a broadcast ring of one reader (its index
// stored once per hook) makes the bus's round trip and its bursts slower, with no gain above
// noise one item at a time (docs/PERFORMANCE.md, "Broadcast edges and implicit bursts").
const BROADCAST_MIN: usize = 2;

/// Every ring of the plan, its publisher's end added to the publisher's output and its
/// subscriber's end to the subscriber's wiring; with each edge's report row. The `Block` edges
/// of one output whose publisher may wait, into actors of the bus, with one capacity, share one
/// broadcast ring when there are at least [`BROADCAST_MIN`] of them (written once per hook, the
/// slowest subscriber gating the publisher); every other edge gets a ring of its own.
fn make_rings(
    decls: &[ActorDecl],
    plan: &Plan,
    bells: &[Option<Arc<Doorbell>>],
) -> (Outputs, Vec<Wiring>, Vec<EdgeInfo>) {
    let mut outputs: Outputs = decls
        .iter()
        .map(|a| a.outputs.iter().map(|o| (o.new_output)()).collect())
        .collect();
    let mut wirings: Vec<Wiring> = decls.iter().map(|_| Wiring::default()).collect();
    let counters: Vec<Arc<EdgeCounters>> = plan.edges.iter().map(|_| Arc::default()).collect();
    let bell = |actor: usize| {
        bells[plan.thread_of[actor]]
            .clone()
            .map(|b| b as Arc<dyn Notify>)
    };
    let to_handle = |actor: usize| decls[actor].handle.is_some();
    // (publisher, output, capacity) -> the plan's edges that share its broadcast ring.
    let mut broadcasts: Vec<((usize, usize, usize), Vec<usize>)> = Vec::new();
    for (i, e) in plan.edges.iter().enumerate() {
        if e.can_wait && !to_handle(e.subscriber) {
            let key = (e.publisher, e.output, e.capacity);
            match broadcasts.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => broadcasts.push((key, vec![i])),
            }
        }
    }
    broadcasts.retain(|(_, members)| members.len() >= BROADCAST_MIN);
    for (i, e) in plan.edges.iter().enumerate() {
        let out = &decls[e.publisher].outputs[e.output];
        if broadcasts.iter().any(|(_, members)| members.contains(&i)) {
            continue;
        }
        let wake_pub = match e.policy {
            Backpressure::Block => bell(e.publisher),
            _ => None,
        };
        let (tx, rx) = (out.make_edge)(
            e.policy,
            e.capacity,
            e.can_wait,
            to_handle(e.subscriber),
            Arc::clone(&counters[i]),
            bell(e.subscriber),
            wake_pub,
        );
        outputs[e.publisher][e.output].add_edge(tx);
        wirings[e.subscriber]
            .inputs
            .entry(out.spec.type_id)
            .or_default()
            .push((out.spec.name.id(), rx));
    }
    for ((publisher, output, capacity), members) in broadcasts {
        let out = &decls[publisher].outputs[output];
        let subscribers = members
            .iter()
            .map(|&i| (Arc::clone(&counters[i]), bell(plan.edges[i].subscriber)))
            .collect();
        let (tx, rxs) = (out.make_broadcast)(capacity, subscribers, bell(publisher));
        outputs[publisher][output].add_edge(tx);
        for (&i, rx) in members.iter().zip(rxs) {
            wirings[plan.edges[i].subscriber]
                .inputs
                .entry(out.spec.type_id)
                .or_default()
                .push((out.spec.name.id(), rx));
        }
    }
    let edges = plan
        .edges
        .iter()
        .zip(counters)
        .map(|(e, counters)| EdgeInfo {
            topic: decls[e.publisher].outputs[e.output].spec.name.clone(),
            publisher: decls[e.publisher].name.clone(),
            subscriber: decls[e.subscriber].name.clone(),
            policy: e.policy,
            counters,
            to_handle: to_handle(e.subscriber),
        })
        .collect();
    (outputs, wirings, edges)
}

/// The report row of every caller of every service, in the order of the actors (and handles)
/// that call and of their calls: the caller, the service as it runs, and its server.
fn call_books(decls: &[ActorDecl]) -> Vec<CallInfo> {
    let server = |service: &TopicName| {
        (decls.iter())
            .find(|a| a.serves.iter().any(|s| s.service == *service))
            .map_or_else(String::new, |a| a.name.clone())
    };
    (decls.iter())
        .flat_map(|a| (a.calls.iter()).map(move |c| (a.name.clone(), c.service.clone())))
        .map(|(caller, service)| CallInfo {
            server: server(&service),
            service,
            caller,
            counters: Arc::default(),
        })
        .collect()
}

/// What the earlier steps made, for `make_slots`: each thread's idle strategy and doorbell,
/// each actor's outputs and wiring, and every caller's counts.
struct Made<'a> {
    idles: Vec<Idle>,
    bells: &'a [Option<Arc<Doorbell>>],
    outputs: Outputs,
    wirings: Vec<Wiring>,
    calls: &'a [CallInfo],
}

/// What an external handle needs once the bus's control exists.
struct PendingHandle {
    decl: HandleDecl,
    thread: usize,
    name: String,
    wiring: Wiring,
    outputs: Vec<Box<dyn AnyOutput>>,
    counters: Arc<ActorCounters>,
    calls: Vec<Arc<CallCounters>>,
}

/// The table of calls in flight of an actor that calls the services of `decl` (empty if it
/// calls none): a book per service, with its outputs and its counts (`calls`, in order).
fn pending_calls(decl: &ActorDecl, calls: Vec<Arc<CallCounters>>) -> crate::service::PendingCalls {
    let position = |name: &TopicName, loopback: bool| {
        (decl.outputs.iter())
            .position(|o| o.spec.name == *name && o.calling.is_some() == loopback)
            .unwrap_or(usize::MAX)
    };
    let books: Vec<_> = (decl.calls.iter())
        .zip(calls)
        .map(|(call, counters)| {
            crate::service::Book::new(
                position(&call.reply, true),
                position(&call.service, false),
                call.post,
                call.gone,
                counters,
            )
        })
        .collect();
    let capacity = if books.is_empty() {
        0
    } else {
        crate::service::MAX_CALLS_IN_FLIGHT
    };
    crate::service::PendingCalls::new(capacity, books)
}

/// Each actor's slot on its thread's plan (its factory runs later, on that thread), or, for an
/// external handle, what it needs to be made; with each actor's report row.
fn make_slots(
    decls: Vec<ActorDecl>,
    plan: &Plan,
    allowed: &[usize],
    made: Made<'_>,
    renames: &Arc<Renames>,
) -> (Vec<ThreadPlan>, Vec<ActorInfo>, Vec<PendingHandle>) {
    let Made {
        idles,
        bells,
        outputs,
        wirings,
        calls,
    } = made;
    let mut calls = calls.iter();
    let mut plans: Vec<ThreadPlan> = plan
        .threads
        .iter()
        .zip(idles)
        .zip(&plan.thread_core)
        .map(|((name, idle), core)| ThreadPlan {
            index: 0,
            name: name.clone(),
            core: *core,
            cpus: allowed.to_vec(),
            idle,
            slots: Vec::new(),
        })
        .collect();
    let mut actors = Vec::new();
    let mut pending = Vec::new();
    for (i, ((decl, wiring), outs)) in decls.into_iter().zip(wirings).zip(outputs).enumerate() {
        let counters = Arc::new(ActorCounters::default());
        // Its calls' counts: the next ones of `calls`, which follows the actors' order.
        let call_counts: Vec<Arc<CallCounters>> = (calls.by_ref())
            .take(decl.calls.len())
            .map(|c| Arc::clone(&c.counters))
            .collect();
        actors.push(ActorInfo {
            name: decl.name.clone(),
            thread: match decl.handle {
                Some(_) => HANDLE_THREAD.to_owned(),
                None => plan.threads[plan.thread_of[i]].clone(),
            },
            counters: Arc::clone(&counters),
        });
        if let Some(handle) = decl.handle {
            pending.push(PendingHandle {
                decl: handle,
                thread: plan.thread_of[i],
                name: decl.name,
                wiring,
                outputs: outs,
                counters,
                calls: call_counts,
            });
            continue;
        }
        let pending = pending_calls(&decl, call_counts);
        let slot = (decl.make_slot)(SlotParts {
            wiring,
            outputs: outs,
            output_keys: decl
                .outputs
                .iter()
                .map(|o| OutputKey {
                    type_id: o.spec.type_id,
                    declared: o.declared.clone(),
                    matched: o.matched.clone(),
                    serving: o.serving.clone(),
                    calling: o.calling.clone(),
                })
                .collect(),
            orphans: Arc::new(crate::service::Orphans::new(
                &decl.name,
                bells[plan.thread_of[i]].clone(),
            )),
            serves: decl.serves.iter().map(|s| s.service.clone()).collect(),
            pending,
            patterns: (decl.matching.iter())
                .map(|p| (p.type_id, p.pattern.clone()))
                .collect(),
            renames: Arc::clone(renames),
            topics: decl
                .inbox
                .iter()
                .chain(&decl.taken)
                .map(|t| t.name.clone())
                .collect(),
            counters,
            supervision: decl.supervision,
            tick: decl.tick,
        });
        plans[plan.thread_of[i]].slots.push(slot);
    }
    (plans, actors, pending)
}

/// The external handles, each in its declared place, until redeemed.
fn make_handles(
    count: usize,
    pending: Vec<PendingHandle>,
    mut idles: Vec<Option<Idle>>,
    control: &Arc<Control>,
) -> Vec<Option<Box<dyn std::any::Any + Send>>> {
    let mut made: Vec<Option<Box<dyn std::any::Any + Send>>> = (0..count).map(|_| None).collect();
    for p in pending {
        let idle = idles
            .get_mut(p.thread)
            .and_then(Option::take)
            .unwrap_or_else(handle_idle);
        let handle = (p.decl.make)(HandleParts {
            name: p.name,
            wiring: p.wiring,
            outputs: p.outputs,
            counters: p.counters,
            idle,
            control: Arc::clone(control),
            calls: p.calls,
        });
        if let Some(slot) = made.get_mut(p.decl.index) {
            *slot = Some(handle);
        }
    }
    made
}

/// Spawns every bus thread and waits until each has pinned itself and made its actors. On
/// failure, returns the error with the threads spawned so far (to abort).
fn spawn_threads(
    spawn: Vec<ThreadPlan>,
    control: &Arc<Control>,
) -> Result<Threads, (StartError, Threads)> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut threads = Vec::new();
    for thread_plan in spawn {
        let name = thread_plan.name.clone();
        let control = Arc::clone(control);
        let ready = ready_tx.clone();
        match std::thread::Builder::new()
            .name(format!("llbus-{name}"))
            .spawn(move || run_thread(thread_plan, control, ready))
        {
            Ok(h) => threads.push((name, h)),
            Err(e) => return Err((StartError::Spawn(e), threads)),
        }
    }
    drop(ready_tx);
    for _ in 0..threads.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err((e, threads)),
            Err(_) => {
                let e = StartError::Invalid("a bus thread ended before reporting ready".to_owned());
                return Err((e, threads));
            }
        }
    }
    Ok(threads)
}

/// Spawns the stop driver, asleep until a stop is requested (see `stop`). It is handed the
/// threads only once it runs, so that a failed spawn leaves them to abort.
fn spawn_driver(
    driver: Driver,
) -> Result<std::thread::JoinHandle<Finished>, (StartError, Threads)> {
    let (plan_tx, plan_rx) = mpsc::channel::<Driver>();
    match std::thread::Builder::new()
        .name("llbus-stop".to_owned())
        .spawn(move || plan_rx.recv().map(Driver::run).unwrap_or_default())
    {
        Ok(h) => match plan_tx.send(driver) {
            Ok(()) => Ok(h),
            Err(mpsc::SendError(driver)) => Err((
                StartError::Invalid("the bus's stop driver ended before it started".to_owned()),
                driver.threads,
            )),
        },
        Err(e) => Err((StartError::Spawn(e), driver.threads)),
    }
}

/// Tells every spawned thread that the start failed and waits for them to leave.
fn abort(control: &Control, threads: Threads, error: StartError) -> StartError {
    control.set_go(GO_ABORT);
    for (_, h) in threads {
        let _ = h.join();
    }
    error
}

/// The bus's live counters file, unless the builder turned it off; a failure only warns.
#[cfg(unix)]
fn open_counters_file(
    bus: &BusBuilder,
    edges: &[EdgeInfo],
    actors: &[ActorInfo],
    calls: &[CallInfo],
) -> Option<super::counters_file::CountersFile> {
    if bus.counters_file == Some(false) {
        return None;
    }
    let name = bus
        .name
        .clone()
        .unwrap_or_else(super::counters_file::default_bus_name);
    let live = super::counters_file::Live {
        edges: edges.to_vec(),
        actors: actors.to_vec(),
        calls: calls.to_vec(),
    };
    match super::counters_file::CountersFile::create(&name, live) {
        Ok(f) => Some(f),
        Err(e) => {
            log::warn!(
                "bus '{name}' runs without a counters file (the llbus command will not see it): {e}"
            );
            None
        }
    }
}

#[derive(Clone)]
pub(super) struct EdgeInfo {
    pub(super) topic: TopicName,
    pub(super) publisher: String,
    pub(super) subscriber: String,
    pub(super) policy: Backpressure,
    pub(super) counters: Arc<EdgeCounters>,
    /// The subscriber is an external [`Subscription`](crate::Subscription): the drain does not
    /// wait for it (its reader may be the thread that stops the bus).
    pub(super) to_handle: bool,
}

#[derive(Clone)]
pub(super) struct ActorInfo {
    pub(super) name: String,
    pub(super) thread: String,
    pub(super) counters: Arc<ActorCounters>,
}

/// One caller of one service, as the report shows it.
#[derive(Clone)]
pub(super) struct CallInfo {
    /// The service, as it runs.
    pub(super) service: TopicName,
    pub(super) caller: String,
    pub(super) server: String,
    pub(super) counters: Arc<CallCounters>,
}

/// What the report shows as the thread of an external handle.
pub(super) const HANDLE_THREAD: &str = "(handle)";
