//! llbus: a low-latency typed message bus.
//!
//! Placeholder crate docs; the full contract is written as the layers land.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod blocking;
mod bus;
mod message;
mod ring;
mod schema;
mod sync;
mod wait;

pub use bus::{
    Actor, ActorBuilder, ActorReport, Backpressure, Bus, BusBuilder, BusError, Context, EdgeReport,
    GroupBuilder, Idle, Inputs, Out, Report, RunningBus, Setup, StartError, StopHandle,
    Supervision, Wiring, DEFAULT_CAPACITY,
};
pub use message::{topic_id, Inbox, Message, TopicSpec};
pub use ring::{
    Consumer, Latest, LatestReader, LatestWriter, Notify, PopError, Producer, PushError, Ring,
};
pub use schema::*;
pub use wait::{
    online_cores, pin_to_core, Backoff, BusySpin, Doorbell, IdleStrategy, Park, PinError,
};

// The derives carry their own docs (topic rule, accepted shapes).
pub use llbus_macros::{Inbox, Message};

// Lets the derives' `::llbus::...` paths resolve inside this crate's own tests.
#[cfg(test)]
extern crate self as llbus;

/// Items the derives' generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use std::vec::Vec;
}
