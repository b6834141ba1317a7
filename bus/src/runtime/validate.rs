//! Checking a declaration as a whole and planning its threads and edges. Pure: it makes no
//! ring and no thread, so every wiring mistake can be tested without running anything.

use std::collections::HashMap;
use std::time::Duration;

use super::builder::BusBuilder;
use super::decl::ActorDecl;
use super::error::StartError;
use super::{Backpressure, Idle, Supervision};
use crate::message::TopicSpec;

/// The result of validation: which thread each actor runs on, and every edge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Thread names, in order; `thread_of[actor]` indexes this.
    pub(crate) threads: Vec<String>,
    pub(crate) thread_core: Vec<Option<usize>>,
    pub(crate) thread_idle: Vec<Idle>,
    pub(crate) thread_of: Vec<usize>,
    /// (publisher, output index, subscriber, policy, capacity).
    pub(crate) edges: Vec<PlannedEdge>,
    pub(crate) warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlannedEdge {
    pub(crate) publisher: usize,
    pub(crate) output: usize,
    pub(crate) subscriber: usize,
    pub(crate) policy: Backpressure,
    pub(crate) capacity: usize,
    /// A full ring can make the publisher wait (`Block`, and it did not promise `never_waits`).
    pub(crate) can_wait: bool,
}

/// Checks a declaration and plans threads and edges. Pure: no rings, no threads.
///
/// `allowed` is the set of cores the process may run on (read once in `start()`), `online` how
/// many the machine has, `memory` how many bytes of memory it has (a ring larger than that is
/// refused).
pub(super) fn validate(
    bus: &BusBuilder,
    allowed: &[usize],
    online: usize,
    memory: u64,
) -> Result<Plan, StartError> {
    check_stop_timeout(bus.stop_timeout)?;
    check_actors(&bus.actors, memory)?;
    check_topic_names(&bus.actors)?;
    let mut plan = plan_threads(bus);
    check_cores(&plan, allowed, online)?;
    check_spinners(&mut plan, allowed)?;
    plan_edges(&bus.actors, &mut plan)?;
    warn_unheard(&bus.actors, &mut plan);
    warn_block_cycle(&mut plan);
    Ok(plan)
}

/// Refuses a stop timeout that leaves no time (zero) or overflows.
fn check_stop_timeout(timeout: Option<Duration>) -> Result<(), StartError> {
    if let Some(t) = timeout {
        if t.is_zero() {
            return Err(StartError::Invalid(
                "the bus's stop timeout is 0 s, which leaves no time to drain: use at least 1 ms"
                    .to_owned(),
            ));
        }
        check_duration("the bus's stop timeout", t)?;
    }
    Ok(())
}

/// Each actor on its own: a unique name, its own errors, a subscription for its inbox, settings
/// that belong to it, durations and capacities that can work.
fn check_actors(actors: &[ActorDecl], memory: u64) -> Result<(), StartError> {
    let mut seen = HashMap::new();
    for (i, a) in actors.iter().enumerate() {
        if seen.insert(a.name.as_str(), i).is_some() {
            return Err(StartError::DuplicateActor(a.name.clone()));
        }
        if let Some(e) = a.errors.first() {
            return Err(StartError::Invalid(e.clone()));
        }
        if !a.subscribed {
            return Err(StartError::NotSubscribed {
                actor: a.name.clone(),
                inbox: a.inbox_name,
            });
        }
        if a.group.is_some() && (a.core.is_some() || a.idle.is_some()) {
            return Err(StartError::Invalid(format!(
                "actor '{}' is in group '{}': set its core and idle strategy on the group, with bus.group(\"{}\")",
                a.name,
                a.group.as_deref().unwrap_or_default(),
                a.group.as_deref().unwrap_or_default()
            )));
        }
        if let Some(tick) = a.tick {
            if tick.is_zero() {
                return Err(StartError::Invalid(format!(
                    "actor '{}' asks for a tick every 0 s: use an interval of at least 1 ns, or no tick",
                    a.name
                )));
            }
            check_duration(&format!("the tick interval of actor '{}'", a.name), tick)?;
        }
        if let Supervision::Restart(limit) = a.supervision {
            if limit.within.is_zero() {
                return Err(StartError::Invalid(format!(
                    "actor '{}' has a restart window of 0 s, in which no restart is ever counted: use a window of at least 1 ns",
                    a.name
                )));
            }
            check_duration(
                &format!("the restart window of actor '{}'", a.name),
                limit.within,
            )?;
            check_duration(
                &format!("the restart delay of actor '{}'", a.name),
                limit.delay,
            )?;
        }
        if !a.taken.is_empty() && matches!(a.supervision, Supervision::Restart(_)) {
            return Err(StartError::Invalid(format!(
                "actor '{}' takes its own rings (.takes::<..>()), so it cannot be restarted: use Supervision::Stop or Escalate",
                a.name
            )));
        }
        for type_id in a.settings.keys() {
            if !a
                .inbox
                .iter()
                .chain(&a.taken)
                .any(|t| t.type_id == *type_id)
            {
                return Err(StartError::Invalid(format!(
                    "actor '{}' sets backpressure or capacity for a topic it does not receive",
                    a.name
                )));
            }
        }
        for name in a.topic_settings.keys() {
            if !a.inbox.iter().chain(&a.taken).any(|t| t.name == *name) {
                return Err(StartError::Invalid(format!(
                    "actor '{}' sets backpressure or capacity for topic '{name}', which it does not receive",
                    a.name
                )));
            }
        }
        for topic in a.inbox.iter().chain(&a.taken) {
            let capacity = a.setting(topic).capacity.unwrap_or(a.default_capacity);
            check_capacity(&a.name, topic, capacity, memory)?;
        }
    }
    Ok(())
}

