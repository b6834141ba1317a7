//! The optional pre-shared-key MAC: a 32-byte trailer after the last frame of a datagram, so
//! that only hosts holding the key can subscribe, acknowledge, refuse or (optionally) publish,
//! and a captured datagram cannot be replayed (as IPsec's ESP and WireGuard bind a packet
//! number into the tag and keep a sliding window of numbers seen).
//!
//! Trailer (`docs/PROTOCOL.md`, "Pre-shared-key MAC"), [`MAC_TAG_LEN`] = 32 bytes:
//!
//! | offset | size | field                                                    |
//! |-------:|-----:|----------------------------------------------------------|
//! | 0      | 1    | key id (which pre-shared key sealed it; keys rotate)      |
//! | 1      | 1    | lane: which of the sender's sealers (0 the bridge, 1.. its direct senders) |
//! | 2      | 6    | zero                                                     |
//! | 8      | 8    | packet number, `u64` LE, from 1, per (sender session, lane) |
//! | 16     | 16   | tag                                                      |
//!
//! Algorithm: BLAKE3 in keyed mode over every byte of the datagram before the tag (frames and
//! the first 16 bytes of the trailer), truncated to 16 bytes. Each key id has two MAC keys,
//! derived from its pre-shared key with [`blake3::derive_key`] and a context string per
//! *direction*: one for what publishers send (data, heartbeat, challenge, acknowledgement,
//! refusal, schema reply), one for what subscribers send (subscribe, unsubscribe, NAK, schema
//! request). A sealed datagram holds frames of one direction and one sender session; so the
//! tag binds direction, session (in every frame header) and packet number. Tags are compared in constant time.
//!
//! Replay: the receiver keeps a [`ReplayGuard`], a window of the last 128 packet numbers per
//! (sender session, lane), like IPsec's (RFC 4303 §3.4.3). A number seen before or older than
//! the window is dropped ([`DropReason::Replayed`]), as is a datagram that claims the
//! receiver's own session (a reflection). The window is updated only after the tag verified.
//!
//! Policy: with a key, control frames are always sealed; data frames are sealed too unless the
//! data MAC is turned off ([`FrameMac::control_only`]), in which case a datagram without a
//! trailer is accepted only if it holds nothing but data frames (and has no replay protection
//! beyond the sequence tracker's). What the MAC does not give: secrecy (the payload is in
//! clear).
//!
//! Nothing here allocates after construction.

use std::cell::Cell;

use super::decode::{parse_with, Auth, DropReason, Frames};
use super::header::{Flags, Kind, HEADER_LEN};

/// The length of the MAC trailer at the end of a sealed datagram (key id, lane, packet number
/// and the 16-byte tag), in bytes: the room to keep for it.
pub const MAC_TAG_LEN: usize = 32;

/// The length of the tag itself, the last bytes of the trailer.
const TAG: usize = 16;

/// The context strings of the MAC key derivations (BLAKE3 `derive_key`), one per direction.
const TO_SUBSCRIBER: &str = "llbus-net 2026-11 ll-udp v2 MAC publisher-to-subscriber";
const TO_PUBLISHER: &str = "llbus-net 2026-11 ll-udp v2 MAC subscriber-to-publisher";

/// How many key ids one [`FrameMac`] accepts at once.
pub const MAX_KEYS: usize = 4;

