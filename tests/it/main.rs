//! The workspace's cross-crate integration tests, one binary.

mod net;
