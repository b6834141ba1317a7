//! Starting a declared bus: every ring is made and wired to its publisher's output and its
//! subscriber's inbox, the threads are spawned and pinned, every factory runs on its actor's
//! thread, and only when all of that succeeded do the actors start.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::builder::{BusBuilder, SlotParts};
use super::control::{Control, GO_ABORT, GO_RUN};
use super::edge::{AnyOutput, Wiring};
use super::error::StartError;
use super::handle::{handle_idle, HandleParts};
use super::metrics::{ActorCounters, EdgeCounters};
use super::runner::{run_thread, ThreadPlan};
use super::running::RunningBus;
use super::stop::Driver;
use super::validate::validate;
use super::Backpressure;
use crate::ring::Notify;

/// How long a stop may take when the builder does not say.
pub(super) const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn start(mut bus: BusBuilder) -> Result<RunningBus, StartError> {
    // The process's allowed cores, read once: pinned cores must be among them, and unpinned
    // threads run on all of them (not on whatever core the caller of `start()` is pinned to).
    let allowed = crate::wait::allowed_cores();
    let plan = validate(
        &bus,
        &allowed,
        crate::wait::online_cores(),
        crate::wait::total_memory(),
    )?;
    for w in &plan.warnings {
        log::warn!("{w}");
    }

    // External handles are declared as actors on "threads" of their own that are never
    // spawned: the handle takes the thread's idle strategy and waits with it.
    let mut handle_thread = vec![false; plan.threads.len()];
    for (i, a) in bus.actors.iter().enumerate() {
        if a.handle.is_some() {
            handle_thread[plan.thread_of[i]] = true;
        }
    }

    // Threads that run an actor watching file descriptors: their `Backoff` sleeps on them.
    let mut watches_fds = vec![false; plan.threads.len()];
    for (i, a) in bus.actors.iter().enumerate() {
        if a.watches_fds {
            watches_fds[plan.thread_of[i]] = true;
        }
    }

    // Idle strategies first: their doorbells are wired into the rings.
    let idles: Vec<Box<dyn crate::wait::IdleStrategy>> = plan
        .thread_idle
        .iter()
        .zip(handle_thread.iter().zip(&watches_fds))
        .map(|(i, (&h, &fds))| if h { handle_idle() } else { i.make(fds) })
        .collect();
    let bells: Vec<Option<Arc<crate::wait::Doorbell>>> =
        idles.iter().map(|i| i.doorbell()).collect();

    // Rings.
    let mut outputs: Vec<Vec<Box<dyn AnyOutput>>> = bus
        .actors
        .iter()
        .map(|a| a.outputs.iter().map(|o| (o.new_output)()).collect())
        .collect();
    let mut wirings: Vec<Wiring> = bus.actors.iter().map(|_| Wiring::default()).collect();
    let mut edge_reports = Vec::new();
    for e in &plan.edges {
        let counters = Arc::new(EdgeCounters::default());
        let out = &bus.actors[e.publisher].outputs[e.output];
        let wake_sub = bells[plan.thread_of[e.subscriber]]
            .clone()
            .map(|b| b as Arc<dyn Notify>);
        let wake_pub = match e.policy {
            Backpressure::Block => bells[plan.thread_of[e.publisher]]
                .clone()
                .map(|b| b as Arc<dyn Notify>),
            _ => None,
        };
        let to_handle = bus.actors[e.subscriber].handle.is_some();
        let (tx, rx) = (out.make_edge)(
            e.policy,
            e.capacity,
            e.can_wait,
            to_handle,
            Arc::clone(&counters),
            wake_sub,
            wake_pub,
        );
        outputs[e.publisher][e.output].add_edge(tx);
        wirings[e.subscriber]
            .inputs
            .entry(out.spec.type_id)
            .or_default()
            .push(rx);
        edge_reports.push(EdgeInfo {
            topic: out.spec.name,
            publisher: bus.actors[e.publisher].name.clone(),
            subscriber: bus.actors[e.subscriber].name.clone(),
            policy: e.policy,
            counters,
            to_handle,
        });
    }

    // Slots, grouped by thread.
    let mut plans: Vec<ThreadPlan> = plan
        .threads
        .iter()
        .zip(idles)
        .zip(&plan.thread_core)
        .enumerate()
        .map(|(index, ((name, idle), core))| ThreadPlan {
            index,
            name: name.clone(),
            core: *core,
            cpus: allowed.clone(),
            idle,
            slots: Vec::new(),
        })
        .collect();
    let mut actor_infos = Vec::new();
    let mut pending_handles = Vec::new();
    let decls = std::mem::take(&mut bus.actors);
    for (i, ((decl, wiring), outs)) in decls.into_iter().zip(wirings).zip(outputs).enumerate() {
        let counters = Arc::new(ActorCounters::default());
        actor_infos.push(ActorInfo {
            name: decl.name.clone(),
            thread: match decl.handle {
                Some(_) => HANDLE_THREAD.to_owned(),
                None => plan.threads[plan.thread_of[i]].clone(),
            },
            counters: Arc::clone(&counters),
        });
        if let Some(handle) = decl.handle {
            pending_handles.push((handle, plan.thread_of[i], decl.name, wiring, outs, counters));
            continue;
        }
        let slot = (decl.make_slot)(SlotParts {
            wiring,
            outputs: outs,
            output_types: decl.outputs.iter().map(|o| o.spec.type_id).collect(),
            output_topics: decl.outputs.iter().map(|o| o.spec.name).collect(),
            counters,
            supervision: decl.supervision,
            tick: decl.tick,
        });
        plans[plan.thread_of[i]].slots.push(slot);
    }

    // Threads. Handles' "threads" are not spawned; the others are numbered for `Control` in
    // the order they are spawned.
    let mut handle_idles: Vec<Option<Box<dyn crate::wait::IdleStrategy>>> = Vec::new();
    let mut spawn = Vec::new();
    for (mut thread_plan, is_handle) in plans.into_iter().zip(&handle_thread) {
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
    let mut handles_made: Vec<Option<Box<dyn std::any::Any + Send>>> =
        (0..bus.handles).map(|_| None).collect();
    for (decl, thread, name, wiring, outputs, counters) in pending_handles {
        let idle = handle_idles[thread].take().unwrap_or_else(handle_idle);
        let made = (decl.make)(HandleParts {
            name,
            wiring,
            outputs,
            counters,
            idle,
            control: Arc::clone(&control),
        });
        if let Some(slot) = handles_made.get_mut(decl.index) {
            *slot = Some(made);
        }
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::new();
    let mut failure = None;
    for thread_plan in spawn {
        let name = thread_plan.name.clone();
        let control = Arc::clone(&control);
        let ready = ready_tx.clone();
        match std::thread::Builder::new()
            .name(format!("llbus-{name}"))
            .spawn(move || run_thread(thread_plan, control, ready))
        {
            Ok(h) => handles.push((name, h)),
            Err(e) => {
                failure = Some(StartError::Spawn(e));
                break;
            }
        }
    }
    drop(ready_tx);
    if failure.is_none() {
        for _ in 0..handles.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => {
                    failure = Some(StartError::Invalid(
                        "a bus thread ended before reporting ready".to_owned(),
                    ));
                    break;
                }
            }
        }
    }
    // The stop driver sleeps until a stop is requested, then runs the protocol (see `stop`).
    let thread_names: Vec<String> = handles.iter().map(|(name, _)| name.clone()).collect();
    let mut driver = None;
    if failure.is_none() {
        let plan = Driver {
            control: Arc::clone(&control),
            edges: edge_reports
                .iter()
                .filter(|e| !e.to_handle)
                .map(|e| Arc::clone(&e.counters))
                .collect(),
            threads: std::mem::take(&mut handles),
            stop_timeout: bus.stop_timeout.unwrap_or(DEFAULT_STOP_TIMEOUT),
        };
        let (plan_tx, plan_rx) = mpsc::channel::<Driver>();
        match std::thread::Builder::new()
            .name("llbus-stop".to_owned())
            .spawn(move || plan_rx.recv().map(Driver::run).unwrap_or_default())
        {
            Ok(h) => {
                // The driver owns the threads from here; it gets them once it is running.
                if let Err(mpsc::SendError(plan)) = plan_tx.send(plan) {
                    handles = plan.threads;
                    failure = Some(StartError::Invalid(
                        "the bus's stop driver ended before it started".to_owned(),
                    ));
                } else {
                    driver = Some(h);
                }
            }
            Err(e) => {
                handles = plan.threads;
                failure = Some(StartError::Spawn(e));
            }
        }
    }
    if let Some(e) = failure {
        control.set_go(GO_ABORT);
        for (_, h) in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    control.set_go(GO_RUN);
    #[cfg(unix)]
    let counters_file = if bus.counters_file != Some(false) {
        let name = bus
            .name
            .clone()
            .unwrap_or_else(super::counters_file::default_bus_name);
        let live = super::counters_file::Live {
            edges: edge_reports.clone(),
            actors: actor_infos.clone(),
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
    } else {
        None
    };
    Ok(RunningBus {
        #[cfg(unix)]
        counters_file,
        control,
        driver,
        thread_names,
        edges: edge_reports,
        actors: actor_infos,
        warnings: plan.warnings,
        handles: handles_made,
        serial: bus.serial,
    })
}

#[derive(Clone)]
pub(super) struct EdgeInfo {
    pub(super) topic: &'static str,
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

/// What the report shows as the thread of an external handle.
pub(super) const HANDLE_THREAD: &str = "(handle)";
