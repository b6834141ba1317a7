//! The llbus network bridge: topics of one bus made to appear on another bus on another host,
//! over UDP, in llbus's own ll-udp v1 dialect or the original ll-udp-pubsub v0.1 format.
//!
//! This crate is a placeholder until the network-bridge issue lands: it only holds these docs.
#![deny(missing_docs)]
