//! Schema fingerprints: a 64-bit hash of a type's shape, computed at compile time, so that two
//! hosts with different definitions of one topic notice before they decode garbage.
//!
//! The idea is LCM's recursive type fingerprint: a type's hash covers its name, its fields' names
//! and order, and its fields' types, recursively, so changing a struct nested three levels down
//! changes the fingerprint of every message that contains it.
//!
//! The exact algorithm is documented on [`Schema`], where users read it.
//!
//! The same shape is also kept as data, [`Shape`], which [`Schema::shape`] returns: a tool
//! without the Rust type decodes bincode bytes with it ([`decode`] into a [`Value`]), checks it
//! against a fingerprint ([`Shape::fingerprint`]), and ships it ([`Shape::to_bytes`]).

#[cfg(feature = "json")]
mod from_json;
#[cfg(feature = "json")]
mod json;
mod shape;
mod value;

#[cfg(feature = "json")]
pub use from_json::encode_json;
#[cfg(feature = "json")]
pub use json::json_schema;
pub use shape::{
    Fields, Primitive, Shape, ShapeError, Variant, MAX_DEPTH, MAX_ENCODED_LEN, SERVICE_SHAPE_NAME,
};
pub use value::{decode, DecodeError, Value, SPARE_VALUES, VALUES_PER_BYTE};

use crate::message::{fnv1a64, FNV1A64_OFFSET};

/// A type whose shape has a schema fingerprint: every field type of a `#[derive(Message)]` type
/// implements it, and a message's [`Message::FINGERPRINT`](crate::Message::FINGERPRINT) is its
/// [`SHAPE`](Schema::SHAPE).
///
/// Implemented for the primitives, `String`, `&'static str`, `()`, tuples up to 12 elements,
/// `Vec<T>`, `[T; N]`, `Option<T>`, `Box<T>`, `HashMap<K, V>` and `BTreeMap<K, V>`, and by
/// `#[derive(Message)]`. A field type
/// without it is a compile error that points at the field.
///
/// # Algorithm
///
/// Every hash is FNV-1a 64 (the same function as [`topic_id`](crate::topic_id)), fed by a
/// [`ShapeHasher`] with two kinds of input, both platform independent:
///
/// - a *name*: the length of its UTF-8 bytes as 8 little-endian bytes, then the bytes (the length
///   prefix keeps `("ab", "c")` apart from `("a", "bc")`);
/// - a *word*: a `u64` as 8 little-endian bytes. A nested type's [`Schema::SHAPE`] enters as a
///   word.
///
/// The shapes, with `H` a fresh [`ShapeHasher::new`] and `.name`/`.word`/`.shape` its inputs:
///
/// | type | shape |
/// | --- | --- |
/// | a primitive `P` (`u8` ... `u128`, `i8` ... `i128`, `usize`, `isize`, `bool`, `char`, `f32`, `f64`) | `H.name("P")` |
/// | `String`, `&'static str` | `H.name("str")` |
/// | `()` and tuples `(A, B, ...)` up to 12 | `H.name("tuple").word(n).shape::<A>().shape::<B>()...` |
/// | `Vec<T>` | `H.name("Vec").shape::<T>()` |
/// | `[T; N]` | `H.name("array").word(N).shape::<T>()` |
/// | `Option<T>` | `H.name("Option").shape::<T>()` |
/// | `HashMap<K, V>`, `BTreeMap<K, V>` | `H.name("Map").shape::<K>().shape::<V>()` |
/// | `Box<T>` | `T`'s shape: a box changes where the value lives, not what it is |
///
/// `usize` and `isize` hash as their own names, never as `u32`/`u64`, so the fingerprint is the
/// same on 32- and 64-bit hosts; changing a field from `usize` to `u64` changes it.
/// `String` and `&'static str` share a shape because they carry the same text.
///
/// `#[derive(Message)]` writes the shape of a user type from its definition (the type's name as
/// written, without its module path, so identical definitions in two crates agree):
///
/// ```text
/// struct S { a: A, b: B }  =>  H.name("struct").name("S").fields
/// struct S(A, B);          =>  H.name("struct").name("S").fields
/// struct S;                =>  H.name("struct").name("S").fields
/// enum E { V0 fields, .. } =>  H.name("enum").name("E").word(variants).name("V0").fields ...
///
/// fields, named:    .name("named").word(n).name("a").shape::<A>().name("b").shape::<B>()
/// fields, unnamed:  .name("unnamed").word(n).shape::<A>().shape::<B>()
/// fields, none:     .name("unit")
/// ```
///
/// Names are the Rust names as written (`r#type` is `type`); serde renames and enum
/// discriminants are not part of the shape. Recursive types
/// (`struct Node { next: Option<Box<Node>> }`) have no finite shape and fail to compile with a
/// cycle error.
///
/// [`Schema::shape`] returns the same shape as data, and [`decode`] reads bincode bytes with it.
/// Both assume serde's default derived layout: a serde attribute that changes what is written
/// (`skip`, `flatten`, `tag`, `untagged`, `with`, `transparent`, a hand-written `Serialize`)
/// makes the generic decoder refuse the bytes or misread them, and a `rename` shows in
/// [`Value`]'s field names as the Rust name.
///
/// # Examples
///
/// A hand-written impl for a type the derive cannot see, here a newtype whose wire form is its
/// `u64`:
///
/// ```
/// use llbus::{Schema, ShapeHasher};
///
/// struct OrderId(u64);
///
/// impl Schema for OrderId {
///     const SHAPE: u64 = ShapeHasher::new().name("OrderId").shape::<u64>().finish();
/// }
///
/// assert_ne!(OrderId::SHAPE, u64::SHAPE);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no schema fingerprint, so it cannot be a field of a message",
    label = "this field's type does not implement `llbus::Schema`",
    note = "derive `llbus::Message` on `{Self}` if it is yours, or wrap it in a type of yours that implements `llbus::Schema` by hand (see `llbus::ShapeHasher`)"
)]
pub trait Schema {
    /// The 64-bit hash of this type's shape. Identical on every host, architecture and build.
    const SHAPE: u64;

