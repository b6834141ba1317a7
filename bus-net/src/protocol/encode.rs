//! Encoding frames into one caller-provided datagram buffer, without allocating.
//!
//! [`BatchEncoder`] borrows a buffer of the maximum datagram size and appends frames to it:
//! each frame's payload is bincode-encoded straight into place after room for its header, then
//! the header is written in front with the payload length. A frame that does not fit leaves the
//! buffer as it was and says whether an empty datagram would hold it ([`EncodeError::Full`]:
//! send what you have and push again) or never ([`EncodeError::TooLarge`]: refuse it at
//! publish). Nothing is truncated and nothing relies on IP fragmentation.

use serde::Serialize;

use super::header::{Flags, Header, Kind, HEADER_LEN, MAX_DATAGRAM_LIMIT};

/// The header fields of one data message: everything but kind, flags and payload length, which
/// the encoder fills in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataMeta {
    /// The topic id ([`llbus::Message::TOPIC_ID`]).
    pub topic_id: u64,
    /// The schema fingerprint ([`llbus::Message::FINGERPRINT`]).
    pub fingerprint: u64,
    /// The publisher's session id.
    pub session: u64,
    /// The sequence number of this message in its topic and session, from 1.
    pub seq: u64,
    /// Nanoseconds since the UNIX epoch (`CLOCK_REALTIME`), taken by the caller.
    pub timestamp_ns: i64,
}

/// Why a frame was not added to a datagram. The datagram is left as it was.
#[derive(Debug)]
#[non_exhaustive]
pub enum EncodeError {
    /// The frame does not fit in what is left of this datagram but fits in an empty one: send
    /// the datagram, clear the encoder, and push the frame again.
    Full {
        /// The frame's topic id.
        topic: u64,
    },
    /// The frame is larger than a whole datagram: it can never be sent. Refuse it at publish.
    TooLarge {
        /// The frame's topic id.
        topic: u64,
        /// The encoded size of the frame, header included, in bytes.
        size: usize,
        /// The maximum datagram size, in bytes.
        max: usize,
    },
    /// The message is larger than the maximum message size (`ReassemblyConfig::max_message`,
    /// 16 MiB by default): it is never sent, whole or in fragments.
    MessageTooLarge {
        /// The message's topic id.
        topic: u64,
        /// The encoded size of its payload, in bytes.
        size: usize,
        /// The maximum message size, in bytes.
        max: usize,
    },
    /// The payload's `Serialize` impl failed (for example a sequence of unknown length).
    Serialize {
        /// The frame's topic id.
        topic: u64,
        /// What bincode reported.
        source: bincode::error::EncodeError,
    },
}

impl core::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EncodeError::Full { topic } => write!(
                f,
                "datagram full: send it and encode the message of topic {topic:#018x} into the next one"
            ),
            EncodeError::TooLarge { topic, size, max } => write!(
                f,
                "message of topic {topic:#018x} is {size} bytes encoded (header included), more \
                 than the maximum datagram of {max} bytes: make the message smaller or raise the \
                 maximum datagram size (messages are never truncated; only a bridge's exports \
                 split a message into fragments)"
            ),
            EncodeError::MessageTooLarge { topic, size, max } => write!(
                f,
                "message of topic {topic:#018x} is {size} bytes encoded, more than the maximum \
                 message size of {max} bytes: make the message smaller or raise \
                 `reassembly.max_message` of both bridges"
            ),
            EncodeError::Serialize { topic, source } => write!(
                f,
                "message of topic {topic:#018x} failed to serialize ({source}): fix its Serialize \
                 impl (bincode needs sequence lengths up front)"
            ),
        }
    }
}

impl std::error::Error for EncodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EncodeError::Serialize { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A bincode writer that only counts bytes.
struct CountingWriter(usize);

impl bincode::enc::write::Writer for CountingWriter {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(())
    }
}

/// The encoded size of `value` as a payload, in bytes, without writing it anywhere.
///
/// # Errors
/// [`EncodeError::Serialize`] if its `Serialize` impl fails (`topic` names it).
pub fn payload_size<T: Serialize + ?Sized>(topic: u64, value: &T) -> Result<usize, EncodeError> {
    let mut w = CountingWriter(0);
    bincode::serde::encode_into_writer(value, &mut w, super::bincode_config())
        .map_err(|source| EncodeError::Serialize { topic, source })?;
    Ok(w.0)
}

