//! Bounded payload decoding: a serde `Deserializer` for the bincode 1.x layout that every
//! llbus payload uses, on the network (`llbus-net`'s datagrams and the ll-udp-pubsub
//! compatibility format) and in shared memory (`llbus-ipc`'s bincode slots): little-endian,
//! fixed-width integers, `u64` length prefixes, `u32` variant indices. No claimed length or
//! element count can cost more than the bytes that carry it (plus a fixed allowance of
//! zero-size elements), whatever the bytes.
//!
//! Not part of llbus's public API: the items are public only so that `llbus-net` and
//! `llbus-ipc` share one decoder, and are hidden from the docs; they may change in any release.
//! A user decodes through `llbus_net::decode_payload` or a `llbus_ipc` receiver.
//!
//! Why not bincode's own decoder: its limit counts bytes claimed, and a sequence of zero-size
//! elements claims none: a 16-byte payload holding a `Vec<()>` of 2^40 elements would be
//! decoded element by element for hours. And serde's `Vec` visitor pre-allocates from the
//! length prefix it is given. Here:
//!
//! - a string or byte string's length must not exceed the bytes left, checked before anything
//!   is allocated, so it allocates at most its own bytes;
//! - a sequence or map's length must not exceed the payload's element budget: every element of
//!   every sequence and map, at any depth, is charged one unit of a budget of as many units as
//!   the payload has bytes plus [`SPARE_ELEMENTS`], when its length is read. An element of a
//!   type that is not zero sized takes at least one byte of its own, so no valid value with at
//!   most [`SPARE_ELEMENTS`] zero-size elements in all is refused (a genuine `vec![(); 3]` has
//!   no bytes after its length prefix); zero-size elements (`Vec<()>`, nested ones included)
//!   cannot claim more than that (a `Vec<()>` of 2^40 is refused as soon as its length is read),
//!   and decoding does at most one step per byte of the payload plus [`SPARE_ELEMENTS`];
//! - no size hint is passed to serde, so a container grows only with elements actually decoded;
//! - values nest at most [`MAX_DEPTH`] levels deep (each sequence, map, `Some`, enum, struct,
//!   tuple and newtype struct is a level): the decoder recurses once per level, so a recursive
//!   type (`enum Tree { Leaf, Node(Box<Tree>) }`) nested as deep as its bytes allow would
//!   otherwise overflow the decoding thread's stack; deeper is [`PayloadError::Invalid`];
//! - every read is bounds-checked; nothing panics, whatever the bytes.
//!
//! The decoder reads exactly what bincode 2.0.1 with `config::legacy()` writes (checked by a
//! round-trip property test against bincode's encoder).

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

/// Why a payload did not decode. Only its kind matters to the callers (the network bridge's
/// `DropReason::Truncated` or `DropReason::PayloadDecode`, a malformed IPC slot). Never
/// allocates: a type's own error message (serde's `custom`) is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadError {
    /// The payload ended inside a value.
    Truncated,
    /// The bytes are not a value of the type.
    Invalid(&'static str),
    /// The type refused the value (serde's `custom` error; its message is dropped).
    Refused,
}

impl core::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PayloadError::Truncated => f.write_str("payload truncated"),
            PayloadError::Invalid(what) => f.write_str(what),
            PayloadError::Refused => f.write_str("the type refused the value"),
        }
    }
}

impl std::error::Error for PayloadError {}

impl de::Error for PayloadError {
    fn custom<T: core::fmt::Display>(_msg: T) -> Self {
        PayloadError::Refused
    }
}

/// How deep values may nest (the module doc): deeper is [`PayloadError::Invalid`]. Far more
/// than any message type nests, and a stack of 128 levels of the decoder's frames is small
/// next to the smallest thread stack a bus or bridge decodes on.
pub const MAX_DEPTH: usize = 128;

/// How many sequence and map elements a payload may hold beyond one per byte (the module doc):
/// room for genuine zero-size elements (`Vec<()>`, unit structs), which take no bytes, while a
/// decode stays bounded by its bytes plus this many steps.
pub const SPARE_ELEMENTS: usize = 4096;

/// Decodes a `T` from the front of `bytes` with the bounded decoder (the module doc): no
/// claimed length or element count costs more than the bytes that carry it (plus 4096
/// zero-size elements), and values nest at most 128 levels. Returns the value and how many
/// bytes were left over (callers that want the whole payload used check it is 0).
///
/// # Errors
/// [`PayloadError::Truncated`] if the bytes end inside a value, [`PayloadError::Invalid`] if
/// they are not a `T`, claim more than they hold or nest deeper than 128 levels,
/// [`PayloadError::Refused`] if `T` refused the value.
pub fn decode_bounded<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, usize), PayloadError> {
    let mut de = PayloadDeserializer::new(bytes);
    let value = T::deserialize(&mut de)?;
    Ok((value, de.remaining()))
}

