//! llbus: a low-latency typed message bus.
//!
//! Placeholder crate docs; the full contract is written as the layers land.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod bus;
mod message;
mod schema;

pub use bus::{Inputs, Wiring};
pub use message::{topic_id, Inbox, Message, TopicSpec};
pub use schema::*;
