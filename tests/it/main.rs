//! The tests that cross crates, in one binary: modules by subject.

mod ipc;
mod net;