    /// The shape itself, as data: `Self::shape().fingerprint() == Self::SHAPE` for every impl in
    /// this crate and every derived one.
    ///
    /// The default, for hand-written impls, is [`Shape::Opaque`]: the fingerprint without a
    /// layout, which tools can match but not decode. Override it with the shape of the wire form
    /// to make the type decodable.
    fn shape() -> Shape {
        Shape::Opaque(Self::SHAPE)
    }
}

/// Builds a shape hash in a `const` context: FNV-1a 64 over length-prefixed names and
/// little-endian words.
///
/// ```
/// use llbus::{Schema, ShapeHasher};
///
/// // The shape `#[derive(Message)]` writes for `struct Px { v: f64 }`.
/// const PX: u64 = ShapeHasher::new()
///     .name("struct")
///     .name("Px")
///     .name("named")
///     .word(1)
///     .name("v")
///     .shape::<f64>()
///     .finish();
/// assert_ne!(PX, f64::SHAPE);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ShapeHasher {
    state: u64,
}

impl ShapeHasher {
    /// A hasher in its initial state (the FNV-1a 64 offset basis).
    pub const fn new() -> Self {
        ShapeHasher {
            state: FNV1A64_OFFSET,
        }
    }

    /// Feeds a name: its byte length as a little-endian `u64`, then its UTF-8 bytes.
    pub const fn name(self, name: &str) -> Self {
        let state = self.word(name.len() as u64).state;
        ShapeHasher {
            state: fnv1a64(state, name.as_bytes()),
        }
    }

    /// Feeds a word as 8 little-endian bytes.
    pub const fn word(self, word: u64) -> Self {
        ShapeHasher {
            state: fnv1a64(self.state, &word.to_le_bytes()),
        }
    }

    /// Feeds the shape of `T` as a word.
    pub const fn shape<T: Schema + ?Sized>(self) -> Self {
        self.word(T::SHAPE)
    }

    /// The hash of everything fed so far.
    pub const fn finish(self) -> u64 {
        self.state
    }
}

impl ShapeHasher {
    /// Feeds named fields as the derive does: `.name("named").word(n)`, then each field's name
    /// and shape.
    #[doc(hidden)]
    pub const fn named_parts(self, parts: &[Part]) -> Self {
        let mut h = self.name("named").word(parts.len() as u64);
        let mut i = 0;
        while i < parts.len() {
            h = h.name(parts[i].name).word(parts[i].hash);
            i += 1;
        }
        h
    }

    /// Feeds unnamed fields as the derive does: `.name("unnamed").word(n)`, then each shape.
    #[doc(hidden)]
    pub const fn unnamed_parts(self, parts: &[Part]) -> Self {
        let mut h = self.name("unnamed").word(parts.len() as u64);
        let mut i = 0;
        while i < parts.len() {
            h = h.word(parts[i].hash);
            i += 1;
        }
        h
    }
}

/// One field as the derive sees it: its name, its type's hash and its type's shape function.
///
/// The derive lists every field type once, in a table of these, and computes both the hash and
/// the tree from the table, so a field type without [`Schema`] is one error, not two.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Part {
    name: &'static str,
    hash: u64,
    tree: fn() -> Shape,
}

