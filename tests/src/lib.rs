//! Shared helpers for llbus's cross-crate integration tests.
