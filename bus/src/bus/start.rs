//! Starting a declared bus: every ring is made and wired to its publisher's output and its
//! subscriber's inbox, the threads are spawned and pinned, every factory runs on its actor's
//! thread, and only when all of that succeeded do the actors start.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::builder::{BusBuilder, SlotParts};
use super::control::{Control, GO_ABORT, GO_RUN};
use super::edge::{AnyOutput, Wiring};
use super::error::StartError;
use super::metrics::{ActorCounters, EdgeCounters};
use super::runner::{run_thread, ThreadPlan};
use super::stop::RunningBus;
use super::validate::validate;
use super::Backpressure;
use crate::ring::Notify;

pub(super) fn start(mut bus: BusBuilder) -> Result<RunningBus, StartError> {
    // The process's allowed cores, read once: pinned cores must be among them, and unpinned
    // threads run on all of them (not on whatever core the caller of `start()` is pinned to).
    let allowed = crate::wait::allowed_cores();
    let plan = validate(&bus, &allowed, crate::wait::online_cores())?;
    for w in &plan.warnings {
        log::warn!("{w}");
    }

    // Idle strategies first: their doorbells are wired into the rings.
    let idles: Vec<Box<dyn crate::wait::IdleStrategy>> =
        plan.thread_idle.iter().map(|i| i.make()).collect();
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
        let (tx, rx) = (out.make_edge)(
            e.policy,
            e.capacity,
            e.can_wait,
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
        });
    }

    // Slots, grouped by thread.
    let mut plans: Vec<ThreadPlan> = plan
        .threads
        .iter()
        .zip(idles)
        .zip(&plan.thread_core)
        .map(|((name, idle), core)| ThreadPlan {
            name: name.clone(),
            core: *core,
            cpus: allowed.clone(),
            idle,
            slots: Vec::new(),
        })
        .collect();
    let mut actor_infos = Vec::new();
    let decls = std::mem::take(&mut bus.actors);
    for (i, ((decl, wiring), outs)) in decls.into_iter().zip(wirings).zip(outputs).enumerate() {
        let counters = Arc::new(ActorCounters::default());
        actor_infos.push(ActorInfo {
            name: decl.name.clone(),
            thread: plan.threads[plan.thread_of[i]].clone(),
            counters: Arc::clone(&counters),
        });
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

    // Threads.
    let control = Arc::new(Control::new(bells.into_iter().flatten().collect()));
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::new();
    let mut failure = None;
    for thread_plan in plans {
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
    if let Some(e) = failure {
        control.set_go(GO_ABORT);
        for (_, h) in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    control.set_go(GO_RUN);
    Ok(RunningBus {
        control,
        threads: handles,
        edges: edge_reports,
        actors: actor_infos,
        warnings: plan.warnings,
        stop_timeout: bus.stop_timeout.unwrap_or(Duration::from_secs(10)),
        joined: false,
    })
}

pub(super) struct EdgeInfo {
    pub(super) topic: &'static str,
    pub(super) publisher: String,
    pub(super) subscriber: String,
    pub(super) policy: Backpressure,
    pub(super) counters: Arc<EdgeCounters>,
}

pub(super) struct ActorInfo {
    pub(super) name: String,
    pub(super) thread: String,
    pub(super) counters: Arc<ActorCounters>,
}