/// Why [`FrameMac::seal`] could not seal a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SealError {
    /// The buffer has no room for the trailer after `len` bytes: encode into a buffer
    /// [`MAC_TAG_LEN`] bytes shorter than the maximum datagram size.
    NoRoom {
        /// The datagram length before sealing.
        len: usize,
        /// The buffer's length.
        capacity: usize,
    },
    /// The bytes are not a sequence of whole frames (not made by a `BatchEncoder`), or they
    /// mix directions or sender sessions.
    Malformed,
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SealError::NoRoom { len, capacity } => write!(
                f,
                "no room for the {MAC_TAG_LEN}-byte MAC trailer after {len} bytes in a \
                 {capacity}-byte buffer; encode into a buffer {MAC_TAG_LEN} bytes shorter"
            ),
            SealError::Malformed => f.write_str(
                "cannot seal: the bytes are not whole native frames of one direction and one \
                 session; seal what a BatchEncoder made",
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// The two MAC keys of one key id.
#[derive(Clone)]
struct KeySet {
    id: u8,
    to_subscriber: [u8; blake3::KEY_LEN],
    to_publisher: [u8; blake3::KEY_LEN],
}

impl KeySet {
    fn new(id: u8, psk: &[u8; 32]) -> Self {
        KeySet {
            id,
            to_subscriber: blake3::derive_key(TO_SUBSCRIBER, psk),
            to_publisher: blake3::derive_key(TO_PUBLISHER, psk),
        }
    }

    fn key(&self, to_publisher: bool) -> &[u8; blake3::KEY_LEN] {
        if to_publisher {
            &self.to_publisher
        } else {
            &self.to_subscriber
        }
    }
}

/// Where a verified datagram came from, for the replay check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealInfo {
    /// The sender's session id (every frame's).
    pub session: u64,
    /// The sender's lane.
    pub lane: u8,
    /// The packet number.
    pub packet: u64,
    /// The key id that sealed it.
    pub key_id: u8,
}

/// Seals and opens datagrams with a pre-shared key. See the module docs.
///
/// ```
/// use llbus_net::{BatchEncoder, Control, FrameMac, ReplayGuard, DEFAULT_MAX_DATAGRAM, MAC_TAG_LEN};
///
/// let mac = FrameMac::new(&[42; 32]);
/// let mut buf = [0u8; DEFAULT_MAX_DATAGRAM];
/// // Leave room for the trailer.
/// let mut enc = BatchEncoder::new(&mut buf[..DEFAULT_MAX_DATAGRAM - MAC_TAG_LEN]);
/// enc.push_control(&Control::Heartbeat {
///     topic_id: 1, fingerprint: 2, session: 3, last_seq: 0, timestamp_ns: 0,
/// })?;
/// let len = enc.len();
/// let sealed = mac.seal(&mut buf, len)?;
/// assert_eq!(sealed, len + MAC_TAG_LEN);
/// let mut guard = ReplayGuard::new(9, 16);
/// let frames = mac.open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard).unwrap();
/// assert_eq!(frames.count(), 1);
/// // The same datagram again is a replay; another key, or a flipped bit, is refused.
/// assert!(mac.open_once(&buf[..sealed], DEFAULT_MAX_DATAGRAM, &mut guard).is_err());
/// assert!(FrameMac::new(&[43; 32]).open(&buf[..sealed], DEFAULT_MAX_DATAGRAM).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct FrameMac {
    /// The keys accepted, by id; `keys[0]` seals. Never printed.
    keys: Vec<KeySet>,
    /// Whether data frames must be sealed too.
    data: bool,
    /// This sealer's lane.
    lane: u8,
    /// The last packet number sealed on this lane.
    sealed: Cell<u64>,
}

impl core::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FrameMac")
            .field("data", &self.data)
            .field(
                "key_ids",
                &self.keys.iter().map(|k| k.id).collect::<Vec<_>>(),
            )
            .field("lane", &self.lane)
            .finish_non_exhaustive()
    }
}

impl FrameMac {
    /// A MAC with the 32-byte pre-shared key `psk` as key id 0, sealing control and data.
    pub fn new(psk: &[u8; 32]) -> Self {
        FrameMac::with_key_id(0, psk)
    }

    /// A MAC sealing with `psk` under key id `id`.
    pub fn with_key_id(id: u8, psk: &[u8; 32]) -> Self {
        FrameMac {
            keys: vec![KeySet::new(id, psk)],
            data: true,
            lane: 0,
            sealed: Cell::new(0),
        }
    }

