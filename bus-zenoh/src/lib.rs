//! A zenoh gateway for llbus topics: selected local topics go out to zenoh key expressions, and
//! samples of key expressions come in as messages of local topics, so that llbus processes
//! reach each other (and clients in any language, and ROS 2 on `rmw_zenoh`) across routed
//! networks, NATs and WANs through Eclipse Zenoh's routers, discovery, access control and TLS.
//!
//! # Contract
//!
//! - **Off the hot path.** Zenoh's runtime never runs on the bus's threads. An export is an
//!   external [`Subscription`](llbus::Subscription) with `DropNewest` backpressure read by a
//!   gateway thread of its own, which `put`s: a publisher never waits for zenoh, and what the
//!   gateway cannot take in time is counted `dropped` on that edge by the bus. An import is an
//!   external [`Publisher`](llbus::Publisher) that zenoh's subscriber callback publishes into
//!   with `try_publish`: a full ring drops and counts (on the edge), it never blocks zenoh.
//! - **What a sample says.** Its zenoh encoding (`application/x-llbus-bincode` or
//!   `application/json`, with the topic name as the encoding's schema) and an attachment in a
//!   fixed 40-byte little-endian layout ([`Attachment`]): topic id, fingerprint, stream id,
//!   sequence number, send time. The layout is documented in docs/ZENOH.md.
//! - **What an import refuses, and counts.** A sample of another topic or fingerprint is
//!   refused with an error naming the topic and both fingerprints (once per stream, kept in
//!   [`Gateway::errors`], which holds one line per topic and kind of error with a count and the
//!   latest message, and logged once per topic and kind; then counted); a sample without a
//!   valid attachment, of an unknown encoding, or whose payload does not decode (bincode
//!   through [`llbus::decode_bounded`], so a hostile length cannot make it allocate) is
//!   counted malformed. It never panics on what the network sends. A gap in a stream's sequence numbers
//!   is counted lost; a jump of more than [`MAX_JUMP`] is not (a claim, as the UDP bridge
//!   holds one, until a second sample confirms it and the stream starts over there).
//! - **Stop.** An export's thread puts everything its subscription delivers until the bus has
//!   exited and its rings are empty, so a stop loses nothing uncounted: a message is put, or
//!   counted by the bus (`dropped` when the gateway fell behind, `lost` if the gateway was
//!   closed before the bus), or counted by the gateway (`zenoh.put_failed`). A sample that
//!   arrives once the bus is stopping is counted `zenoh.stopped`. Close the gateway after the
//!   bus: `stop()`, `join()`, then [`Gateway::close`].
//! - **Live counters.** Each export and import is a handle of the bus with named metrics
//!   (`zenoh.put`, `zenoh.put_failed`, `zenoh.received`, `zenoh.refused`, `zenoh.malformed`,
//!   `zenoh.lost`, `zenoh.stopped`, `zenoh.late`), shown in the bus's report and its live
//!   counters file like any other figure; [`Gateway::counts`] sums them, with `received` as
//!   the sum of its outcomes so that its figures balance in every reading.
//! - **Named topics.** [`GatewayBuilder::export_on`] and [`GatewayBuilder::import_on`] take a
//!   [`Topic`](llbus::Topic): one key per name (`llbus/<name>`, by the name the topic runs
//!   under once the bus's remaps apply), the attachment's topic id the name's; `export::<T>` and
//!   `import::<T>` are these for the type's default topic. Names are resolved at
//!   [`GatewayBuilder::start`]; no sample's path looks one up.
//! - **Zenoh is configured the zenoh way**: a [`zenoh::Config`] (its JSON5 file, or built) is
//!   handed to [`GatewayBuilder::start`].
//!
//! # Example
//!
//! ```no_run
//! use llbus::{Bus, Message};
//! use llbus_zenoh::{Export, Gateway};
//!
//! #[derive(Message, Clone, Debug, serde::Serialize, serde::Deserialize)]
//! #[message(topic = "demo.tick")]
//! struct Tick(u64);
//!
//! let mut bus = Bus::builder();
//! let tx = bus.publisher::<Tick>("main");
//! let mut gateway = Gateway::builder();
//! gateway.export::<Tick>(&mut bus, Export::new()); // on key `llbus/demo.tick`
//! let mut running = bus.start()?;
//! let config = llbus_zenoh::zenoh::Config::from_file("zenoh.json5")?;
//! let gateway = gateway.start(&mut running, config)?;
//! running.publisher(tx)?.publish(Tick(1))?;
//! running.stop();
//! running.join()?;
//! let counts = gateway.close();
//! # let _ = counts;
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
#![deny(missing_docs)]

mod attachment;
mod errors;
mod export;
mod gateway;
mod import;
pub mod service;

pub use attachment::{Attachment, ATTACHMENT_LEN};
pub use export::{Export, PayloadEncoding, BINCODE_ENCODING, SCHEMA_SUFFIX};
pub use gateway::{Counts, Gateway, GatewayBuilder, GatewayError, DEFAULT_PREFIX};
pub use import::{Import, Verdict, Verdicts, MAX_JUMP, MAX_STREAMS};
pub use service::{ServiceExport, ServiceImport, DEFAULT_CALL_TIMEOUT, ERROR_CODES};

/// The zenoh crate the gateway is built with, so that a user configures the same version.
pub use zenoh;

/// Nanoseconds since the UNIX epoch now (`CLOCK_REALTIME`), as the attachment's send time: 0 if
/// the clock is before the epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
