//! Derive macros for [llbus](https://docs.rs/llbus): `#[derive(Message)]` and
//! `#[derive(Inbox)]`.
//!
//! This crate is a placeholder until the derive-macro issue lands: it only holds these docs.
//! Users will not depend on it directly; `llbus` re-exports its derives.