impl Part {
    /// The part of a field of type `T` named `name` (empty for an unnamed field).
    pub const fn of<T: Schema + ?Sized>(name: &'static str) -> Part {
        Part {
            name,
            hash: T::SHAPE,
            tree: T::shape,
        }
    }
}

impl Fields {
    /// The named fields of a derive's table.
    #[doc(hidden)]
    pub fn from_named_parts(parts: &[Part]) -> Fields {
        Fields::named(parts.iter().map(|part| (part.name, (part.tree)())))
    }

    /// The unnamed fields of a derive's table.
    #[doc(hidden)]
    pub fn from_unnamed_parts(parts: &[Part]) -> Fields {
        Fields::unnamed(parts.iter().map(|part| (part.tree)()))
    }
}

impl Default for ShapeHasher {
    fn default() -> Self {
        ShapeHasher::new()
    }
}

macro_rules! primitive_shapes {
    ($($ty:ty => $p:ident),* $(,)?) => {$(
        impl Schema for $ty {
            const SHAPE: u64 = ShapeHasher::new().name(stringify!($ty)).finish();

            fn shape() -> Shape {
                Shape::Primitive(Primitive::$p)
            }
        }
    )*};
}

primitive_shapes!(
    u8 => U8, u16 => U16, u32 => U32, u64 => U64, u128 => U128, usize => Usize,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64, i128 => I128, isize => Isize,
    bool => Bool, char => Char, f32 => F32, f64 => F64,
);

impl Schema for String {
    const SHAPE: u64 = ShapeHasher::new().name("str").finish();

    fn shape() -> Shape {
        Shape::Str
    }
}

impl Schema for &'static str {
    const SHAPE: u64 = String::SHAPE;

    fn shape() -> Shape {
        Shape::Str
    }
}

impl<T: Schema> Schema for Vec<T> {
    const SHAPE: u64 = ShapeHasher::new().name("Vec").shape::<T>().finish();

    fn shape() -> Shape {
        Shape::Vec(Box::new(T::shape()))
    }
}

impl<T: Schema, const N: usize> Schema for [T; N] {
    const SHAPE: u64 = ShapeHasher::new()
        .name("array")
        .word(N as u64)
        .shape::<T>()
        .finish();

    fn shape() -> Shape {
        Shape::Array {
            len: N as u64,
            item: Box::new(T::shape()),
        }
    }
}

impl<T: Schema> Schema for Option<T> {
    const SHAPE: u64 = ShapeHasher::new().name("Option").shape::<T>().finish();

    fn shape() -> Shape {
        Shape::Option(Box::new(T::shape()))
    }
}

impl<T: Schema> Schema for Box<T> {
    const SHAPE: u64 = T::SHAPE;

    fn shape() -> Shape {
        T::shape()
    }
}

/// The shape of a map: both std maps share it, as serde writes both the same way.
const fn map_shape<K: Schema, V: Schema>() -> u64 {
    ShapeHasher::new()
        .name("Map")
        .shape::<K>()
        .shape::<V>()
        .finish()
}

impl<K: Schema, V: Schema, S> Schema for std::collections::HashMap<K, V, S> {
    const SHAPE: u64 = map_shape::<K, V>();

    fn shape() -> Shape {
        Shape::Map {
            key: Box::new(K::shape()),
            value: Box::new(V::shape()),
        }
    }
}

impl<K: Schema, V: Schema> Schema for std::collections::BTreeMap<K, V> {
    const SHAPE: u64 = map_shape::<K, V>();

    fn shape() -> Shape {
        Shape::Map {
            key: Box::new(K::shape()),
            value: Box::new(V::shape()),
        }
    }
}

macro_rules! tuple_shapes {
    ($(($n:literal $($t:ident)*))*) => {$(
        impl<$($t: Schema),*> Schema for ($($t,)*) {
            const SHAPE: u64 = ShapeHasher::new()
                .name("tuple")
                .word($n)
                $(.shape::<$t>())*
                .finish();

            fn shape() -> Shape {
                Shape::Tuple(vec![$($t::shape()),*])
            }
        }
    )*};
}

