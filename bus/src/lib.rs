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

pub use bus::{Inputs, Wiring};
pub use message::{topic_id, Inbox, Message, TopicSpec};
pub use ring::{
    Consumer, Latest, LatestReader, LatestWriter, Notify, PopError, Producer, PushError, Ring,
};
pub use schema::*;
pub use wait::{
    online_cores, pin_to_core, Backoff, BusySpin, Doorbell, IdleStrategy, Park, PinError,
};