/// One Rust type and one id per topic name, and one name per topic id.
fn check_topic_names(actors: &[ActorDecl]) -> Result<(), StartError> {
    let mut by_name: HashMap<&str, &TopicSpec> = HashMap::new();
    let mut by_id: HashMap<u64, &TopicSpec> = HashMap::new();
    for spec in actors.iter().flat_map(|a| {
        a.outputs
            .iter()
            .map(|o| &o.spec)
            .chain(a.inbox.iter())
            .chain(a.taken.iter())
    }) {
        match by_name.get(spec.name.as_str()) {
            Some(other) if other.type_id != spec.type_id => {
                return Err(StartError::TopicClash {
                    topic: spec.name.clone(),
                    first: other.type_name,
                    second: spec.type_name,
                    remapped_from: Vec::new(),
                })
            }
            // A hand-written `TOPIC_ID` that is not its name's, beside the name as named
            // (`Topic::named`, or a remap onto it): two topics that every report would call by
            // one name.
            Some(other) if other.name.id() != spec.name.id() => {
                return Err(StartError::Invalid(format!(
                    "topic '{}' has two ids on this bus, {:#018x} and {:#018x} (a hand-written TOPIC_ID that is not topic_id of its name, beside the name named at run time): use Topic::of() for the type's topic, or give it another name",
                    spec.name,
                    other.name.id(),
                    spec.name.id()
                )))
            }
            _ => {
                by_name.insert(spec.name.as_str(), spec);
            }
        }
        match by_id.get(&spec.name.id()) {
            Some(other) if other.name != spec.name => {
                return Err(StartError::TopicIdCollision {
                    id: spec.name.id(),
                    first: other.name.clone(),
                    second: spec.name.clone(),
                })
            }
            _ => {
                by_id.insert(spec.name.id(), spec);
            }
        }
    }
    Ok(())
}

/// One thread per ungrouped actor and per group, with its core and idle strategy.
fn plan_threads(bus: &BusBuilder) -> Plan {
    let actors = &bus.actors;
    let mut threads: Vec<String> = Vec::new();
    let mut thread_core: Vec<Option<usize>> = Vec::new();
    let mut thread_idle: Vec<Idle> = Vec::new();
    let mut thread_of = Vec::with_capacity(actors.len());
    let mut group_thread: HashMap<&str, usize> = HashMap::new();
    for a in actors {
        let t = match &a.group {
            Some(g) => *group_thread.entry(g.as_str()).or_insert_with(|| {
                let decl = bus.groups.get(g.as_str());
                threads.push(g.clone());
                thread_core.push(decl.and_then(|d| d.core));
                thread_idle.push(decl.and_then(|d| d.idle).unwrap_or_default());
                threads.len() - 1
            }),
            None => {
                threads.push(a.name.clone());
                thread_core.push(a.core);
                thread_idle.push(a.idle.unwrap_or_default());
                threads.len() - 1
            }
        };
        thread_of.push(t);
    }
    Plan {
        threads,
        thread_core,
        thread_idle,
        thread_of,
        edges: Vec::new(),
        warnings: Vec::new(),
    }
}