tuple_shapes! {
    (0)
    (1 A)
    (2 A B)
    (3 A B C)
    (4 A B C D)
    (5 A B C D E)
    (6 A B C D E F)
    (7 A B C D E F G)
    (8 A B C D E F G H)
    (9 A B C D E F G H I)
    (10 A B C D E F G H I J)
    (11 A B C D E F G H I J K)
    (12 A B C D E F G H I J K L)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the algorithm: these values go on the wire, so a change here is a protocol change.
    #[test]
    fn primitive_shapes_are_pinned() {
        // FNV-1a 64 of 02 00 00 00 00 00 00 00 'u' '8', worked out independently below.
        let mut expected = 0xcbf2_9ce4_8422_2325_u64;
        for b in [2u8, 0, 0, 0, 0, 0, 0, 0, b'u', b'8'] {
            expected ^= u64::from(b);
            expected = expected.wrapping_mul(0x100_0000_01b3);
        }
        assert_eq!(u8::SHAPE, expected);
        assert_eq!(u8::SHAPE, 0x9c88_c3d3_28cb_e24a);
    }

    #[test]
    fn names_are_length_prefixed() {
        let ab_c = ShapeHasher::new().name("ab").name("c").finish();
        let a_bc = ShapeHasher::new().name("a").name("bc").finish();
        assert_ne!(ab_c, a_bc);
    }

    #[test]
    fn every_primitive_has_its_own_shape() {
        let shapes = [
            u8::SHAPE,
            u16::SHAPE,
            u32::SHAPE,
            u64::SHAPE,
            u128::SHAPE,
            usize::SHAPE,
            i8::SHAPE,
            i16::SHAPE,
            i32::SHAPE,
            i64::SHAPE,
            i128::SHAPE,
            isize::SHAPE,
            bool::SHAPE,
            char::SHAPE,
            f32::SHAPE,
            f64::SHAPE,
            String::SHAPE,
            <()>::SHAPE,
        ];
        for (i, a) in shapes.iter().enumerate() {
            for b in &shapes[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn containers_wrap_their_element() {
        assert_ne!(Vec::<u8>::SHAPE, Vec::<u16>::SHAPE);
        assert_ne!(Vec::<u8>::SHAPE, Option::<u8>::SHAPE);
        assert_ne!(<[u8; 4]>::SHAPE, <[u8; 5]>::SHAPE);
        assert_ne!(<[u8; 4]>::SHAPE, Vec::<u8>::SHAPE);
        assert_ne!(<(u8, u16)>::SHAPE, <(u16, u8)>::SHAPE);
        assert_ne!(<(u8,)>::SHAPE, u8::SHAPE);
        assert_eq!(Box::<u32>::SHAPE, u32::SHAPE);
        assert_eq!(<&'static str>::SHAPE, String::SHAPE);
    }

    /// The derive writes exactly the shapes documented on `Schema`.
    #[test]
    #[allow(dead_code)] // The types exist for their shapes only.
    fn derive_follows_the_documented_algorithm() {
        #[derive(crate::Message)]
        struct Named {
            a: u8,
            r#type: Vec<u16>,
        }
        #[derive(crate::Message)]
        struct Unnamed(u8, Named);
        #[derive(crate::Message)]
        struct Unit;
        #[derive(crate::Message)]
        enum Either {
            Left(u8),
            Right { b: bool },
            Neither,
        }

        let h = ShapeHasher::new;
        let named = h().name("struct").name("Named").name("named").word(2);
        let named = named
            .name("a")
            .shape::<u8>()
            .name("type")
            .shape::<Vec<u16>>();
        assert_eq!(Named::SHAPE, named.finish());
        let unnamed = h().name("struct").name("Unnamed").name("unnamed").word(2);
        let unnamed = unnamed.shape::<u8>().shape::<Named>();
        assert_eq!(Unnamed::SHAPE, unnamed.finish());
        assert_eq!(
            Unit::SHAPE,
            h().name("struct").name("Unit").name("unit").finish()
        );
        let either = h().name("enum").name("Either").word(3);
        let either = either.name("Left").name("unnamed").word(1).shape::<u8>();
        let either = either
            .name("Right")
            .name("named")
            .word(1)
            .name("b")
            .shape::<bool>();
        let either = either.name("Neither").name("unit");
        assert_eq!(Either::SHAPE, either.finish());
        assert_eq!(<Either as crate::Message>::FINGERPRINT, Either::SHAPE);

        // The tree hashes to the same value, field by field.
        for (tree, hash) in [
            (Named::shape(), Named::SHAPE),
            (Unnamed::shape(), Unnamed::SHAPE),
            (Unit::shape(), Unit::SHAPE),
            (Either::shape(), Either::SHAPE),
        ] {
            assert_eq!(tree.fingerprint(), hash, "{tree:?}");
        }
        let named = Shape::structure(
            "Named",
            Fields::named([
                ("a", Shape::Primitive(Primitive::U8)),
                ("type", Vec::<u16>::shape()),
            ]),
        );
        assert_eq!(Named::shape(), named);
    }
}
