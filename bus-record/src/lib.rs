//! Recording llbus topics to [MCAP](https://mcap.dev) files, and replaying them into a bus.
//!
//! # Contract
//!
//! - [`Recorder`] is a component: `bus.add(Recorder::new("run.mcap").record::<Quote>())`. Its
//!   actor takes the recorded topics' rings (dropping the newest message when one is full, so
//!   a publisher never waits for it), encodes each message once into a preallocated batch, and
//!   hands batches to a writer thread of its own over a bounded channel. When the writer is
//!   behind, the actor drops batches and counts them ([`RecorderStats::dropped`], the
//!   `recorder_dropped` metric, and gaps in the recorded sequence numbers).
//! - Files are chunked, zstd-compressed by default, with message indexes, a summary and a
//!   footer, so readers can seek. The current chunk is finished at least every
//!   [`flush_every`](Recorder::flush_every), so a recording cut off by a crash or a kill
//!   is readable, by [`read`] or any MCAP reader, up to its last complete chunk. Files rotate
//!   by size or age if asked.
//! - [`FileWriter`] writes the same files message by message, for a tool that has its own
//!   messages (`llbus record`, from the network): a [`Channel`] per topic, then Message records.
//! - [`Replay`] is a component that publishes a recording's messages in recorded order
//!   (per topic always; across topics in [`lockstep`](Replay::lockstep)), at the recorded
//!   pace or as fast as the subscribers take them.
//! - A topic is a name and a type: [`Recorder::record_on`] records named topics, several of one
//!   type, one MCAP channel each, named as the topic runs on the bus (after
//!   [`remap`](llbus::BusBuilder::remap)) with that name's id; [`Replay::topic_on`] publishes
//!   the channel of a name into the topic of that name. Names are resolved when the bus starts:
//!   recording a message looks no name up, hashes nothing and allocates nothing.
//!
//! The mapping (Schema, Channel and Message records) is in docs/RECORDING.md; its names are
//! the constants below ([`SCHEMA_ENCODING`], [`MESSAGE_ENCODING`], ...).
//!
//! # Example
//!
//! ```
//! use llbus::{Bus, Message};
//! use llbus_record::{read, Recorder, Replay};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Message, Serialize, Deserialize, Clone, Debug, PartialEq)]
//! #[message(topic = "md.px")]
//! struct Px(u64);
//!
//! let path = std::env::temp_dir().join(format!("llbus-doc-{}.mcap", std::process::id()));
//! let mut bus = Bus::builder();
//! let px = bus.publisher::<Px>("feed");
//! bus.add(Recorder::new(&path).record::<Px>());
//! let mut running = bus.start()?;
//! let mut publisher = running.publisher(px)?;
//! for i in 0..100 {
//!     publisher.publish(Px(i))?;
//! }
//! drop(publisher);
//! running.stop();
//! running.join()?;
//!
//! let recording = read(&std::fs::read(&path)?);
//! assert_eq!(recording.frames.len(), 100);
//! assert_eq!(recording.frames[7].sequence, 7);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod file;
mod mapping;
mod recorder;
mod replay;
mod writer;

pub use file::{FileOptions, FileWriter};
pub use mapping::{
    read, Frame, RecordedTopic, Recording, GAPS_TOPIC, MAX_RECORD, MESSAGE_ENCODING,
    META_FINGERPRINT, META_PUBLISHER, META_SESSION, META_TOPIC_ID, META_TYPE, RECORDER_METADATA,
    SCHEMA_ENCODING,
};
pub use recorder::{Recorder, RecorderActor, RecorderStats};
pub use replay::{Pace, Replay, ReplayActor, ReplayError};
pub use writer::{Channel, ChannelSchema};
