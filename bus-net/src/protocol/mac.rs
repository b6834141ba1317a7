//! The optional pre-shared-key MAC: a 16-byte tag after the last frame of a datagram, so that
//! only hosts holding the key can subscribe, acknowledge, refuse or (optionally) publish.
//!
//! Algorithm: BLAKE3 in keyed mode ([`blake3::keyed_hash`]) over every byte of the datagram
//! before the tag, truncated to [`MAC_TAG_LEN`] = 16 bytes (128 bits). The MAC key is derived
//! from the pre-shared key with [`blake3::derive_key`] and a context string of its own, so the
//! same secret used for something else yields an unrelated key. Tags are compared in constant
//! time ([`constant_time_eq`]).
//!
//! Wire format (`docs/PROTOCOL.md`, "Pre-shared-key MAC"): every frame of a sealed datagram has
//! [`Flags::MAC`] set, and the datagram ends with the tag. The flags are covered by the tag, so
//! stripping the tag or the flag is noticed.
//!
//! Policy: with a key, control frames are always sealed; data frames are sealed too unless the
//! data MAC is turned off ([`FrameMac::control_only`]), in which case a datagram without a tag
//! is accepted only if it holds nothing but data frames. What the MAC does not give: secrecy
//! (the payload is in clear) and replay protection (a captured datagram verifies again; the
//! sequence tracker drops replayed data as duplicate or stale, and a replayed subscribe still
//! needs a cookie for its source address).
//!
//! Nothing here allocates.

use super::decode::{parse_with, Auth, DropReason, Frames};
use super::header::{Flags, Kind, HEADER_LEN};

/// The length of the MAC tag at the end of a sealed datagram, in bytes.
pub const MAC_TAG_LEN: usize = 16;

/// The context string of the MAC key derivation (BLAKE3 `derive_key`): unique to this use.
const KEY_CONTEXT: &str = "llbus-net 2026-11 ll-udp v1 datagram MAC";

/// Why [`FrameMac::seal`] could not seal a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SealError {
    /// The buffer has no room for the tag after `len` bytes: encode into a buffer
    /// [`MAC_TAG_LEN`] bytes shorter than the maximum datagram size.
    NoRoom {
        /// The datagram length before sealing.
        len: usize,
        /// The buffer's length.
        capacity: usize,
    },
    /// The bytes are not a sequence of whole frames (not made by a `BatchEncoder`).
    Malformed,
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SealError::NoRoom { len, capacity } => write!(
                f,
                "no room for the {MAC_TAG_LEN}-byte MAC tag after {len} bytes in a \
                 {capacity}-byte buffer; encode into a buffer {MAC_TAG_LEN} bytes shorter"
            ),
            SealError::Malformed => f.write_str(
                "cannot seal: the bytes are not whole ll-udp v1 frames; seal what a BatchEncoder made",
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// Seals and opens datagrams with a pre-shared key. See the module docs.
///
/// ```
/// use llbus_net::{BatchEncoder, Control, FrameMac, DEFAULT_MAX_DATAGRAM, MAC_TAG_LEN};
///
/// let mac = FrameMac::new(&[42; 32]);
/// let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
/// // Leave room for the tag.
/// let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
/// enc.push_control(&Control::Heartbeat {
///     topic_id: 1, fingerprint: 2, session: 3, last_seq: 0, timestamp_ns: 0,
/// })?;
/// let len = enc.len();
/// let sealed = mac.seal(&mut buf, len)?;
/// assert_eq!(sealed, len + MAC_TAG_LEN);
/// let frames = mac.open(&buf[..sealed], DEFAULT_MAX_DATAGRAM).unwrap();
/// assert_eq!(frames.count(), 1);
/// // Another key, or a flipped bit, is refused.
/// assert!(FrameMac::new(&[43; 32]).open(&buf[..sealed], DEFAULT_MAX_DATAGRAM).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct FrameMac {
    /// Derived from the pre-shared key; never printed.
    key: [u8; blake3::KEY_LEN],
    /// Whether data frames must be sealed too.
    data: bool,
}

impl core::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrameMac")
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

impl FrameMac {
    /// A MAC with the 32-byte pre-shared key `psk`, sealing control and data frames.
    pub fn new(psk: &[u8; 32]) -> Self {
        FrameMac {
            key: blake3::derive_key(KEY_CONTEXT, psk),
            data: true,
        }
    }

    /// The same key, but data-only datagrams go without a tag (and are accepted without
    /// one): saves the tag's 16 bytes and one hash per data datagram, at the price of
    /// unauthenticated data. Control frames are still always sealed.
    pub fn control_only(mut self) -> Self {
        self.data = false;
        self
    }

    /// Whether data frames are sealed too (the default).
    pub fn seals_data(&self) -> bool {
        self.data
    }

    /// The tag of `bytes`.
    pub fn tag(&self, bytes: &[u8]) -> [u8; MAC_TAG_LEN] {
        let hash = blake3::keyed_hash(&self.key, bytes);
        let mut tag = [0u8; MAC_TAG_LEN];
        if let Some(head) = hash.as_bytes().first_chunk::<MAC_TAG_LEN>() {
            tag = *head;
        }
        tag
    }