    /// Also accepts datagrams sealed with `psk` under key id `id` (not used to seal): the step
    /// of a key rotation in which peers still seal with the old key. At most [`MAX_KEYS`] keys;
    /// a further one, or an id already present, is ignored (and logged).
    pub fn also_accept(mut self, id: u8, psk: &[u8; 32]) -> Self {
        if self.keys.len() >= MAX_KEYS || self.keys.iter().any(|k| k.id == id) {
            log::warn!("MAC key id {id} not added: duplicate id or more than {MAX_KEYS} keys");
            return self;
        }
        self.keys.push(KeySet::new(id, psk));
        self
    }

    /// The same keys on sealing lane `lane`, its packet numbers from 1: each sender sharing a
    /// session id (the bridge, each direct sender) seals on a lane of its own.
    pub fn for_lane(&self, lane: u8) -> Self {
        FrameMac {
            keys: self.keys.clone(),
            data: self.data,
            lane,
            sealed: Cell::new(0),
        }
    }

    /// The same key, but data-only datagrams go without a trailer (and are accepted without
    /// one): saves 32 bytes and one hash per data datagram, at the price of unauthenticated
    /// data. Control frames are still always sealed.
    pub fn control_only(mut self) -> Self {
        self.data = false;
        self
    }

    /// Whether data frames are sealed too (the default).
    pub fn seals_data(&self) -> bool {
        self.data
    }

    /// Whether `datagram` (frames from a `BatchEncoder`) must be sealed before sending: always
    /// when data is sealed too, otherwise when it holds any frame that is not data.
    pub fn must_seal(&self, datagram: &[u8]) -> bool {
        if self.data {
            return true;
        }
        let mut all_data = true;
        let ok = walk_frames(datagram, |header| {
            all_data &= header[4] == Kind::Data as u8 || header[4] == Kind::Fragment as u8
        });
        !(ok && all_data)
    }

    /// Seals the datagram in `buf[..len]`: sets [`Flags::MAC`] in every frame header and
    /// writes the trailer (key id, lane, the next packet number, tag) to
    /// `buf[len..len + MAC_TAG_LEN]`. Returns the sealed length.
    ///
    /// # Errors
    /// [`SealError::NoRoom`] if `buf` is shorter than `len + MAC_TAG_LEN`;
    /// [`SealError::Malformed`] if `buf[..len]` is not whole frames of one direction and one
    /// session. `buf` is unchanged then.
    pub fn seal(&self, buf: &mut [u8], len: usize) -> Result<usize, SealError> {
        let capacity = buf.len();
        let sealed = len
            .checked_add(MAC_TAG_LEN)
            .filter(|&n| n <= capacity)
            .ok_or(SealError::NoRoom { len, capacity })?;
        let (body, rest) = buf.split_at_mut(len);
        let to_publisher = uniform(body).ok_or(SealError::Malformed)?;
        let Some(keys) = self.keys.first() else {
            return Err(SealError::Malformed);
        };
        walk_frames_mut(body, |header| header[5] |= Flags::MAC);
        let packet = self.sealed.get().wrapping_add(1);
        self.sealed.set(packet);
        let Some(trailer) = rest.get_mut(..MAC_TAG_LEN) else {
            return Err(SealError::NoRoom { len, capacity });
        };
        trailer.fill(0);
        trailer[0] = keys.id;
        trailer[1] = self.lane;
        trailer[8..16].copy_from_slice(&packet.to_le_bytes());
        let mut hasher = blake3::Hasher::new_keyed(keys.key(to_publisher));
        hasher.update(body);
        hasher.update(&trailer[..MAC_TAG_LEN - TAG]);
        let hash = hasher.finalize();
        if let Some(tag) = hash.as_bytes().first_chunk::<TAG>() {
            trailer[MAC_TAG_LEN - TAG..].copy_from_slice(tag);
        }
        Ok(sealed)
    }

