//! Lock-free single-producer single-consumer queues: the bottom layer of llbus. They know nothing
//! of messages, topics or threads.
//!
//! - [`spsc`]: the bounded ring queue every bus edge uses (Lamport's buffer with cached indices).
//! - [`latest`]: a triple buffer that keeps only the newest value (the `Latest` policy).
//! - [`broadcast`]: one producer, several readers that each get every value, the slowest gating
//!   the producer (the disruptor's broadcast), with writes published in runs (the bus's
//!   `Block` fan-out).
//! - [`slotted`]: the bounded ring with a header in each cache line of slots, whose hop moves
//!   one line (an option beside `spsc`; see its docs and docs/PERFORMANCE.md).

pub(crate) mod broadcast;
pub(crate) mod latest;
pub(crate) mod slotted;
pub(crate) mod spsc;

#[cfg(all(test, loom))]
mod loom_models;
#[cfg(all(test, not(loom)))]
mod tests;

pub use broadcast::{Broadcast, BroadcastProducer, BroadcastReader};
pub use latest::{Latest, LatestReader, LatestWriter};
pub use slotted::{SlotConsumer, SlotProducer, SlotRing};
pub use spsc::{Consumer, Notify, PopError, Producer, PushError, Ring, TryPushError};
