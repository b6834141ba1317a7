//! The generic decoder: bincode bytes plus a [`Shape`] to a [`Value`] tree, without the Rust
//! type.
//!
//! It reads the layout bincode 1 (and bincode 2's `config::legacy()`, which the bus's network
//! and IPC codecs use) writes for serde types: little-endian fixed-width integers, `usize` and
//! `isize` as 8 bytes, `char` as its UTF-8 bytes, `bool` and the `Option` tag as one byte that is
//! 0 or 1, `u64` lengths before strings, vectors and maps, a `u32` variant index before an enum's
//! fields, nothing before tuples, arrays and structs.
//!
//! # Contract
//!
//! Untrusted bytes are refused with a [`DecodeError`], never a panic: a short input, bytes left
//! over, an invalid `bool`, tag, variant index, UTF-8 or `char`, a length that claims more
//! elements than the rest of the input has bytes, a shape nested deeper than
//! [`MAX_DEPTH`](super::MAX_DEPTH), a tree of more than [`VALUES_PER_BYTE`] values per input
//! byte plus [`SPARE_VALUES`], where each field or variant name copied into the tree counts as
//! one more value per [`NAME_BYTES_PER_VALUE`] bytes of it. The last bound caps the tree's size
//! (names included: a shape's names may be long, and a message of no bytes may repeat one many
//! times), strings are copies of input bytes, so the decoder allocates in proportion to
//! `bytes.len()`. Both bounds on lengths refuse
//! what bincode accepts only for zero-sized elements (`Vec<()>` longer than the rest of the
//! input, `[(); 1_000_000]`), which no message carries.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::shape::{Fields, Primitive, Shape, MAX_DEPTH};

/// A decoded value: serde's data model without the Rust type.
///
/// Its [`Serialize`] makes the same serializer calls as the original type's derived impl,
/// except that struct and variant names are written as map keys (serde wants them `'static`), so
/// `serde_json::to_value(&value)` equals `serde_json::to_value(&original)`: structs are objects,
/// newtype structs their inner value, unit structs and `()` null, enums externally tagged (`"V"`,
/// `{"V": ...}`), `None` null and `Some(x)` `x`. One exception, so that every value has a JSON
/// form: a map with a key that is not a string, a character, an integer or a unit variant (a
/// tuple, a struct, ...) is written as a sequence of `[key, value]` pairs, where the original
/// type fails in JSON.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // Each number variant holds the Rust type of its name.
pub enum Value {
    /// `()`, a unit struct.
    Unit,
    Bool(bool),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    F32(f32),
    F64(f64),
    Char(char),
    /// A string.
    Str(String),
    /// `Option<T>`.
    Option(Option<Box<Value>>),
    /// A vector, array, tuple or tuple struct.
    Seq(Vec<Value>),
    /// A map's entries in wire order.
    Map(Vec<(Value, Value)>),
    /// A struct with named fields, in declaration order.
    Record(Vec<(String, Value)>),
    /// An enum variant; `None` for a unit variant.
    Variant {
        /// The variant's name.
        name: String,
        /// Its fields: the single field of a newtype variant, a [`Value::Seq`] or a
        /// [`Value::Record`].
        value: Option<Box<Value>>,
    },
}

impl Value {
    /// Whether every self-describing format takes this value as a map key: a string, a
    /// character, an integer or a unit variant (written as its name).
    fn is_map_key(&self) -> bool {
        matches!(
            self,
            Value::Str(_)
                | Value::Char(_)
                | Value::U8(_)
                | Value::U16(_)
                | Value::U32(_)
                | Value::U64(_)
                | Value::U128(_)
                | Value::I8(_)
                | Value::I16(_)
                | Value::I32(_)
                | Value::I64(_)
                | Value::I128(_)
                | Value::Variant { value: None, .. }
        )
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Unit => s.serialize_unit(),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::U8(v) => s.serialize_u8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::U128(v) => s.serialize_u128(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::I128(v) => s.serialize_i128(*v),
            Value::F32(v) => s.serialize_f32(*v),
            Value::F64(v) => s.serialize_f64(*v),
            Value::Char(v) => s.serialize_char(*v),
            Value::Str(v) => s.serialize_str(v),
            Value::Option(None) => s.serialize_none(),
            Value::Option(Some(v)) => s.serialize_some(v),
            Value::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Map(entries) if entries.iter().all(|(key, _)| key.is_map_key()) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            Value::Map(entries) => {
                // Keys JSON cannot hold (tuples, structs): `[key, value]` pairs instead.
                let mut seq = s.serialize_seq(Some(entries.len()))?;
                for entry in entries {
                    seq.serialize_element(&(&entry.0, &entry.1))?;
                }
                seq.end()
            }
            Value::Record(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (name, value) in fields {
                    map.serialize_entry(name, value)?;
                }
                map.end()
            }
            Value::Variant { name, value: None } => s.serialize_str(name),
            Value::Variant {
                name,
                value: Some(value),
            } => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(name, value)?;
                map.end()
            }
        }
    }
}

