//! Resolving a declaration's topic names in `start()`, before it is checked: the topics named
//! for inbox types (`subscribes_to`) take the place of those types' default topics, and the
//! bus's renamings (`remap`) apply to every topic declared. Pure: it only rewrites the
//! declarations, so each rule is tested without running anything.

use std::collections::HashMap;

use super::builder::BusBuilder;
use super::decl::ActorDecl;
use super::error::StartError;
use crate::topic::TopicName;

/// The bus's renamings: from a declared name to the name it runs under.
pub(crate) type Renames = HashMap<String, TopicName>;

/// Resolves every topic name of `bus` in place, or says which name or renaming is wrong, and
/// returns the renamings (for `Setup::topic`).
pub(super) fn resolve(bus: &mut BusBuilder) -> Result<Renames, StartError> {
    let remaps = remaps(&bus.remaps)?;
    for actor in &mut bus.actors {
        merge_named(actor)?;
        let rename = |name: &mut TopicName| {
            if let Some(to) = remaps.get(name.as_str()) {
                *name = to.clone();
            }
        };
        for spec in actor.inbox.iter_mut().chain(&mut actor.taken) {
            rename(&mut spec.name);
        }
        for out in &mut actor.outputs {
            rename(&mut out.spec.name);
        }
        for serve in &mut actor.serves {
            rename(&mut serve.service);
        }
        for call in &mut actor.calls {
            rename(&mut call.service);
        }
        actor.topic_settings = std::mem::take(&mut actor.topic_settings)
            .into_iter()
            .map(|(mut name, setting)| {
                rename(&mut name);
                (name, setting)
            })
            .collect();
        refuse_twice(actor)?;
    }
    let renames = remaps
        .into_iter()
        .map(|(from, to)| (from.to_owned(), to))
        .collect();
    expand_patterns(bus);
    expand_services(bus)?;
    Ok(renames)
}

/// Adds, to every actor that publishes by pattern (`publishes_matching`), an output for each
/// topic of the pattern's type that another actor or handle subscribes to and whose running
/// name matches, unless the actor publishes it already. An actor is never connected to its
/// own subscriptions this way (a bridge that exports a topic and discovers a pattern that
/// matches it would feed its own export).
fn expand_patterns(bus: &mut BusBuilder) {
    if bus.actors.iter().all(|a| a.matching.is_empty()) {
        return;
    }
    let subscribed: Vec<(usize, std::any::TypeId, TopicName)> = (bus.actors.iter().enumerate())
        .flat_map(|(i, a)| {
            (a.inbox.iter().chain(&a.taken)).map(move |t| (i, t.type_id, t.name.clone()))
        })
        .collect();
    for (i, actor) in bus.actors.iter_mut().enumerate() {
        let ActorDecl {
            matching, outputs, ..
        } = actor;
        // Its own subscriptions are left out whoever else subscribes to them too: an output
        // of a topic it receives would wire it to itself.
        let own = |name: &TopicName| {
            (subscribed.iter()).any(|(owner, _, theirs)| *owner == i && theirs == name)
        };
        for by in matching.iter() {
            for (_, type_id, name) in &subscribed {
                let wanted =
                    *type_id == by.type_id && by.pattern.matches(name.as_str()) && !own(name);
                if wanted && !outputs.iter().any(|o| o.spec.name == *name) {
                    let mut output = (by.output)(name.clone());
                    output.matched = Some(by.pattern.clone());
                    outputs.push(output);
                }
            }
        }
    }
}

/// Gives each service's server one reply output per caller of the service (the caller's own
/// reply topic), or says which caller has no server, or which service two actors serve.
fn expand_services(bus: &mut BusBuilder) -> Result<(), StartError> {
    let calls: Vec<(String, TopicName, TopicName)> = (bus.actors.iter())
        .flat_map(|a| {
            (a.calls.iter()).map(|c| (a.name.clone(), c.service.clone(), c.reply.clone()))
        })
        .collect();
    for (i, actor) in bus.actors.iter().enumerate() {
        for serve in &actor.serves {
            let other = (bus.actors.iter().enumerate())
                .find(|(j, a)| *j != i && a.serves.iter().any(|s| s.service == serve.service));
            if let Some((_, other)) = other {
                return Err(StartError::Invalid(format!(
                    "service '{}' is served by two actors, '{}' and '{}': one actor serves a \
                     service (give the other another name)",
                    serve.service, actor.name, other.name
                )));
            }
        }
    }
    for (caller, service, reply) in calls {
        let server = (bus.actors.iter_mut()).find_map(|a| {
            (a.serves.iter().find(|s| s.service == service))
                .map(|s| s.reply)
                .map(|r| (a, r))
        });
        let Some((server, make)) = server else {
            return Err(StartError::Invalid(format!(
                "'{caller}' calls service '{service}', which no actor serves: add \
                 .serves(&service) to the actor that answers it"
            )));
        };
        let mut output = make(reply);
        output.serving = Some(service);
        server.outputs.push(output);
    }
    Ok(())
}

/// The renamings as checked names: each `from` once, both names valid.
fn remaps(given: &[(String, String)]) -> Result<HashMap<&str, TopicName>, StartError> {
    let mut map: HashMap<&str, TopicName> = HashMap::new();
    for (from, to) in given {
        let check = |name: &str| {
            TopicName::new(name)
                .map_err(|e| StartError::Invalid(format!("remap(\"{from}\", \"{to}\"): {e}")))
        };
        let to_name = check(to)?;
        check(from)?;
        if let Some(earlier) = map.get(from.as_str()) {
            return Err(StartError::Invalid(format!(
                "topic '{from}' is remapped twice, to '{earlier}' and to '{to}': keep one"
            )));
        }
        map.insert(from, to_name);
    }
    Ok(map)
}

/// Replaces each inbox type's default topic by the topics `subscribes_to` named for it.
fn merge_named(actor: &mut ActorDecl) -> Result<(), StartError> {
    if actor.named.is_empty() {
        return Ok(());
    }
    let named = std::mem::take(&mut actor.named);
    if let Some(stray) = named
        .iter()
        .find(|n| !actor.inbox.iter().any(|t| t.type_id == n.type_id))
    {
        return Err(StartError::Invalid(format!(
            "actor '{}' subscribes to topic '{}' of type {}, which its inbox {} does not take: add the type to the inbox, or use .takes_on(&topic)",
            actor.name, stray.name, stray.type_name, actor.inbox_name
        )));
    }
    actor
        .inbox
        .retain(|t| !named.iter().any(|n| n.type_id == t.type_id));
    actor.inbox.extend(named);
    Ok(())
}

/// An actor that receives one topic twice, or publishes one topic twice, once resolved.
fn refuse_twice(actor: &ActorDecl) -> Result<(), StartError> {
    let received: Vec<&TopicName> = actor
        .inbox
        .iter()
        .chain(&actor.taken)
        .map(|t| &t.name)
        .collect();
    for (i, name) in received.iter().enumerate() {
        if received[..i].contains(name) {
            return Err(StartError::Invalid(format!(
                "actor '{}' subscribes to topic '{name}' twice (named twice, or remapped onto a topic it already receives)",
                actor.name
            )));
        }
    }
    for (i, out) in actor.outputs.iter().enumerate() {
        if actor.outputs[..i]
            .iter()
            .any(|o| o.spec.name == out.spec.name)
        {
            return Err(StartError::Invalid(format!(
                "actor '{}' publishes topic '{}' twice (declared twice, or remapped onto a topic it already publishes)",
                actor.name, out.spec.name
            )));
        }
    }
    Ok(())
}