/// Every pinned core exists and is one the process may use.
fn check_cores(plan: &Plan, allowed: &[usize], online: usize) -> Result<(), StartError> {
    let (threads, thread_core) = (&plan.threads, &plan.thread_core);
    for (t, core) in thread_core.iter().enumerate() {
        if let Some(core) = *core {
            if core >= online {
                return Err(StartError::NoSuchCore {
                    thread: threads[t].clone(),
                    core,
                    online,
                });
            }
            if !allowed.contains(&core) {
                return Err(StartError::CoreNotAllowed {
                    thread: threads[t].clone(),
                    core,
                    allowed: allowed.to_vec(),
                });
            }
        }
    }
    Ok(())
}

/// Busy spinners: two confined to one core are refused; more than the allowed cores, a warning.
fn check_spinners(plan: &mut Plan, allowed: &[usize]) -> Result<(), StartError> {
    let (threads, thread_core, thread_idle) = (&plan.threads, &plan.thread_core, &plan.thread_idle);
    // the process's allowed set, so with a single allowed core it is confined to that one.
    let only_core = |t: usize| match (thread_core[t], allowed) {
        (Some(core), _) => Some(core),
        (None, [core]) => Some(*core),
        (None, _) => None,
    };
    let spinners: Vec<usize> = (0..threads.len())
        .filter(|&t| thread_idle[t] == Idle::BusySpin)
        .collect();
    for (i, &t) in spinners.iter().enumerate() {
        if let Some(core) = only_core(t) {
            if let Some(&u) = spinners[..i].iter().find(|&&u| only_core(u) == Some(core)) {
                return Err(StartError::SharedBusyCore {
                    core,
                    first: threads[u].clone(),
                    second: threads[t].clone(),
                });
            }
        }
    }
    if spinners.len() > allowed.len() {
        plan.warnings.push(format!(
            "{} threads busy-spin ({}) but this process may only use {} cores {:?}: they will take turns on the cores and latency will suffer by orders of magnitude; give some the Backoff or Park idle strategy",
            spinners.len(),
            spinners
                .iter()
                .map(|&t| threads[t].as_str())
                .collect::<Vec<_>>()
                .join(", "),
            allowed.len(),
            allowed
        ));
    }
    Ok(())
}

/// One edge per publisher of each topic an actor receives, with the subscription's resolved
/// settings; a `Block` edge within one thread is refused, a topic nobody publishes too.
fn plan_edges(actors: &[ActorDecl], plan: &mut Plan) -> Result<(), StartError> {
    let (threads, thread_of) = (&plan.threads, &plan.thread_of);
    let mut edges = Vec::new();
    for (s, sub) in actors.iter().enumerate() {
        for topic in sub.inbox.iter().chain(&sub.taken) {
            let setting = sub.setting(topic);
            let policy = setting.policy.unwrap_or(Backpressure::Block);
            let capacity = setting.capacity.unwrap_or(sub.default_capacity);
            let mut found = false;
            for (p, publisher) in actors.iter().enumerate() {
                let Some(output) = publisher
                    .outputs
                    .iter()
                    .position(|o| o.spec.name == topic.name)
                else {
                    continue;
                };
                found = true;
                if policy == Backpressure::Block
                    && !publisher.never_waits
                    && thread_of[p] == thread_of[s]
                {
                    return Err(StartError::SameThreadBlock {
                        topic: topic.name.clone(),
                        publisher: publisher.name.clone(),
                        subscriber: sub.name.clone(),
                        thread: threads[thread_of[s]].clone(),
                    });
                }
                edges.push(PlannedEdge {
                    publisher: p,
                    output,
                    subscriber: s,
                    policy,
                    capacity,
                    can_wait: policy == Backpressure::Block && !publisher.never_waits,
                });
            }
            if !found {
                return Err(StartError::NoPublisher {
                    actor: sub.name.clone(),
                    topic: topic.name.clone(),
                });
            }
        }
    }
    plan.edges = edges;
    Ok(())
}