    /// Verifies and opens a received datagram, without the replay check (see
    /// [`FrameMac::open_once`], which the bridge uses): for tools and tests.
    ///
    /// # Errors
    /// As [`FrameMac::open_once`], but for `Replayed`.
    pub fn open<'a>(
        &self,
        datagram: &'a [u8],
        max_datagram: usize,
    ) -> Result<Frames<'a>, DropReason> {
        self.verify(datagram, max_datagram)
            .map(|(frames, _)| frames)
    }

    /// Verifies and opens a received datagram and checks it against `guard` (replay window):
    /// the receive path when a pre-shared key is configured (without one,
    /// [`parse_datagram`](super::decode::parse_datagram)).
    ///
    /// A datagram whose first frame has [`Flags::MAC`] must end with a valid trailer under a
    /// known key id, every frame must have the flag, and all must be of one direction and one
    /// session. One without it is accepted only if data is not sealed
    /// ([`FrameMac::control_only`]) and it holds only data frames.
    ///
    /// # Errors
    /// [`DropReason::TooLarge`] if longer than `max_datagram`; [`DropReason::BadMac`] for a
    /// missing, wrong or inconsistent trailer or flag, or an unknown key id;
    /// [`DropReason::Replayed`] for a packet number seen before, older than the window, or a
    /// datagram claiming the receiver's own session; otherwise the faults of `parse_datagram`.
    pub fn open_once<'a>(
        &self,
        datagram: &'a [u8],
        max_datagram: usize,
        guard: &mut ReplayGuard,
    ) -> Result<Frames<'a>, DropReason> {
        let (frames, info) = self.verify(datagram, max_datagram)?;
        if let Some(info) = info {
            guard.check(info)?;
        }
        Ok(frames)
    }

    fn verify<'a>(
        &self,
        datagram: &'a [u8],
        max_datagram: usize,
    ) -> Result<(Frames<'a>, Option<SealInfo>), DropReason> {
        if datagram.len() > max_datagram {
            return Err(DropReason::TooLarge);
        }
        let flags = datagram.get(5).copied().ok_or(DropReason::Truncated)?;
        if flags & Flags::MAC == 0 {
            if self.data {
                return Err(DropReason::BadMac);
            }
            let frames = parse_with(datagram, max_datagram, Auth::PlainDataOnly)?;
            return Ok((frames, None));
        }
        let body_len = datagram
            .len()
            .checked_sub(MAC_TAG_LEN)
            .filter(|&n| n >= HEADER_LEN)
            .ok_or(DropReason::BadMac)?;
        let (body, trailer) = datagram.split_at(body_len);
        let trailer: &[u8; MAC_TAG_LEN] = trailer.try_into().map_err(|_| DropReason::BadMac)?;
        let [key_id, lane, z0, z1, z2, z3, z4, z5, p0, p1, p2, p3, p4, p5, p6, p7, tag @ ..] =
            *trailer;
        if [z0, z1, z2, z3, z4, z5] != [0; 6] {
            return Err(DropReason::BadMac);
        }
        let keys = self
            .keys
            .iter()
            .find(|k| k.id == key_id)
            .ok_or(DropReason::BadMac)?;
        // Direction and session from the first frame; `uniform` checks the rest below.
        let to_publisher = body.get(4).is_some_and(|&k| is_to_publisher(k));
        let mut hasher = blake3::Hasher::new_keyed(keys.key(to_publisher));
        hasher.update(body);
        hasher.update(&trailer[..MAC_TAG_LEN - TAG]);
        let hash = hasher.finalize();
        let expected = hash
            .as_bytes()
            .first_chunk::<TAG>()
            .ok_or(DropReason::BadMac)?;
        if !constant_time_eq::constant_time_eq_16(expected, &tag) {
            return Err(DropReason::BadMac);
        }
        let frames = parse_with(body, max_datagram, Auth::Sealed)?;
        if uniform(body) != Some(to_publisher) {
            return Err(DropReason::BadMac);
        }
        let session = body
            .get(24..32)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(DropReason::BadMac)?;
        let info = SealInfo {
            session,
            lane,
            packet: u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7]),
            key_id,
        };
        Ok((frames, Some(info)))
    }
}

