//! The demo's messages, which the publisher and subscriber examples share as two programs of one
//! system share a crate: the subscriber's bridge refuses a type whose fingerprint differs from
//! the publisher's.

use llbus::Message;
use serde::{Deserialize, Serialize};

/// The counter in llbus's own format (native).
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "demo.counter")]
pub struct Counter {
    /// The counter's value: 0, 1, 2, ...
    pub n: u64,
    /// `CLOCK_REALTIME` when the feed published it, for the subscriber's one-way latency.
    pub sent_ns: i64,
    /// `--size` bytes derived from `n` ([`crate::payload::fill`]).
    pub payload: Vec<u8>,
}

/// The counter in the ll-udp-pubsub v0.1 format: exactly a bincode `i64` on the wire
/// (`transparent`, so serde sees the `i64` itself, not a one-field struct).
#[derive(Message, Serialize, Deserialize, Clone, Copy, Debug)]
#[message(topic = "demo.count")]
#[serde(transparent)]
pub struct Count(pub i64);

/// An order to check before it is sent: the `service` and `caller` examples' request.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "demo.risk")]
pub struct RiskCheck {
    /// The account the order is for.
    pub account: u32,
    /// Signed quantity (negative: sell).
    pub qty: i64,
    /// Limit price.
    pub px: f64,
}

/// The risk check's answer.
#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "demo.risk.verdict")]
pub struct RiskVerdict {
    /// Whether the order may go.
    pub approved: bool,
    /// What the account may still use, after this order if approved.
    pub limit_left: f64,
    /// Why not, when refused.
    pub reason: String,
}

/// The demo's service: `RiskCheck` answered with `RiskVerdict`, named `demo.risk`.
pub fn risk_service() -> llbus::Service<RiskCheck, RiskVerdict> {
    llbus::Service::of()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compat payload is exactly a bincode `i64`: a datagram is 16 bytes, `data` then
    /// `sent_ts`, as ll-udp-pubsub's own `Packet<i64>`.
    #[test]
    fn compat_count_is_sixteen_bytes_on_the_wire() {
        let mut buf = [0u8; 1472];
        let n = llbus_net::encode_compat_packet(&mut buf, Count::TOPIC_ID, &Count(-2), 7).unwrap();
        assert_eq!(n, 16);
        assert_eq!(buf[..8], (-2i64).to_le_bytes());
        assert_eq!(buf[8..16], 7i64.to_le_bytes());
    }
}