    /// Whether `datagram` (frames from a `BatchEncoder`) must be sealed before sending: always
    /// when data is sealed too, otherwise when it holds any frame that is not data.
    pub fn must_seal(&self, datagram: &[u8]) -> bool {
        if self.data {
            return true;
        }
        let mut all_data = true;
        let ok = walk_frames(datagram, |header| all_data &= header[4] == Kind::Data as u8);
        !(ok && all_data)
    }

    /// Seals the datagram in `buf[..len]`: sets [`Flags::MAC`] in every frame header and
    /// writes the tag to `buf[len..len + MAC_TAG_LEN]`. Returns the sealed length.
    ///
    /// # Errors
    /// [`SealError::NoRoom`] if `buf` is shorter than `len + MAC_TAG_LEN`;
    /// [`SealError::Malformed`] if `buf[..len]` is not whole frames. `buf` is unchanged then.
    pub fn seal(&self, buf: &mut [u8], len: usize) -> Result<usize, SealError> {
        let capacity = buf.len();
        let sealed = len
            .checked_add(MAC_TAG_LEN)
            .filter(|&n| n <= capacity)
            .ok_or(SealError::NoRoom { len, capacity })?;
        let (body, rest) = buf.split_at_mut(len);
        if !walk_frames(body, |_| {}) {
            return Err(SealError::Malformed);
        }
        walk_frames_mut(body, |header| header[5] |= Flags::MAC);
        let tag = self.tag(body);
        if let Some(dst) = rest.get_mut(..MAC_TAG_LEN) {
            dst.copy_from_slice(&tag);
        }
        Ok(sealed)
    }

    /// Verifies and opens a received datagram: the receive path when a pre-shared key is
    /// configured (without one, [`parse_datagram`](super::decode::parse_datagram)).
    ///
    /// A datagram whose first frame has [`Flags::MAC`] must end with a valid tag, and every
    /// frame must have the flag. One without it is accepted only if data is not sealed
    /// ([`FrameMac::control_only`]) and it holds only data frames.
    ///
    /// # Errors
    /// [`DropReason::TooLarge`] if longer than `max_datagram`; [`DropReason::BadMac`] for a
    /// missing, wrong or inconsistent tag or flag; otherwise the faults of `parse_datagram`.
    pub fn open<'a>(
        &self,
        datagram: &'a [u8],
        max_datagram: usize,
    ) -> Result<Frames<'a>, DropReason> {
        if datagram.len() > max_datagram {
            return Err(DropReason::TooLarge);
        }
        let flags = datagram.get(5).copied().ok_or(DropReason::Truncated)?;
        if flags & Flags::MAC == 0 {
            if self.data {
                return Err(DropReason::BadMac);
            }
            return parse_with(datagram, max_datagram, Auth::PlainDataOnly);
        }
        let body_len = datagram
            .len()
            .checked_sub(MAC_TAG_LEN)
            .filter(|&n| n >= HEADER_LEN)
            .ok_or(DropReason::BadMac)?;
        let (body, tag) = datagram.split_at(body_len);
        let tag: &[u8; MAC_TAG_LEN] = tag.try_into().map_err(|_| DropReason::BadMac)?;
        if !constant_time_eq::constant_time_eq_16(&self.tag(body), tag) {
            return Err(DropReason::BadMac);
        }
        parse_with(body, max_datagram, Auth::Sealed)
    }
}

/// Calls `f` with each frame header of `bytes`; false if they are not whole frames.
fn walk_frames(bytes: &[u8], mut f: impl FnMut(&[u8; HEADER_LEN])) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some((header, after)) = rest.split_first_chunk::<HEADER_LEN>() else {
            return false;
        };
        f(header);
        let len = usize::from(u16::from_le_bytes([header[6], header[7]]));
        match after.get(len..) {
            Some(next) => rest = next,
            None => return false,
        }
    }
    !bytes.is_empty()
}