/// An invalid-value error.
fn error(what: &'static str) -> PayloadError {
    if what == "payload truncated" {
        PayloadError::Truncated
    } else {
        PayloadError::Invalid(what)
    }
}

/// The deserializer over one payload.
struct PayloadDeserializer<'de> {
    input: &'de [u8],
    /// Sequence and map elements that may still be claimed (the module doc).
    elements: usize,
    /// Levels of nesting entered and not yet left; at most [`MAX_DEPTH`].
    depth: usize,
}

impl<'de> PayloadDeserializer<'de> {
    fn new(input: &'de [u8]) -> Self {
        PayloadDeserializer {
            input,
            elements: input.len().saturating_add(SPARE_ELEMENTS),
            depth: 0,
        }
    }

    /// Runs `decode` one nesting level deeper, refusing to go beyond [`MAX_DEPTH`].
    fn nested<R>(
        &mut self,
        decode: impl FnOnce(&mut Self) -> Result<R, PayloadError>,
    ) -> Result<R, PayloadError> {
        if self.depth >= MAX_DEPTH {
            return Err(error("value nested too deep"));
        }
        self.depth += 1;
        let result = decode(self);
        self.depth -= 1;
        result
    }

    /// A sequence or map's length prefix, charged to the element budget. Not checked against
    /// the bytes left: zero-size elements take none.
    fn count(&mut self) -> Result<usize, PayloadError> {
        let len = u64::from_le_bytes(self.array()?);
        let (len, left) = usize::try_from(len)
            .ok()
            .and_then(|len| Some((len, self.elements.checked_sub(len)?)))
            .ok_or(error("more elements than the payload can hold"))?;
        self.elements = left;
        Ok(len)
    }

    /// Bytes not yet read.
    fn remaining(&self) -> usize {
        self.input.len()
    }

    fn take(&mut self, n: usize) -> Result<&'de [u8], PayloadError> {
        if n > self.input.len() {
            return Err(error("payload truncated"));
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PayloadError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A `u64` length prefix, no larger than the bytes left.
    fn len(&mut self) -> Result<usize, PayloadError> {
        let len = u64::from_le_bytes(self.array()?);
        match usize::try_from(len) {
            Ok(len) if len <= self.input.len() => Ok(len),
            _ => Err(error("length prefix larger than the payload")),
        }
    }

    fn bytes(&mut self) -> Result<&'de [u8], PayloadError> {
        let len = self.len()?;
        self.take(len)
    }

    fn str(&mut self) -> Result<&'de str, PayloadError> {
        core::str::from_utf8(self.bytes()?).map_err(|_| error("string not UTF-8"))
    }
}

macro_rules! primitive {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
            visitor.$visit(<$ty>::from_le_bytes(self.array()?))
        }
    };
}