/// Encodes `value` as a payload into `scratch`, which grows to the payload's size if it is
/// smaller (so a buffer kept between messages allocates only for a larger message than it has
/// held), and returns the payload. For messages sent as fragments.
///
/// # Errors
/// [`EncodeError::MessageTooLarge`] if the payload is larger than `max_message` (nothing is
/// allocated then); [`EncodeError::Serialize`] if it cannot be encoded.
pub fn encode_payload<'s, T: Serialize + ?Sized>(
    topic: u64,
    value: &T,
    scratch: &'s mut Vec<u8>,
    max_message: usize,
) -> Result<&'s [u8], EncodeError> {
    let size = payload_size(topic, value)?;
    encode_payload_sized(topic, value, size, scratch, max_message)
}

/// [`encode_payload`] of a value whose payload size is known (from
/// [`EncodeError::TooLarge`]'s `size` less [`HEADER_LEN`]): one pass over the value, not two.
///
/// # Errors
/// As [`encode_payload`]; [`EncodeError::Serialize`] too if `size` was not the value's size.
pub fn encode_payload_sized<'s, T: Serialize + ?Sized>(
    topic: u64,
    value: &T,
    size: usize,
    scratch: &'s mut Vec<u8>,
    max_message: usize,
) -> Result<&'s [u8], EncodeError> {
    if size > max_message {
        return Err(EncodeError::MessageTooLarge {
            topic,
            size,
            max: max_message,
        });
    }
    if scratch.len() < size {
        scratch.resize(size, 0);
    }
    let dst = scratch.get_mut(..size).unwrap_or_default();
    let n = bincode::serde::encode_into_slice(value, dst, super::bincode_config())
        .map_err(|source| EncodeError::Serialize { topic, source })?;
    Ok(scratch.get(..n).unwrap_or_default())
}

/// Checks at publish time that a message fits in a datagram of `max_datagram` bytes on its own.
///
/// # Errors
/// [`EncodeError::TooLarge`] if it never fits; [`EncodeError::Serialize`] if it cannot be
/// encoded at all.
pub fn check_fits<T: Serialize + ?Sized>(
    topic: u64,
    value: &T,
    max_datagram: usize,
) -> Result<(), EncodeError> {
    let size = payload_size(topic, value)?.saturating_add(HEADER_LEN);
    let max = max_datagram.min(MAX_DATAGRAM_LIMIT);
    if size > max {
        return Err(EncodeError::TooLarge { topic, size, max });
    }
    Ok(())
}

/// Appends native frames to one datagram buffer. See the module docs.
///
/// ```
/// use llbus_net::{parse_datagram, decode_payload, BatchEncoder, DataMeta, DEFAULT_MAX_DATAGRAM};
///
/// let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
/// let mut enc = BatchEncoder::new(&mut buf);
/// let meta = DataMeta { topic_id: 7, fingerprint: 9, session: 1, seq: 1, timestamp_ns: 0 };
/// enc.push_data(meta, &(1u32, 2.5f64))?;
/// enc.push_data(DataMeta { seq: 2, ..meta }, &(3u32, 4.5f64))?;
/// let datagram = enc.as_bytes();
///
/// let frames = parse_datagram(datagram, DEFAULT_MAX_DATAGRAM).unwrap();
/// let values: Vec<(u32, f64)> = frames.map(|f| decode_payload(f.payload).unwrap()).collect();
/// assert_eq!(values, [(1, 2.5), (3, 4.5)]);
/// # Ok::<(), llbus_net::EncodeError>(())
/// ```
#[derive(Debug)]
pub struct BatchEncoder<'a> {
    /// The datagram buffer; its length (at most `MAX_DATAGRAM_LIMIT`) is the maximum size.
    buf: &'a mut [u8],
    /// Bytes used: always a sequence of whole, valid frames. Invariant: `len <= buf.len()`.
    len: usize,
    /// Frames in `buf[..len]`.
    frames: usize,
    /// Whether downstream frames get [`Flags::TOKEN`] (the datagram will end with the
    /// subscription token of each destination).
    token: bool,
}

