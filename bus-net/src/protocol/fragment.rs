//! The `Fragment` frame: one piece of a message too large for one datagram
//! (`docs/PROTOCOL.md`, "Large messages").
//!
//! A message whose encoded payload does not fit in an empty datagram is split into `count`
//! pieces of `chunk` bytes (the last one shorter), each sent as a frame of kind `Fragment` in
//! a datagram of its own sealing, never relying on IP fragmentation. Every fragment takes a
//! sequence number of its own in the topic's stream, consecutive within a message, so a lost
//! fragment is one missing number: a reliable topic NAKs and retransmits exactly it, a
//! best-effort one counts it lost. The message's first fragment has number `seq - index`,
//! which is how the receiver groups fragments.
//!
//! Payload layout (little-endian), in front of the piece of the message:
//!
//! | offset | size | field                                                       |
//! |-------:|-----:|-------------------------------------------------------------|
//! | 0      | 4    | total: the message's payload length in bytes, `u32`         |
//! | 4      | 4    | chunk: the length of every fragment but the last, `u32`     |
//! | 8      | 4    | index: this fragment's place, from 0, `u32`                 |
//! | 12     | 4    | count: the message's fragments, `u32`                       |
//! | 16     | ...  | bytes `index * chunk ..` of the message's payload           |
//!
//! The fields must agree with each other and with the piece's length, so that fragments can
//! only tile the message exactly (no gap, no overlap): `chunk >= 1`, `count ==
//! ceil(total / chunk)`, `index < count`, and the piece is `chunk` bytes long, except the last
//! one, which is `total - (count - 1) * chunk` bytes. Anything else is
//! [`DropReason::BadFragment`].

use super::decode::DropReason;
use super::encode::{BatchEncoder, DataMeta, EncodeError};
use super::header::{Flags, Header, Kind, HEADER_LEN};

/// The length of a fragment's own header, in front of its piece of the message.
pub const FRAGMENT_HEADER_LEN: usize = 16;

/// The default maximum message size: 16 MiB of encoded payload.
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// Where one fragment belongs in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentHeader {
    /// The message's payload length in bytes.
    pub total: u32,
    /// The length of every fragment but the last.
    pub chunk: u32,
    /// This fragment's place, from 0.
    pub index: u32,
    /// The message's fragments.
    pub count: u32,
}

impl FragmentHeader {
    /// The fragments of a `total`-byte message cut in `chunk`-byte pieces: `None` if `chunk`
    /// is 0 or the counts do not fit the wire's `u32` fields.
    pub fn plan(total: usize, chunk: usize) -> Option<(u32, u32, u32)> {
        if chunk == 0 {
            return None;
        }
        let count = u32::try_from(total.div_ceil(chunk).max(1)).ok()?;
        Some((
            u32::try_from(total).ok()?,
            u32::try_from(chunk).ok()?,
            count,
        ))
    }

    /// Where this fragment's piece starts in the message.
    pub fn offset(&self) -> usize {
        self.index as usize * self.chunk as usize
    }

    /// The length the piece of fragment `index` must have.
    pub fn piece_len(&self) -> usize {
        if self.index + 1 < self.count {
            self.chunk as usize
        } else {
            (self.total as usize).saturating_sub(self.offset())
        }
    }

    /// Writes the 16 bytes.
    pub fn write(&self, out: &mut [u8; FRAGMENT_HEADER_LEN]) {
        out[0..4].copy_from_slice(&self.total.to_le_bytes());
        out[4..8].copy_from_slice(&self.chunk.to_le_bytes());
        out[8..12].copy_from_slice(&self.index.to_le_bytes());
        out[12..16].copy_from_slice(&self.count.to_le_bytes());
    }

    /// Reads and checks a fragment payload: its header and its piece of the message.
    ///
    /// # Errors
    /// [`DropReason::BadFragment`] if the payload is shorter than the header or the fields
    /// disagree (module docs).
    pub fn parse(payload: &[u8]) -> Result<(FragmentHeader, &[u8]), DropReason> {
        let (head, piece) = payload
            .split_first_chunk::<FRAGMENT_HEADER_LEN>()
            .ok_or(DropReason::BadFragment)?;
        let word = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&head[at..at + 4]);
            u32::from_le_bytes(w)
        };
        let h = FragmentHeader {
            total: word(0),
            chunk: word(4),
            index: word(8),
            count: word(12),
        };
        let count = u64::from(h.total)
            .div_ceil(u64::from(h.chunk.max(1)))
            .max(1);
        if h.chunk == 0
            || u64::from(h.count) != count
            || h.index >= h.count
            || piece.len() != h.piece_len()
        {
            return Err(DropReason::BadFragment);
        }
        Ok((h, piece))
    }
}

