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
