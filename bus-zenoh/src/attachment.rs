//! The attachment of every sample the gateway puts: what the sample is, in a fixed 40-byte
//! little-endian layout (docs/ZENOH.md, "Attachment").
//!
//! ```text
//! offset  size  field
//!      0     8  topic id      (llbus::topic_id of the topic name)
//!      8     8  fingerprint   (the message type's schema fingerprint)
//!     16     8  stream id     (random, chosen by each export when it starts)
//!     24     8  sequence      (0, 1, 2, ... per stream: a gap is a loss)
//!     32     8  send time     (nanoseconds since the UNIX epoch, CLOCK_REALTIME, at the put)
//! ```
//!
//! Pure code: no zenoh, no clock. A layout of any other length is refused (a later layout
//! gets another length, so an old reader counts it malformed instead of misreading it).

/// The attachment's length in bytes.
pub const ATTACHMENT_LEN: usize = 40;

/// What a sample says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The topic id ([`llbus::topic_id`] of the topic name).
    pub topic_id: u64,
    /// The schema fingerprint of the message type.
    pub fingerprint: u64,
    /// The export stream's id: random per export and start, so that a restarted exporter's
    /// sequence numbers are not taken for a loss.
    pub stream: u64,
    /// The sample's sequence number within its stream.
    pub sequence: u64,
    /// When it was put, in nanoseconds since the UNIX epoch.
    pub sent_ns: u64,
}

impl Attachment {
    /// The attachment's bytes.
    pub fn encode(&self) -> [u8; ATTACHMENT_LEN] {
        let mut out = [0u8; ATTACHMENT_LEN];
        let fields = [
            self.topic_id,
            self.fingerprint,
            self.stream,
            self.sequence,
            self.sent_ns,
        ];
        for (chunk, v) in out.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The attachment in `bytes`, or `None` if they are not exactly one.
    pub fn decode(bytes: &[u8]) -> Option<Attachment> {
        if bytes.len() != ATTACHMENT_LEN {
            return None;
        }
        let mut words = bytes.chunks_exact(8).map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        });
        Some(Attachment {
            topic_id: words.next()?,
            fingerprint: words.next()?,
            stream: words.next()?,
            sequence: words.next()?,
            sent_ns: words.next()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of docs/ZENOH.md, byte for byte.
    #[test]
    fn layout_matches_the_documented_vector() {
        let a = Attachment {
            topic_id: 0x0102_0304_0506_0708,
            fingerprint: 0x1112_1314_1516_1718,
            stream: 0x2122_2324_2526_2728,
            sequence: 5,
            sent_ns: 0x3132_3334_3536_3738,
        };
        let bytes = a.encode();
        assert_eq!(
            bytes,
            [
                0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, //
                0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, //
                0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, //
                0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
                0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,
            ]
        );
        assert_eq!(Attachment::decode(&bytes), Some(a));
    }

    #[test]
    fn any_other_length_is_refused() {
        let bytes = [0u8; ATTACHMENT_LEN + 1];
        for n in 0..bytes.len() {
            assert_eq!(
                Attachment::decode(&bytes[..n]).is_some(),
                n == ATTACHMENT_LEN
            );
        }
    }
}