impl BatchEncoder<'_> {
    /// Appends a `Fragment` frame: `fragment`'s header, then `piece` (its bytes of the message).
    ///
    /// # Errors
    /// [`EncodeError::Full`] or [`EncodeError::TooLarge`] as for
    /// [`BatchEncoder::push_data`]. The datagram is unchanged then.
    pub fn push_fragment(
        &mut self,
        meta: DataMeta,
        fragment: &FragmentHeader,
        piece: &[u8],
    ) -> Result<(), EncodeError> {
        let header = Header {
            kind: Kind::Fragment,
            flags: Flags::NONE,
            payload_len: 0,
            topic_id: meta.topic_id,
            fingerprint: meta.fingerprint,
            session: meta.session,
            seq: meta.seq,
            timestamp_ns: meta.timestamp_ns,
        };
        let mut head = [0u8; FRAGMENT_HEADER_LEN];
        fragment.write(&mut head);
        self.push_raw_parts(header, &head, piece)
    }
}

/// The fragments of `payload` in datagrams of `room` bytes: each fragment's header and piece,
/// in order. `None` if `room` leaves no byte for a piece or the payload is longer than
/// `u32::MAX` bytes.
pub fn split_fragments(
    payload: &[u8],
    room: usize,
) -> Option<impl Iterator<Item = (FragmentHeader, &[u8])> + '_> {
    let (total, chunk, count) = FragmentHeader::plan(payload.len(), fragment_room(room))?;
    Some((0..count).map(move |index| {
        let h = FragmentHeader {
            total,
            chunk,
            index,
            count,
        };
        let at = h.offset();
        (h, payload.get(at..at + h.piece_len()).unwrap_or_default())
    }))
}

/// The piece of the message each fragment can carry in a datagram of `room` bytes.
pub const fn fragment_room(room: usize) -> usize {
    room.saturating_sub(HEADER_LEN + FRAGMENT_HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::decode::parse_datagram;

    fn header(total: u32, chunk: u32, index: u32, count: u32) -> [u8; 16] {
        let mut b = [0u8; 16];
        FragmentHeader {
            total,
            chunk,
            index,
            count,
        }
        .write(&mut b);
        b
    }

    fn payload(h: [u8; 16], piece: usize) -> Vec<u8> {
        let mut p = h.to_vec();
        p.resize(16 + piece, 0xab);
        p
    }

    #[test]
    fn fields_must_tile_the_message() {
        // 10 bytes in pieces of 4: 4, 4, 2.
        for (index, len) in [(0, 4), (1, 4), (2, 2)] {
            let p = payload(header(10, 4, index, 3), len);
            let (h, piece) = FragmentHeader::parse(&p).unwrap();
            assert_eq!(
                (h.index, h.offset(), piece.len()),
                (index, 4 * index as usize, len)
            );
        }
        let bad = [
            payload(header(10, 4, 0, 3), 3),  // short piece
            payload(header(10, 4, 2, 3), 4),  // last piece too long
            payload(header(10, 4, 3, 3), 0),  // index out of range
            payload(header(10, 4, 0, 2), 4),  // count disagrees with total / chunk
            payload(header(10, 4, 0, 4), 4),  // count disagrees (too many)
            payload(header(10, 0, 0, 1), 10), // chunk 0
            header(10, 4, 0, 3)[..15].to_vec(),
            Vec::new(),
        ];
        for p in bad {
            assert_eq!(
                FragmentHeader::parse(&p),
                Err(DropReason::BadFragment),
                "{p:?}"
            );
        }
        // u32::MAX everywhere: no overflow, refused.
        let p = payload(header(u32::MAX, 1, u32::MAX, u32::MAX), 1);
        assert_eq!(FragmentHeader::parse(&p), Err(DropReason::BadFragment));
        let p = payload(header(u32::MAX, 1, u32::MAX - 1, u32::MAX), 1);
        assert!(FragmentHeader::parse(&p).is_ok());
    }

    #[test]
    fn encoded_fragment_round_trips() {
        let mut buf = [0u8; 200];
        let mut enc = BatchEncoder::new(&mut buf);
        let meta = DataMeta {
            topic_id: 5,
            fingerprint: 6,
            session: 7,
            seq: 9,
            timestamp_ns: 8,
        };
        let h = FragmentHeader {
            total: 300,
            chunk: 136,
            index: 1,
            count: 3,
        };
        assert_eq!(fragment_room(200), 136);
        enc.push_fragment(meta, &h, &[3; 136]).unwrap();
        assert_eq!(enc.len(), 200);
        let frame = parse_datagram(enc.as_bytes(), 200).unwrap().next().unwrap();
        assert_eq!(frame.header.kind, Kind::Fragment);
        assert_eq!(frame.header.seq, 9);
        let (back, piece) = FragmentHeader::parse(frame.payload).unwrap();
        assert_eq!((back, piece), (h, &[3u8; 136][..]));
        assert!(matches!(
            enc.push_fragment(meta, &h, &[0; 1]),
            Err(EncodeError::Full { .. })
        ));
        assert_eq!(FragmentHeader::plan(300, 136), Some((300, 136, 3)));
        assert_eq!(FragmentHeader::plan(300, 0), None);
    }
}