/// Warns of outputs nobody subscribes to.
fn warn_unheard(actors: &[ActorDecl], plan: &mut Plan) {
    for (p, publisher) in actors.iter().enumerate() {
        for (o, out) in publisher.outputs.iter().enumerate() {
            if !plan.edges.iter().any(|e| e.publisher == p && e.output == o) {
                plan.warnings.push(format!(
                    "actor '{}' publishes topic '{}' but no actor subscribes to it: its messages go nowhere",
                    publisher.name, out.spec.name
                ));
            }
        }
    }
}

/// Warns of a cycle of `Block` edges between threads.
fn warn_block_cycle(plan: &mut Plan) {
    if let Some(cycle) = block_cycle(plan.threads.len(), &plan.thread_of, &plan.edges) {
        let names: Vec<&str> = cycle.iter().map(|&t| plan.threads[t].as_str()).collect();
        plan.warnings.push(format!(
            "Block subscriptions form a cycle through threads {}: if every ring on the cycle fills, they wait for each other until the bus stops (a stop then gives the waits up after its timeout, counting their messages lost); make one edge DropNewest or Latest unless the cycle carries a bounded number of messages (a ping-pong)",
            names.join(" -> ")
        ));
    }
}

/// A cycle of threads joined by `Block` edges (publisher thread -> subscriber thread), if any.
fn block_cycle(threads: usize, thread_of: &[usize], edges: &[PlannedEdge]) -> Option<Vec<usize>> {
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); threads];
    for e in edges.iter().filter(|e| e.can_wait) {
        let (p, s) = (thread_of[e.publisher], thread_of[e.subscriber]);
        if p != s && !next[p].contains(&s) {
            next[p].push(s);
        }
    }
    // Depth-first search, colouring threads 0 = new, 1 = on the path, 2 = done.
    fn visit(
        t: usize,
        next: &[Vec<usize>],
        colour: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        colour[t] = 1;
        path.push(t);
        for &u in &next[t] {
            if colour[u] == 1 {
                let from = path.iter().position(|&x| x == u).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(u);
                return Some(cycle);
            }
            if colour[u] == 0 {
                if let Some(c) = visit(u, next, colour, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        colour[t] = 2;
        None
    }
    let mut colour = vec![0u8; threads];
    (0..threads).find_map(|t| {
        if colour[t] == 0 {
            visit(t, &next, &mut colour, &mut Vec::new())
        } else {
            None
        }
    })
}

/// The longest duration a declaration may give (a tick interval, the stop timeout, a restart
/// window or delay): a year. Longer ones overflow the clock's arithmetic on some platforms.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Refuses a ring capacity that cannot work for `actor`'s subscription to `topic`: zero, one
/// whose power of two overflows, or a ring larger than the machine's `memory`.
fn check_capacity(
    actor: &str,
    topic: &TopicSpec,
    capacity: usize,
    memory: u64,
) -> Result<(), StartError> {
    if capacity == 0 {
        return Err(StartError::Invalid(format!(
            "actor '{actor}' asks for a ring capacity of 0 for topic '{}': use at least 1",
            topic.name
        )));
    }
    // A ring holds a power of two of slots of at least one byte each (a zero-sized message
    // still takes its index arithmetic).
    let bytes = capacity
        .checked_next_power_of_two()
        .and_then(|slots| slots.checked_mul(topic.size.max(1)))
        .and_then(|b| u64::try_from(b).ok());
    match bytes {
        Some(b) if b <= memory && b <= isize::MAX as u64 => Ok(()),
        _ => Err(StartError::Invalid(format!(
            "actor '{actor}' asks for a ring capacity of {capacity} for topic '{}' ({} bytes a message), larger than this machine's memory ({memory} bytes): use a smaller capacity",
            topic.name, topic.size
        ))),
    }
}

/// Refuses a duration longer than [`MAX_DURATION`], naming `what`.
fn check_duration(what: &str, d: Duration) -> Result<(), StartError> {
    if d > MAX_DURATION {
        return Err(StartError::Invalid(format!(
            "{what} is {d:?}, longer than the longest llbus accepts ({MAX_DURATION:?}): use a shorter one"
        )));
    }
    Ok(())
}