impl<'de> de::Deserializer<'de> for &mut PayloadDeserializer<'de> {
    type Error = PayloadError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, PayloadError> {
        Err(error("the bincode layout is not self-describing"))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        match self.array::<1>()? {
            [0] => visitor.visit_bool(false),
            [1] => visitor.visit_bool(true),
            _ => Err(error("invalid bool")),
        }
    }

    primitive!(deserialize_i8, visit_i8, i8);
    primitive!(deserialize_i16, visit_i16, i16);
    primitive!(deserialize_i32, visit_i32, i32);
    primitive!(deserialize_i64, visit_i64, i64);
    primitive!(deserialize_i128, visit_i128, i128);
    primitive!(deserialize_u8, visit_u8, u8);
    primitive!(deserialize_u16, visit_u16, u16);
    primitive!(deserialize_u32, visit_u32, u32);
    primitive!(deserialize_u64, visit_u64, u64);
    primitive!(deserialize_u128, visit_u128, u128);
    primitive!(deserialize_f32, visit_f32, f32);
    primitive!(deserialize_f64, visit_f64, f64);

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        // UTF-8, 1 to 4 bytes, the width told by the first byte.
        let first = *self
            .input
            .first()
            .ok_or_else(|| error("payload truncated"))?;
        let width = match first {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return Err(error("invalid char")),
        };
        let bytes = self.take(width)?;
        let s = core::str::from_utf8(bytes).map_err(|_| error("invalid char"))?;
        match s.chars().next() {
            Some(c) => visitor.visit_char(c),
            None => Err(error("invalid char")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        visitor.visit_borrowed_str(self.str()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        visitor.visit_borrowed_str(self.str()?)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        match self.array::<1>()? {
            [0] => visitor.visit_none(),
            [1] => self.nested(|de| visitor.visit_some(de)),
            _ => Err(error("invalid option tag")),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        self.nested(|de| visitor.visit_newtype_struct(de))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        let len = self.count()?;
        self.nested(|de| visitor.visit_seq(Elements { de, left: len }))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        // The length is the type's own, not the wire's: no check against the bytes needed.
        self.nested(|de| visitor.visit_seq(Elements { de, left: len }))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, PayloadError> {
        let len = self.count()?;
        self.nested(|de| visitor.visit_map(Elements { de, left: len }))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        self.deserialize_tuple(fields.len(), visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        self.nested(|de| visitor.visit_enum(de))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, PayloadError> {
        Err(error("the bincode layout has no identifiers"))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, PayloadError> {
        Err(error("the bincode layout cannot skip a value"))
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple or map: `left` more to come.
struct Elements<'a, 'de> {
    de: &'a mut PayloadDeserializer<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = PayloadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, PayloadError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    // NB: no `size_hint`: serde's `Vec` visitor would pre-allocate from it. A container grows
    // with the elements actually decoded instead.
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = PayloadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, PayloadError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, PayloadError> {
        seed.deserialize(&mut *self.de)
    }
}

impl<'de> de::EnumAccess<'de> for &mut PayloadDeserializer<'de> {
    type Error = PayloadError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), PayloadError> {
        let index = u32::from_le_bytes(self.array()?);
        let value = seed.deserialize(index.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut PayloadDeserializer<'de> {
    type Error = PayloadError;

    fn unit_variant(self) -> Result<(), PayloadError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, PayloadError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        // The enum already counted this level.
        visitor.visit_seq(Elements {
            de: self,
            left: len,
        })
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PayloadError> {
        self.tuple_variant(fields.len(), visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Side {
        Buy,
        Sell(u8),
        Cross { px: i64, note: String },
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Everything {
        b: bool,
        i: (i8, i16, i32, i64, i128),
        u: (u8, u16, u32, u64, u128),
        f: (f32, f64),
        c: char,
        s: String,
        v: Vec<u32>,
        o: Option<Vec<String>>,
        m: BTreeMap<u16, bool>,
        e: Vec<Side>,
        unit: (),
        arr: [u8; 3],
    }

    fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, PayloadError> {
        match decode_bounded(bytes)? {
            (v, 0) => Ok(v),
            _ => Err(error("bytes left over")),
        }
    }

    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(v, bincode::config::legacy()).unwrap()
    }

    fn side() -> impl Strategy<Value = Side> {
        prop_oneof![
            Just(Side::Buy),
            any::<u8>().prop_map(Side::Sell),
            (any::<i64>(), ".{0,8}").prop_map(|(px, note)| Side::Cross { px, note }),
        ]
    }

    proptest! {
        // Under miri: few cases and no failure file (miri isolates the file system).
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 2 } else { 256 },
            failure_persistence: if cfg!(miri) { None } else { ProptestConfig::default().failure_persistence },
            ..ProptestConfig::default()
        })]

        /// What bincode's legacy encoder writes, this decoder reads back equal.
        #[test]
        fn round_trips_against_bincode(
            b in any::<bool>(),
            i in any::<(i8, i16, i32, i64, i128)>(),
            u in any::<(u8, u16, u32, u64, u128)>(),
            c in any::<char>(),
            s in ".{0,20}",
            v in proptest::collection::vec(any::<u32>(), 0..20),
            o in proptest::option::of(proptest::collection::vec(".{0,4}", 0..4)),
            m in proptest::collection::btree_map(any::<u16>(), any::<bool>(), 0..6),
            e in proptest::collection::vec(side(), 0..5),
            arr in any::<[u8; 3]>(),
        ) {
            let value = Everything { b, i, u, f: (1.5, -2.25), c, s, v, o, m, e, unit: (), arr };
            let bytes = encode(&value);
            prop_assert_eq!(decode::<Everything>(&bytes), Ok(value));
            // Any strict prefix fails cleanly.
            for cut in 0..bytes.len() {
                prop_assert!(decode::<Everything>(&bytes[..cut]).is_err());
            }
        }

        /// Arbitrary bytes never panic.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode::<Everything>(&bytes);
            let _ = decode::<Vec<String>>(&bytes);
            let _ = decode::<BTreeMap<u64, Vec<u8>>>(&bytes);
        }
    }

    #[test]
    fn claimed_lengths_larger_than_the_payload_are_refused() {
        // 8-byte length prefixes claiming more than is left: refused before any allocation.
        let mut huge = (1u64 << 40).to_le_bytes().to_vec();
        huge.push(0);
        assert!(decode::<Vec<u64>>(&huge).is_err());
        assert!(decode::<String>(&huge).is_err());
        assert!(decode::<Vec<u8>>(&huge).is_err());
        assert!(decode::<BTreeMap<u8, u8>>(&huge).is_err());
        // Exactly as long as the bytes left: fine.
        let mut ok = 3u64.to_le_bytes().to_vec();
        ok.extend_from_slice(b"abc");
        assert_eq!(decode::<String>(&ok), Ok("abc".to_owned()));
        // Zero-size elements cannot claim more than the payload's bytes plus the spare.
        let units = ((8 + SPARE_ELEMENTS + 1) as u64).to_le_bytes();
        assert!(decode::<Vec<()>>(&units).is_err());
        // Nor, nested, more than that in all: 8 inner vectors each claiming 1024 units would be
        // 8192 steps from a 72-byte payload.
        let mut nested = 8u64.to_le_bytes().to_vec();
        for _ in 0..8 {
            nested.extend_from_slice(&1024u64.to_le_bytes());
        }
        assert!(decode::<Vec<Vec<()>>>(&nested).is_err());
        // As many units as the budget is fine.
        let mut few = ((10 + SPARE_ELEMENTS) as u64).to_le_bytes().to_vec();
        few.extend_from_slice(&[0; 2]);
        assert!(decode::<(Vec<()>, u16)>(&few).is_ok());
        // Bad bools, option tags, chars, UTF-8.
        assert!(decode::<bool>(&[2]).is_err());
        assert!(decode::<Option<u8>>(&[2, 0]).is_err());
        assert!(decode::<char>(&[0xff]).is_err());
        let mut bad = 1u64.to_le_bytes().to_vec();
        bad.push(0xff);
        assert!(decode::<String>(&bad).is_err());
    }

    /// A recursive type for the depth limit.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Tree {
        Leaf,
        Node(Box<Tree>),
    }

    /// `Node` `depth` times, then `Leaf`: `depth + 1` enum levels.
    fn chain(depth: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(4 * (depth + 1));
        for _ in 0..depth {
            bytes.extend_from_slice(&1u32.to_le_bytes());
        }
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes
    }

    #[test]
    fn values_nested_deeper_than_the_limit_are_refused_not_recursed_into() {
        let mut tree = Tree::Leaf;
        for _ in 0..MAX_DEPTH - 1 {
            tree = Tree::Node(Box::new(tree));
        }
        // As deep as allowed: decodes, and equals what bincode wrote.
        let bytes = encode(&tree);
        assert_eq!(bytes, chain(MAX_DEPTH - 1));
        assert_eq!(decode::<Tree>(&bytes), Ok(tree));
        // One level deeper: refused.
        assert_eq!(
            decode::<Tree>(&chain(MAX_DEPTH)),
            Err(PayloadError::Invalid("value nested too deep"))
        );
        // A million levels (a 4 MiB payload): refused, on a small stack, without overflowing it.
        let deep = chain(1 << 20);
        let refused = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || decode::<Tree>(&deep).is_err())
            .map(|t| t.join());
        assert!(matches!(refused, Ok(Ok(true))), "{refused:?}");
        // Options and newtypes are levels too: `k` times `Some` then `None` is `k + 1` newtype
        // levels and `k` option levels.
        let some = |k: usize| {
            let mut bytes = vec![1u8; k];
            bytes.push(0);
            bytes
        };
        assert!(decode::<Opt>(&some((MAX_DEPTH - 1) / 2)).is_ok());
        assert_eq!(
            decode::<Opt>(&some(MAX_DEPTH / 2)).map(|_| ()),
            Err(PayloadError::Invalid("value nested too deep"))
        );
    }

    /// A recursive option: `Some` levels only.
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Opt(Option<Box<Opt>>);

    #[test]
    fn genuine_zero_size_elements_decode_as_bincode_wrote_them() {
        // No bytes follow the length prefix of a sequence of zero-size elements.
        for v in [vec![()], vec![(); 3], vec![(); SPARE_ELEMENTS]] {
            assert_eq!(decode::<Vec<()>>(&encode(&v)), Ok(v));
        }
        let nested = vec![vec![(); 100]; 40];
        assert_eq!(decode::<Vec<Vec<()>>>(&encode(&nested)), Ok(nested));
        let mut map = BTreeMap::new();
        map.insert((), ());
        assert_eq!(decode::<BTreeMap<(), ()>>(&encode(&map)), Ok(map));
        // Past the spare, a claim is refused as soon as its length is read.
        let too_many = vec![(); SPARE_ELEMENTS + 9];
        assert!(decode::<Vec<()>>(&encode(&too_many)).is_err());
        assert!(decode::<Vec<()>>(&u64::MAX.to_le_bytes()).is_err());
    }
}
