//! What the endpoint tells its driver: the [`Event`] queue's item and the rule that bounds the
//! queue.
//!
//! Inputs: the events the parts raise while handling a datagram or a timer. Output: a queue
//! the driver drains with [`Endpoint::poll_event`](super::Endpoint::poll_event). Algorithm: a
//! `SubscribersChanged` already queued for its topic is not queued again; past
//! [`EVENT_QUEUE`] events the oldest is dropped, so a driver that does not poll loses the
//! oldest news, never memory.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::SchemaFailure;
use crate::Refusal;

/// What happened that the application may want to know: polled with
/// [`Endpoint::poll_event`](super::Endpoint::poll_event).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The subscribers of an exported topic changed (admitted, removed or expired).
    SubscribersChanged {
        /// The topic.
        topic_id: u64,
    },
    /// An import follows a publisher session (a new one if `changed`: the publisher
    /// restarted).
    Established {
        /// The import's index.
        import: usize,
        /// The publisher session it follows.
        session: u64,
        /// Whether it followed another before.
        changed: bool,
    },
    /// An import was refused for good (wrong fingerprint, not allowed, ...).
    Refused {
        /// The import's index.
        import: usize,
        /// Why.
        refusal: Refusal,
    },
    /// An import was refused for now (a full table); it retries with backoff. Once per
    /// episode, until it is established again.
    Retrying {
        /// The import's index.
        import: usize,
        /// Why.
        refusal: Refusal,
    },
    /// A reliable import gave up on messages `first..=last` (they left the publisher's history
    /// or their deadline passed); delivery goes on after them.
    Unrecovered {
        /// The import's index.
        import: usize,
        /// The first message given up.
        first: u64,
        /// The last.
        last: u64,
    },
    /// A schema fetch ([`Endpoint::request_schema`](super::Endpoint::request_schema)) ended
    /// with the topic's shape, which decoded and hashes to `fingerprint`.
    SchemaReceived {
        /// The topic.
        topic_id: u64,
        /// The publisher asked.
        publisher: SocketAddr,
        /// The fingerprint the publisher's data frames carry.
        fingerprint: u64,
        /// The shape.
        shape: llbus::schema::Shape,
    },
    /// A schema fetch ended without a shape.
    SchemaFailed {
        /// The topic.
        topic_id: u64,
        /// The publisher asked.
        publisher: SocketAddr,
        /// Why.
        reason: SchemaFailure,
    },
    /// Discovery follows a publisher of a discovered topic: import `import` subscribes to it.
    Discovered {
        /// The import added.
        import: usize,
        /// The topic.
        topic_id: u64,
        /// The publisher's data address.
        publisher: SocketAddr,
        /// The session it announced.
        session: u64,
    },
    /// A publisher told import `import` that its topic's data also goes to multicast group
    /// `group`: the driver joins it (and hands what arrives there to
    /// [`Endpoint::handle_multicast`](super::Endpoint::handle_multicast)); until group
    /// datagrams arrive, data comes by unicast.
    JoinGroup {
        /// The import.
        import: usize,
        /// The group to join.
        group: SocketAddr,
    },
    /// Discovery stopped following a publisher (it stopped announcing, refused, or did not
    /// answer in time): import `import` was removed.
    Lost {
        /// The import removed.
        import: usize,
        /// The topic.
        topic_id: u64,
        /// The publisher's data address.
        publisher: SocketAddr,
    },
    /// A publisher announces a discovered topic, or a name a discovered pattern matches, with
    /// another schema fingerprint: it is not subscribed to (counted in
    /// [`DiscoveryCounts::mismatched`](super::DiscoveryCounts::mismatched)). Once per topic.
    Mismatched {
        /// The topic's name (as announced: escape it before printing).
        topic: std::sync::Arc<str>,
        /// The topic id.
        topic_id: u64,
        /// The publisher's data address.
        publisher: SocketAddr,
        /// The fingerprint it announced.
        fingerprint: u64,
    },
}

/// Events an endpoint holds for its driver at most: the queue never grows past them.
pub const EVENT_QUEUE: usize = 64;

/// Queues `event` without ever growing the queue past [`EVENT_QUEUE`]: a `SubscribersChanged`
/// already queued for its topic is not queued again, and when the queue is full the oldest
/// event is dropped (a driver that polls after every call never loses one; one that does not
/// poll loses the oldest news, never memory).
pub(crate) fn push_event(events: &mut VecDeque<Event>, event: Event) {
    if matches!(event, Event::SubscribersChanged { .. }) && events.contains(&event) {
        return;
    }
    if events.len() >= EVENT_QUEUE {
        events.pop_front();
    }
    events.push_back(event);
}
