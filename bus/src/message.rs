//! Messages and inboxes: what a type needs to travel on the bus, and how an actor's input type
//! is wired to its rings.
//!
//! A [`Message`] names its topic and carries two 64-bit constants: the topic id (a hash of the
//! topic name, the same on every host; see [`topic_id`]) and a schema fingerprint that changes
//! whenever the type's shape changes. `#[derive(Message)]` writes both; a hand-written impl is
//! fine too.
//!
//! An [`Inbox`] is what an actor receives: one message type (every `Message` is an inbox of one
//! topic), an enum with one variant per message type (`#[derive(Inbox)]`), or `()` for an actor
//! that only publishes. Its `poll` dispatches statically: no boxing, no `dyn`, no allocation.

use std::any::TypeId;

use crate::runtime::{Inputs, Wiring};
use crate::schema::Shape;
use crate::topic::TopicName;

/// A type that can be published on the bus.
///
/// `TOPIC` is the topic name, `TOPIC_ID` its 64-bit id ([`topic_id`] of the name) and
/// `FINGERPRINT` a hash of the type's shape, so that two hosts with different definitions of the
/// same topic notice. Messages that fan out to several subscribers must also be `Clone`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a message",
    label = "`{Self}` does not implement `llbus::Message`",
    note = "derive it: `#[derive(llbus::Message)]` on `{Self}`"
)]
pub trait Message: Send + 'static {
    /// The topic name, for example `"md.quote"`.
    const TOPIC: &'static str;
    /// The topic id: [`topic_id`]`(Self::TOPIC)` unless there is a reason to differ.
    const TOPIC_ID: u64;
    /// The schema fingerprint: changes when a field is renamed, reordered or retyped.
    const FINGERPRINT: u64;

    /// The type's shape as data, which `FINGERPRINT` hashes: `#[derive(Message)]` returns
    /// [`Schema::shape`](crate::Schema::shape). The default, for hand-written impls, is
    /// [`Shape::Opaque`]: the fingerprint without a layout.
    fn schema() -> Shape {
        Shape::Opaque(Self::FINGERPRINT)
    }
}

/// The stable 64-bit id of a topic name: FNV-1a (64-bit) over its UTF-8 bytes.
///
/// FNV-1a is specified byte by byte (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`), so the id is identical on every host, architecture and build; the network
/// bridge puts it on the wire. It is a `const fn`, so derived ids are compile-time constants.
///
/// ```
/// assert_eq!(llbus::topic_id(""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(llbus::topic_id("a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub const fn topic_id(name: &str) -> u64 {
    fnv1a64(FNV1A64_OFFSET, name.as_bytes())
}

/// The FNV-1a 64-bit offset basis: the state of a hash that has seen no bytes.
pub(crate) const FNV1A64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a 64-bit hash from `state` over `bytes`.
pub(crate) const fn fnv1a64(mut state: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        state ^= bytes[i] as u64;
        state = state.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    state
}

/// One topic that an inbox subscribes to or an actor publishes, as the wiring sees it: a name
/// and a type.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    /// The topic name, with its id.
    pub name: TopicName,
    /// The schema fingerprint.
    pub fingerprint: u64,
    /// The Rust type carried, for matching publishers to subscribers.
    pub type_id: TypeId,
    /// The Rust type's name, for error messages.
    pub type_name: &'static str,
    /// The size of one value of the type in bytes (what a ring slot holds), so that `start()`
    /// can refuse a ring larger than memory before allocating it.
    pub size: usize,
    /// The type's shape ([`Message::schema`]), built on demand: recorders and schema servers
    /// call it at wiring time, never per message.
    pub shape: fn() -> Shape,
}

impl TopicSpec {
    /// The spec of message type `M` on its default topic (`M::TOPIC`).
    pub fn of<M: Message>() -> Self {
        TopicSpec::named::<M>(TopicName::of::<M>())
    }

    /// The spec of message type `M` on topic `name`.
    pub fn named<M: Message>(name: TopicName) -> Self {
        TopicSpec {
            name,
            fingerprint: M::FINGERPRINT,
            type_id: TypeId::of::<M>(),
            type_name: std::any::type_name::<M>(),
            size: std::mem::size_of::<M>(),
            shape: M::schema,
        }
    }
}

/// An actor's input type: the topics it subscribes to and how a message from any of them is
/// handed to the actor.
///
/// Implemented for every [`Message`] (one topic), for `()` (no input), and by
/// `#[derive(Inbox)]` for enums whose variants each wrap one message type.
pub trait Inbox: Sized + Send + 'static {
    /// The rings this inbox reads: one [`Inputs`] per topic.
    type Receivers: Send + 'static;

    /// Appends the topics of this inbox to `out`, once each. Called at wiring time only.
    fn topics(out: &mut Vec<TopicSpec>);

    /// Takes this inbox's rings out of the wiring. Called in `start()` only.
    fn receivers(wiring: &mut Wiring) -> Self::Receivers;

    /// Hands at most `budget` messages per ring to `handler`, visiting every ring once so that a
    /// busy topic cannot starve another, and calls `on_topic` with a ring's topic id before its
    /// messages. Returns how many messages were handled.
    fn poll<T: FnMut(u64), F: FnMut(Self)>(
        rx: &mut Self::Receivers,
        budget: usize,
        on_topic: &mut T,
        handler: &mut F,
    ) -> usize;

    /// True when every ring of every topic is empty and all of its publishers are gone.
    fn is_finished(rx: &Self::Receivers) -> bool;
}

impl<M: Message> Inbox for M {
    type Receivers = Inputs<M>;

    fn topics(out: &mut Vec<TopicSpec>) {
        out.push(TopicSpec::of::<M>());
    }

    fn receivers(wiring: &mut Wiring) -> Self::Receivers {
        Inputs::take(wiring)
    }

    fn poll<T: FnMut(u64), F: FnMut(Self)>(
        rx: &mut Self::Receivers,
        budget: usize,
        on_topic: &mut T,
        handler: &mut F,
    ) -> usize {
        rx.poll_edges(budget, on_topic, handler)
    }

    fn is_finished(rx: &Self::Receivers) -> bool {
        rx.is_finished()
    }
}

impl Inbox for () {
    type Receivers = ();

    fn topics(_out: &mut Vec<TopicSpec>) {}

    fn receivers(_wiring: &mut Wiring) -> Self::Receivers {}

    fn poll<T: FnMut(u64), F: FnMut(Self)>(
        _rx: &mut (),
        _budget: usize,
        _on_topic: &mut T,
        _handler: &mut F,
    ) -> usize {
        0
    }

    fn is_finished(_rx: &()) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden vectors from the FNV reference test suite (Fowler, Noll, Vo).
    #[test]
    fn topic_id_matches_fnv1a64_reference_vectors() {
        assert_eq!(topic_id(""), 0xcbf29ce484222325);
        assert_eq!(topic_id("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(topic_id("foobar"), 0x85944171f73967e8);
    }
}