/// Whether frame kind `kind` goes from a subscriber to a publisher (each direction has its
/// own key).
fn is_to_publisher(kind: u8) -> bool {
    kind == Kind::Subscribe as u8
        || kind == Kind::Unsubscribe as u8
        || kind == Kind::Nak as u8
        || kind == Kind::SchemaRequest as u8
        || kind == Kind::Request as u8
}

/// The direction of whole frames of one direction and one session (`true`: subscriber to
/// publisher), or `None` if they are not whole frames, mix directions or sessions.
fn uniform(bytes: &[u8]) -> Option<bool> {
    let mut first: Option<(bool, [u8; 8])> = None;
    let mut same = true;
    let ok = walk_frames(bytes, |header| {
        let to_publisher = is_to_publisher(header[4]);
        let mut session = [0u8; 8];
        session.copy_from_slice(&header[24..32]);
        match first {
            None => first = Some((to_publisher, session)),
            Some(f) => same &= f == (to_publisher, session),
        }
    });
    match first {
        Some((to_publisher, _)) if ok && same => Some(to_publisher),
        _ => None,
    }
}

/// The width of the replay window, in packet numbers.
pub const REPLAY_WINDOW: u64 = 128;

/// One (sender session, lane)'s window.
#[derive(Clone, Copy, Debug)]
struct ReplayWindow {
    session: u64,
    lane: u8,
    /// The highest packet number accepted.
    highest: u64,
    /// Bit `i` set: `highest - i` was accepted.
    seen: u128,
    /// When it was last used (the guard's clock of checks), to evict the least recent.
    used: u64,
}

/// The receiver's replay windows, one per (sender session, lane), at most `capacity` of them
/// (the least recently used is evicted: only key holders can create one). See the module docs.
#[derive(Clone, Debug)]
pub struct ReplayGuard {
    own_session: u64,
    windows: Vec<ReplayWindow>,
    capacity: usize,
    clock: u64,
}

impl ReplayGuard {
    /// A guard for a receiver whose own session id is `own_session` (a datagram claiming it is
    /// a reflection), tracking up to `capacity` senders. Allocates once, here.
    pub fn new(own_session: u64, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        ReplayGuard {
            own_session,
            windows: Vec::with_capacity(capacity),
            capacity,
            clock: 0,
        }
    }