impl<'a> BatchEncoder<'a> {
    /// An empty datagram in `buf`, whose length is the maximum datagram size (anything past
    /// [`MAX_DATAGRAM_LIMIT`] is left unused). Pass `&mut storage[..max_datagram]`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        let cap = buf.len().min(MAX_DATAGRAM_LIMIT);
        let buf = match buf.get_mut(..cap) {
            Some(b) => b,
            None => &mut [],
        };
        BatchEncoder {
            buf,
            len: 0,
            frames: 0,
            token: false,
        }
    }

    /// The same encoder, marking every downstream frame (data, fragment, heartbeat,
    /// unavailable) with [`Flags::TOKEN`]: its datagram is sent with each destination's
    /// subscription token after the last frame (`docs/PROTOCOL.md`, "Subscription tokens").
    /// Leave [`TOKEN_LEN`](super::header::TOKEN_LEN) bytes of room for it.
    pub fn with_token(mut self, token: bool) -> Self {
        self.token = token;
        self
    }

    /// The maximum datagram size, in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes used so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no frame has been added.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Frames added so far.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The datagram so far: the bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// The whole buffer back (the encoder is done with it).
    pub fn into_inner(self) -> &'a mut [u8] {
        self.buf
    }

    /// Empties the datagram (after sending it), keeping the buffer.
    pub fn clear(&mut self) {
        self.len = 0;
        self.frames = 0;
    }

    /// Appends a data frame carrying `value`, bincode-encoded in place.
    ///
    /// # Errors
    /// [`EncodeError::Full`] if it fits only in an empty datagram; [`EncodeError::TooLarge`] if
    /// it fits in none (only computed then, by a second, counting pass); [`EncodeError::Serialize`]
    /// if `value` cannot be encoded. On error the datagram is unchanged.
    pub fn push_data<T: Serialize + ?Sized>(
        &mut self,
        meta: DataMeta,
        value: &T,
    ) -> Result<(), EncodeError> {
        let topic = meta.topic_id;
        let start = self.len;
        let body = start + HEADER_LEN;
        let encoded = match self.buf.get_mut(body..) {
            Some(dst) => bincode::serde::encode_into_slice(value, dst, super::bincode_config()),
            None => Err(bincode::error::EncodeError::UnexpectedEnd),
        };
        let payload_len = match encoded {
            Ok(n) => n,
            Err(bincode::error::EncodeError::UnexpectedEnd) => {
                return Err(self.no_room(topic, value))
            }
            Err(source) => return Err(EncodeError::Serialize { topic, source }),
        };
        let header = Header {
            kind: Kind::Data,
            flags: Flags::NONE,
            // Cannot fail: the payload fits in the buffer, at most MAX_DATAGRAM_LIMIT bytes.
            payload_len: u16::try_from(payload_len).map_err(|_| self.no_room(topic, value))?,
            topic_id: meta.topic_id,
            fingerprint: meta.fingerprint,
            session: meta.session,
            seq: meta.seq,
            timestamp_ns: meta.timestamp_ns,
        };
        self.commit(header, start, payload_len);
        Ok(())
    }

    /// Appends a frame with a raw payload (control frames: see [`super::control`]).
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] as for [`BatchEncoder::push_data`].
    pub(crate) fn push_raw(&mut self, header: Header, payload: &[u8]) -> Result<(), EncodeError> {
        self.push_raw_parts(header, payload, &[])
    }

    /// Appends a frame whose payload is `head` then `tail` (a fragment: its own header, then
    /// its piece of the message).
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] as for [`BatchEncoder::push_data`].
    pub(crate) fn push_raw_parts(
        &mut self,
        mut header: Header,
        head: &[u8],
        tail: &[u8],
    ) -> Result<(), EncodeError> {
        let start = self.len;
        let body = start + HEADER_LEN;
        let topic = header.topic_id;
        let len = head.len().saturating_add(tail.len());
        let dst = match self.buf.get_mut(body..body.saturating_add(len)) {
            Some(dst) => dst,
            None => {
                let size = HEADER_LEN.saturating_add(len);
                return Err(if self.frames > 0 && size <= self.capacity() {
                    EncodeError::Full { topic }
                } else {
                    EncodeError::TooLarge {
                        topic,
                        size,
                        max: self.capacity(),
                    }
                });
            }
        };
        let (a, b) = dst.split_at_mut(head.len());
        a.copy_from_slice(head);
        b.copy_from_slice(tail);
        header.payload_len = len as u16; // fits: at most MAX_DATAGRAM_LIMIT
        self.commit(header, start, len);
        Ok(())
    }

    /// Writes `header` at `start` and accounts for a frame of `payload_len` payload bytes that
    /// is already in place.
    fn commit(&mut self, mut header: Header, start: usize, payload_len: usize) {
        if self.token && header.kind.is_downstream() {
            header.flags = Flags(header.flags.0 | Flags::TOKEN);
        }
        if let Some(head) = self
            .buf
            .get_mut(start..)
            .and_then(|b| b.first_chunk_mut::<HEADER_LEN>())
        {
            header.write(head);
            self.len = start + HEADER_LEN + payload_len;
            self.frames += 1;
            debug_assert!(self.len <= self.buf.len());
        }
    }

    /// The error for a frame that did not fit: `Full` if an empty datagram would hold it.
    #[cold]
    fn no_room<T: Serialize + ?Sized>(&self, topic: u64, value: &T) -> EncodeError {
        let size = match payload_size(topic, value) {
            Ok(n) => n.saturating_add(HEADER_LEN),
            Err(e) => return e,
        };
        if self.frames > 0 && size <= self.capacity() {
            EncodeError::Full { topic }
        } else {
            EncodeError::TooLarge {
                topic,
                size,
                max: self.capacity(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::decode::{decode_payload, parse_datagram};

    fn meta(seq: u64) -> DataMeta {
        DataMeta {
            topic_id: 5,
            fingerprint: 6,
            session: 7,
            seq,
            timestamp_ns: 8,
        }
    }

    #[test]
    fn fills_until_full_then_says_full() {
        let mut buf = [0u8; 200];
        let mut enc = BatchEncoder::new(&mut buf);
        // 48 + 8 = 56 bytes per frame: three fit in 200 bytes, the fourth does not.
        for seq in 1..=3 {
            enc.push_data(meta(seq), &seq).unwrap();
        }
        assert_eq!(enc.len(), 168);
        let before = enc.as_bytes().to_vec();
        match enc.push_data(meta(4), &4u64) {
            Err(EncodeError::Full { topic: 5 }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            enc.as_bytes(),
            &before[..],
            "a failed push leaves the datagram as it was"
        );
        enc.clear();
        enc.push_data(meta(4), &4u64).unwrap();
        assert_eq!(enc.frames(), 1);
    }

    #[test]
    fn too_large_names_topic_size_and_max() {
        let mut buf = [0u8; 100];
        let mut enc = BatchEncoder::new(&mut buf);
        let big = [[7u8; 30]; 2]; // arrays: 60 bytes, no length prefix
        let err = enc.push_data(meta(1), &big).unwrap_err();
        match err {
            EncodeError::TooLarge {
                topic: 5,
                size: 108,
                max: 100,
            } => {}
            ref other => panic!("{other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "message of topic 0x0000000000000005 is 108 bytes encoded (header included), more \
             than the maximum datagram of 100 bytes: make the message smaller or raise the \
             maximum datagram size (messages are never truncated; only a bridge's exports \
             split a message into fragments)"
        );
        assert!(enc.is_empty());
        // The same answer at publish time, without a buffer.
        assert!(matches!(
            check_fits(5, &big, 100),
            Err(EncodeError::TooLarge { size: 108, .. })
        ));
        assert!(check_fits(5, &big, 108).is_ok());
        // Exactly the capacity fits.
        let mut buf = [0u8; 108];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_data(meta(1), &big).unwrap();
        assert_eq!(enc.len(), 108);
    }

    #[test]
    fn too_large_even_after_other_frames() {
        let mut buf = [0u8; 120];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_data(meta(1), &1u8).unwrap();
        assert!(matches!(
            enc.push_data(meta(2), &[[0u8; 25]; 4]),
            Err(EncodeError::TooLarge {
                size: 148,
                max: 120,
                ..
            })
        ));
    }

    #[test]
    fn serialize_failure_is_reported() {
        struct Unsized;
        impl Serialize for Unsized {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                s.serialize_seq(None)?.end()
            }
        }
        let mut buf = [0u8; 100];
        let mut enc = BatchEncoder::new(&mut buf);
        let err = enc.push_data(meta(1), &Unsized).unwrap_err();
        assert!(
            matches!(err, EncodeError::Serialize { topic: 5, .. }),
            "{err:?}"
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn empty_payload_and_tiny_buffers() {
        let mut buf = [0u8; HEADER_LEN];
        let mut enc = BatchEncoder::new(&mut buf);
        enc.push_data(meta(1), &()).unwrap();
        assert_eq!(enc.len(), HEADER_LEN);
        let frames: Vec<_> = parse_datagram(enc.as_bytes(), HEADER_LEN)
            .unwrap()
            .collect();
        assert_eq!(frames[0].payload, &[] as &[u8]);
        assert_eq!(decode_payload::<()>(frames[0].payload), Ok(()));

        let mut none: [u8; 0] = [];
        let mut enc = BatchEncoder::new(&mut none);
        assert!(matches!(
            enc.push_data(meta(1), &()),
            Err(EncodeError::TooLarge { .. })
        ));
    }
}