/// Why bytes did not decode as a shape.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends inside a value.
    Short {
        /// Where the value that did not fit starts.
        at: usize,
    },
    /// The value ends before the input does.
    Trailing {
        /// How many bytes are left over.
        left: usize,
    },
    /// A length prefix claims more elements than the rest of the input has bytes.
    Length {
        /// Where the length is.
        at: usize,
        /// What it claims.
        len: u64,
    },
    /// A byte sequence that is not valid where it is.
    Invalid {
        /// Where it starts.
        at: usize,
        /// What was expected: `"bool"`, `"option tag"`, `"variant index"`, `"utf-8"`, `"char"`.
        what: &'static str,
    },
    /// The shape nests deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    TooDeep,
    /// The value has more parts than the input's size allows: more than
    /// [`VALUES_PER_BYTE`] per byte plus [`SPARE_VALUES`] (zero-sized parts repeated by a
    /// length or an array).
    TooMany,
    /// The shape is [`Shape::Opaque`]: nothing is known of its layout.
    Opaque {
        /// Its fingerprint.
        fingerprint: u64,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short { at } => write!(f, "input ends inside the value at byte {at}"),
            DecodeError::Trailing { left } => {
                write!(f, "{left} bytes left after the value: not this shape")
            }
            DecodeError::Length { at, len } => write!(
                f,
                "length {len} at byte {at} is beyond what the rest of the input can hold"
            ),
            DecodeError::Invalid { at, what } => write!(f, "invalid {what} at byte {at}"),
            DecodeError::TooDeep => write!(f, "shape nests deeper than {MAX_DEPTH} levels"),
            DecodeError::TooMany => write!(
                f,
                "value has more parts than {VALUES_PER_BYTE} per input byte plus \
                 {SPARE_VALUES} (a name counting one per {NAME_BYTES_PER_VALUE} bytes): \
                 refused to bound memory"
            ),
            DecodeError::Opaque { fingerprint } => write!(
                f,
                "shape {fingerprint:#018x} is opaque (a hand-written Schema without a shape): \
                 it cannot be decoded"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes all of `bytes` as one value of `shape` (see the module docs for what is refused).
///
/// # Errors
///
/// A [`DecodeError`] that says what did not fit and where.
///
/// # Examples
///
/// ```
/// use llbus::schema::{decode, Fields, Primitive, Shape, Value};
///
/// let shape = Shape::structure("Px", Fields::named([("v", Shape::Primitive(Primitive::U16))]));
/// let value = decode(&[7, 0], &shape)?;
/// assert_eq!(value, Value::Record(vec![("v".to_owned(), Value::U16(7))]));
/// assert!(decode(&[7], &shape).is_err());
/// # Ok::<(), llbus::schema::DecodeError>(())
/// ```
pub fn decode(bytes: &[u8], shape: &Shape) -> Result<Value, DecodeError> {
    let budget = bytes.len().saturating_mul(VALUES_PER_BYTE);
    let mut reader = Reader {
        bytes,
        at: 0,
        budget: budget.saturating_add(SPARE_VALUES),
    };
    let value = reader.value(shape, 1)?;
    match bytes.len() - reader.at {
        0 => Ok(value),
        left => Err(DecodeError::Trailing { left }),
    }
}

/// How many values a decode may produce beyond [`VALUES_PER_BYTE`] per input byte: room for
/// zero-sized parts (`()`, unit structs, unit variants) that take no bytes.
pub const SPARE_VALUES: usize = 64 * 1024;

/// How many values a decode may produce per input byte: one per nesting level.
pub const VALUES_PER_BYTE: usize = MAX_DEPTH;

/// The bytes of a copied field or variant name that count as one value of the budget.
pub const NAME_BYTES_PER_VALUE: usize = 32;

/// A cursor over the input. Invariant: `at <= bytes.len()`.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// How many more values may be made: the bound on the tree's size, hence on allocation.
    budget: usize,
}

impl Reader<'_> {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let at = self.at;
        let end = at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(DecodeError::Short { at })?;
        self.at = end;
        Ok(&self.bytes[at..end])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    /// Takes `n` values from the budget.
    fn charge(&mut self, n: usize) -> Result<(), DecodeError> {
        self.budget = self.budget.checked_sub(n).ok_or(DecodeError::TooMany)?;
        Ok(())
    }

    /// A copy of a field's or variant's name, charged to the budget.
    fn name(&mut self, name: &str) -> Result<String, DecodeError> {
        self.charge(name.len() / NAME_BYTES_PER_VALUE)?;
        Ok(name.to_owned())
    }

    /// A `u64` length, refused if the rest of the input cannot hold `len` elements of at least
    /// one byte each.
    fn len(&mut self) -> Result<usize, DecodeError> {
        let at = self.at;
        let len = u64::from_le_bytes(self.array()?);
        let left = self.bytes.len() - self.at;
        match usize::try_from(len) {
            Ok(n) if n <= left => Ok(n),
            _ => Err(DecodeError::Length { at, len }),
        }
    }

    fn value(&mut self, shape: &Shape, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep);
        }
        self.charge(1)?;
        let depth = depth + 1;
        Ok(match shape {
            Shape::Primitive(p) => self.primitive(*p)?,
            Shape::Str => {
                let n = self.len()?;
                let at = self.at;
                let bytes = self.take(n)?;
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| DecodeError::Invalid { at, what: "utf-8" })?;
                Value::Str(text.to_owned())
            }
            Shape::Tuple(items) if items.is_empty() => Value::Unit,
            Shape::Tuple(items) => Value::Seq(self.each(items.iter(), depth)?),
            Shape::Vec(item) => {
                let n = self.len()?;
                Value::Seq(self.each(std::iter::repeat_n(&**item, n), depth)?)
            }
            Shape::Array { len, item } => {
                let mut items = Vec::new();
                for _ in 0..*len {
                    items.push(self.value(item, depth)?);
                }
                Value::Seq(items)
            }
            Shape::Option(item) => {
                let at = self.at;
                match self.byte()? {
                    0 => Value::Option(None),
                    1 => Value::Option(Some(Box::new(self.value(item, depth)?))),
                    _ => {
                        return Err(DecodeError::Invalid {
                            at,
                            what: "option tag",
                        })
                    }
                }
            }
            Shape::Map { key, value } => {
                let n = self.len()?;
                let mut entries = Vec::new();
                for _ in 0..n {
                    let k = self.value(key, depth)?;
                    entries.push((k, self.value(value, depth)?));
                }
                Value::Map(entries)
            }
            Shape::Struct { fields, .. } => self.fields(fields, depth)?.unwrap_or(Value::Unit),
            Shape::Enum { variants, .. } => {
                let at = self.at;
                let index = u32::from_le_bytes(self.array()?);
                let variant = usize::try_from(index).ok().and_then(|i| variants.get(i));
                let variant = variant.ok_or(DecodeError::Invalid {
                    at,
                    what: "variant index",
                })?;
                Value::Variant {
                    name: self.name(&variant.name)?,
                    value: self.fields(&variant.fields, depth)?.map(Box::new),
                }
            }
            Shape::Opaque(fingerprint) => {
                return Err(DecodeError::Opaque {
                    fingerprint: *fingerprint,
                })
            }
        })
    }

    /// One value per shape, in order.
    fn each<'s>(
        &mut self,
        shapes: impl Iterator<Item = &'s Shape>,
        depth: usize,
    ) -> Result<Vec<Value>, DecodeError> {
        let mut out = Vec::new();
        for shape in shapes {
            out.push(self.value(shape, depth)?);
        }
        Ok(out)
    }

    /// A struct's or variant's fields as serde presents them: named fields a record, one unnamed
    /// field itself (a newtype), several a sequence, none `None`.
    fn fields(&mut self, fields: &Fields, depth: usize) -> Result<Option<Value>, DecodeError> {
        Ok(match fields {
            Fields::Named(named) => {
                let mut out = Vec::with_capacity(named.len());
                for (name, shape) in named {
                    let name = self.name(name)?;
                    out.push((name, self.value(shape, depth)?));
                }
                Some(Value::Record(out))
            }
            Fields::Unnamed(items) if items.len() == 1 => Some(self.value(&items[0], depth)?),
            Fields::Unnamed(items) => Some(Value::Seq(self.each(items.iter(), depth)?)),
            Fields::Unit => None,
        })
    }

    fn primitive(&mut self, p: Primitive) -> Result<Value, DecodeError> {
        let at = self.at;
        Ok(match p {
            Primitive::U8 => Value::U8(self.byte()?),
            Primitive::U16 => Value::U16(u16::from_le_bytes(self.array()?)),
            Primitive::U32 => Value::U32(u32::from_le_bytes(self.array()?)),
            Primitive::U64 | Primitive::Usize => Value::U64(u64::from_le_bytes(self.array()?)),
            Primitive::U128 => Value::U128(u128::from_le_bytes(self.array()?)),
            Primitive::I8 => Value::I8(i8::from_le_bytes(self.array()?)),
            Primitive::I16 => Value::I16(i16::from_le_bytes(self.array()?)),
            Primitive::I32 => Value::I32(i32::from_le_bytes(self.array()?)),
            Primitive::I64 | Primitive::Isize => Value::I64(i64::from_le_bytes(self.array()?)),
            Primitive::I128 => Value::I128(i128::from_le_bytes(self.array()?)),
            Primitive::F32 => Value::F32(f32::from_le_bytes(self.array()?)),
            Primitive::F64 => Value::F64(f64::from_le_bytes(self.array()?)),
            Primitive::Bool => match self.byte()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(DecodeError::Invalid { at, what: "bool" }),
            },
            Primitive::Char => {
                let invalid = DecodeError::Invalid { at, what: "char" };
                let width = match self.byte()? {
                    0x00..=0x7f => 1,
                    0xc2..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf4 => 4,
                    _ => return Err(invalid),
                };
                self.at = at;
                let bytes = self.take(width)?;
                let text = std::str::from_utf8(bytes).map_err(|_| invalid.clone())?;
                Value::Char(text.chars().next().ok_or(invalid)?)
            }
        })
    }
}