    /// Checks a verified datagram's packet number and records it.
    ///
    /// # Errors
    /// [`DropReason::Replayed`] if it was seen, is older than the window, or claims the
    /// receiver's own session.
    pub fn check(&mut self, info: SealInfo) -> Result<(), DropReason> {
        if info.session == self.own_session {
            return Err(DropReason::Replayed);
        }
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        if let Some(w) = self
            .windows
            .iter_mut()
            .find(|w| w.session == info.session && w.lane == info.lane)
        {
            w.used = clock;
            let pn = info.packet;
            if pn > w.highest {
                let shift = pn - w.highest;
                w.seen = if shift >= REPLAY_WINDOW {
                    0
                } else {
                    w.seen << shift
                };
                w.seen |= 1;
                w.highest = pn;
                return Ok(());
            }
            let age = w.highest - pn;
            if age >= REPLAY_WINDOW {
                return Err(DropReason::Replayed);
            }
            let bit = 1u128 << age;
            if w.seen & bit != 0 {
                return Err(DropReason::Replayed);
            }
            w.seen |= bit;
            return Ok(());
        }
        let fresh = ReplayWindow {
            session: info.session,
            lane: info.lane,
            highest: info.packet,
            seen: 1,
            used: clock,
        };
        if self.windows.len() < self.capacity {
            self.windows.push(fresh);
        } else if let Some(oldest) = self.windows.iter_mut().min_by_key(|w| w.used) {
            *oldest = fresh;
        }
        Ok(())
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

    fn meta(seq: u64) -> DataMeta {
        DataMeta {
            topic_id: 1,
            fingerprint: 2,
            session: 3,
            seq,
            timestamp_ns: 4,
        }
    }

    /// Two data frames and a heartbeat of session 3 (publisher to subscriber), sealed (or not)
    /// with `mac`.
    fn datagram(mac: Option<&FrameMac>, with_control: bool) -> Vec<u8> {
        let mut buf = [0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf[..MAX - MAC_TAG_LEN]);
        enc.push_data(meta(1), &(7u32, "x")).unwrap();
        enc.push_data(meta(2), &(8u32, "y")).unwrap();
        if with_control {
            enc.push_control(&Control::Heartbeat {
                topic_id: 1,
                fingerprint: 2,
                session: 3,
                last_seq: 2,
                timestamp_ns: 0,
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

    fn subscribe(session: u64) -> Vec<u8> {
        let mut buf = [0u8; MAX];
        let mut enc = BatchEncoder::new(&mut buf[..MAX - MAC_TAG_LEN]);
        enc.push_control(&Control::Subscribe {
            topic_id: 1,
            fingerprint: 2,
            session,
            nonce: 5,
            cookie: Some(Cookie([5; 16])),
        })
        .unwrap();
        enc.as_bytes().to_vec()
    }

    fn seal(mac: &FrameMac, plain: &[u8]) -> Vec<u8> {
        let mut buf = plain.to_vec();
        buf.resize(plain.len() + MAC_TAG_LEN, 0);
        let n = mac.seal(&mut buf, plain.len()).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn round_trip_and_every_bit_flip_rejected() {
        let mac = FrameMac::new(&[1; 32]);
        let sealed = datagram(Some(&mac), true);
        let frames: Vec<_> = mac.open(&sealed, MAX).unwrap().collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f.header.flags.mac()));
        for i in 0..sealed.len() {
            for bit in 0..8 {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(mac.open(&bad, MAX).is_err(), "flip {i}.{bit} accepted");
            }
        }
    }

    #[test]
    fn replays_and_reflections_are_refused_in_window() {
        let mac = FrameMac::new(&[1; 32]);
        let mut guard = ReplayGuard::new(99, 4);
        let first = datagram(Some(&mac), false);
        let second = datagram(Some(&mac), false);
        assert!(mac.open_once(&second, MAX, &mut guard).is_ok());
        // Late but inside the window: accepted once.
        assert!(mac.open_once(&first, MAX, &mut guard).is_ok());
        for replay in [&first, &second] {
            assert_eq!(
                mac.open_once(replay, MAX, &mut guard).err(),
                Some(DropReason::Replayed)
            );
        }
        // Far older than the window.
        let mut later = Vec::new();
        for _ in 0..REPLAY_WINDOW + 1 {
            later = datagram(Some(&mac), false);
        }
        assert!(mac.open_once(&later, MAX, &mut guard).is_ok());
        let stale = first;
        assert_eq!(
            mac.open_once(&stale, MAX, &mut guard).err(),
            Some(DropReason::Replayed)
        );
        // A datagram claiming the receiver's own session (3) is a reflection.
        let mut own = ReplayGuard::new(3, 4);
        assert_eq!(
            mac.open_once(&datagram(Some(&mac), false), MAX, &mut own)
                .err(),
            Some(DropReason::Replayed)
        );
    }

    #[test]
    fn lanes_keep_their_own_windows() {
        let mac = FrameMac::new(&[1; 32]);
        let direct = mac.for_lane(1);
        let mut guard = ReplayGuard::new(99, 4);
        // Both start at packet number 1: distinct lanes, both accepted.
        assert!(mac
            .open_once(&datagram(Some(&mac), false), MAX, &mut guard)
            .is_ok());
        assert!(mac
            .open_once(&datagram(Some(&direct), false), MAX, &mut guard)
            .is_ok());
    }

    #[test]
    fn direction_is_bound() {
        let mac = FrameMac::new(&[1; 32]);
        let sealed = seal(&mac, &subscribe(7));
        assert!(mac.open(&sealed, MAX).is_ok());
        // Same bytes with the kind turned into a publisher's frame (a challenge, same layout):
        // the tag was made with the other direction's key.
        let mut turned = sealed.clone();
        turned[4] = Kind::CookieChallenge as u8;
        assert_eq!(mac.open(&turned, MAX).err(), Some(DropReason::BadMac));
        // Mixed directions or sessions cannot be sealed.
        let mut mixed = datagram(None, true);
        mixed.extend_from_slice(&subscribe(3));
        let mut buf = mixed.clone();
        buf.resize(mixed.len() + MAC_TAG_LEN, 0);
        assert_eq!(mac.seal(&mut buf, mixed.len()), Err(SealError::Malformed));
        let mut two = subscribe(7);
        two.extend_from_slice(&subscribe(8));
        let mut buf = two.clone();
        buf.resize(two.len() + MAC_TAG_LEN, 0);
        assert_eq!(mac.seal(&mut buf, two.len()), Err(SealError::Malformed));
    }

    #[test]
    fn key_ids_rotate() {
        let old = FrameMac::with_key_id(1, &[1; 32]);
        let new = FrameMac::with_key_id(2, &[2; 32]);
        let both = FrameMac::with_key_id(2, &[2; 32]).also_accept(1, &[1; 32]);
        let by_old = datagram(Some(&old), false);
        let by_new = datagram(Some(&new), false);
        assert!(both.open(&by_old, MAX).is_ok());
        assert!(both.open(&by_new, MAX).is_ok());
        assert_eq!(old.open(&by_new, MAX).err(), Some(DropReason::BadMac));
        assert_eq!(new.open(&by_old, MAX).err(), Some(DropReason::BadMac));
        // The same key under another id is another key id: refused.
        let renamed = FrameMac::with_key_id(3, &[1; 32]);
        assert_eq!(renamed.open(&by_old, MAX).err(), Some(DropReason::BadMac));
        assert!(!format!("{both:?}").contains("[2, 2"));
    }

    #[test]
    fn missing_wrong_or_unexpected_trailer() {
        let mac = FrameMac::new(&[1; 32]);
        let sealed = datagram(Some(&mac), true);
        let plain = datagram(None, true);
        assert_eq!(mac.open(&plain, MAX).err(), Some(DropReason::BadMac));
        assert_eq!(
            mac.open(&sealed[..sealed.len() - MAC_TAG_LEN], MAX).err(),
            Some(DropReason::BadMac)
        );
        assert_eq!(
            FrameMac::new(&[2; 32]).open(&sealed, MAX).err(),
            Some(DropReason::BadMac)
        );
        assert_eq!(parse_datagram(&sealed, MAX).err(), Some(DropReason::BadMac));
        assert_eq!(mac.open(&sealed[..40], MAX).err(), Some(DropReason::BadMac));
        assert_eq!(mac.open(&[], MAX).err(), Some(DropReason::Truncated));
        assert_eq!(
            mac.open(&sealed, sealed.len() - 1).err(),
            Some(DropReason::TooLarge)
        );
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
        assert_eq!(mac.open(&data_only, MAX).unwrap().count(), 2);
        let mixed = datagram(Some(&mac), true);
        assert_ne!(mixed[5] & Flags::MAC, 0);
        assert_eq!(mac.open(&mixed, MAX).unwrap().count(), 3);
        let plain_mixed = datagram(None, true);
        assert_eq!(mac.open(&plain_mixed, MAX).err(), Some(DropReason::BadMac));
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
    }
}