/// Like [`walk_frames`], mutably; for bytes `walk_frames` accepted.
fn walk_frames_mut(bytes: &mut [u8], mut f: impl FnMut(&mut [u8; HEADER_LEN])) {
    let mut rest = bytes;
    while let Some((header, after)) = rest.split_first_chunk_mut::<HEADER_LEN>() {
        f(header);
        let len = usize::from(u16::from_le_bytes([header[6], header[7]]));
        match after.get_mut(len..) {
            Some(next) => rest = next,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::control::Control;
    use crate::protocol::cookie::Cookie;
    use crate::protocol::decode::parse_datagram;
    use crate::protocol::encode::{BatchEncoder, DataMeta};
    use crate::protocol::header::DEFAULT_MAX_DATAGRAM;

    const MAX: usize = DEFAULT_MAX_DATAGRAM;

    /// A data frame and a subscribe with a cookie, sealed (or not) with `mac`.
    fn datagram(mac: Option<&FrameMac>, with_control: bool) -> Vec<u8> {
        let mut buf = [0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf[..MAX - MAC_TAG_LEN]);
        let meta = DataMeta {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            seq: 1,
            timestamp_ns: 4,
        };
        enc.push_data(meta, &(7u32, "x")).unwrap();
        if with_control {
            enc.push_control(&Control::Subscribe {
                topic_id: 1,
                fingerprint: 2,
                session: 9,
                nonce: 0x6e6f6e6365,
                cookie: Some(Cookie([5; 16])),
            })
            .unwrap();
        }
        let mut len = enc.len();
        if let Some(mac) = mac {
            if mac.must_seal(&buf[..len]) {
                len = mac.seal(&mut buf, len).unwrap();
            }
        }
        buf[..len].to_vec()
    }

    #[test]
    fn round_trip_and_every_bit_flip_rejected() {
        let mac = FrameMac::new(&[1; 32]);
        let sealed = datagram(Some(&mac), true);
        let frames: Vec<_> = mac.open(&sealed, MAX).unwrap().collect();
        assert_eq!(frames.len(), 2);
        assert!(frames.iter().all(|f| f.header.flags.mac()));
        assert!(matches!(
            Control::from_frame(&frames[1]),
            Ok(Control::Subscribe { cookie: Some(c), .. }) if c == Cookie([5; 16])
        ));
        for i in 0..sealed.len() {
            for bit in 0..8 {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(mac.open(&bad, MAX).is_err(), "flip {i}.{bit} accepted");
            }
        }
    }

    #[test]
    fn missing_wrong_or_unexpected_tag() {
        let mac = FrameMac::new(&[1; 32]);
        let sealed = datagram(Some(&mac), true);
        let plain = datagram(None, true);
        // No tag at all.
        assert_eq!(mac.open(&plain, MAX).err(), Some(DropReason::BadMac));
        // Tag cut off, flags left.
        assert_eq!(
            mac.open(&sealed[..sealed.len() - MAC_TAG_LEN], MAX).err(),
            Some(DropReason::BadMac)
        );
        // Another key.
        assert_eq!(
            FrameMac::new(&[2; 32]).open(&sealed, MAX).err(),
            Some(DropReason::BadMac)
        );
        // A receiver without a key refuses a sealed datagram by name.
        assert_eq!(parse_datagram(&sealed, MAX).err(), Some(DropReason::BadMac));
        // Too short to hold a frame and a tag; empty; too large.
        assert_eq!(mac.open(&sealed[..40], MAX).err(), Some(DropReason::BadMac));
        assert_eq!(mac.open(&[], MAX).err(), Some(DropReason::Truncated));
        assert_eq!(
            mac.open(&sealed, sealed.len() - 1).err(),
            Some(DropReason::TooLarge)
        );
        // A sealed datagram with one frame's flag cleared and a recomputed tag: inconsistent.
        let mut odd = sealed.clone();
        let body = odd.len() - MAC_TAG_LEN;
        // The first frame keeps the flag, the second loses it.
        let second = HEADER_LEN + usize::from(u16::from_le_bytes([odd[6], odd[7]]));
        odd[second + 5] &= !Flags::MAC;
        let tag = mac.tag(&odd[..body]);
        odd[body..].copy_from_slice(&tag);
        assert_eq!(mac.open(&odd, MAX).err(), Some(DropReason::BadMac));
    }

    #[test]
    fn control_only_leaves_data_plain_but_seals_control() {
        let mac = FrameMac::new(&[3; 32]).control_only();
        assert!(!mac.seals_data());
        let data_only = datagram(Some(&mac), false);
        assert_eq!(
            data_only[5] & Flags::MAC,
            0,
            "data-only datagram was sealed"
        );
        assert_eq!(mac.open(&data_only, MAX).unwrap().count(), 1);
        let mixed = datagram(Some(&mac), true);
        assert_ne!(mixed[5] & Flags::MAC, 0);
        assert_eq!(mac.open(&mixed, MAX).unwrap().count(), 2);
        // Control without a tag is refused even when data may go without.
        let plain_mixed = datagram(None, true);
        assert_eq!(mac.open(&plain_mixed, MAX).err(), Some(DropReason::BadMac));
        // With data sealed, a plain data-only datagram is refused.
        assert_eq!(
            FrameMac::new(&[3; 32]).open(&data_only, MAX).err(),
            Some(DropReason::BadMac)
        );
    }

    #[test]
    fn seal_errors_leave_the_buffer_alone() {
        let mac = FrameMac::new(&[4; 32]);
        let plain = datagram(None, false);
        let mut exact = plain.clone();
        assert_eq!(
            mac.seal(&mut exact, plain.len()),
            Err(SealError::NoRoom {
                len: plain.len(),
                capacity: plain.len()
            })
        );
        assert_eq!(exact, plain);
        let mut buf = plain.clone();
        buf.extend_from_slice(&[0; MAC_TAG_LEN]);
        assert_eq!(
            mac.seal(&mut buf, plain.len() - 1),
            Err(SealError::Malformed)
        );
        assert_eq!(mac.seal(&mut buf, 0), Err(SealError::Malformed));
        assert_eq!(&buf[..plain.len()], &plain[..]);
        assert!(SealError::Malformed.to_string().starts_with("cannot seal"));
        assert!(!format!("{mac:?}").contains('4'));
    }
}
