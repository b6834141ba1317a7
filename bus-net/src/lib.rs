//! placeholder
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod protocol;

pub use protocol::compat::{decode_compat_packet, encode_compat_packet, CompatControl};
pub use protocol::control::{Control, Refusal, RefuseReason, REFUSE_PAYLOAD_LEN};
pub use protocol::decode::{decode_payload, parse_datagram, DropCounts, DropReason, Frame, Frames};
pub use protocol::encode::{check_fits, payload_size, BatchEncoder, DataMeta, EncodeError};
pub use protocol::header::{
    Flags, Header, Kind, DEFAULT_MAX_DATAGRAM, HEADER_LEN, MAGIC, MAX_DATAGRAM_LIMIT, VERSION,
};
pub use protocol::seq::{LatePolicy, LossCounts, SeqTracker, Verdict, WINDOW};
pub use protocol::subscribers::{Renewal, Subscriber, SubscriberTable, DEFAULT_SUBSCRIBER_TIMEOUT};
pub use protocol::PAYLOAD_DECODE_LIMIT;

mod io;
pub use io::{IoStats, RecvBatch, SendBatch, SocketConfig, UdpEndpoint};
