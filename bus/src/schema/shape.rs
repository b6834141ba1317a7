//! The shape of a type as data: what `#[derive(Message)]` hashes into the fingerprint, kept as a
//! tree so that a tool without the Rust type can decode its bincode bytes
//! ([`decode`](super::decode)) and check them against the fingerprint ([`Shape::fingerprint`]).
//!
//! # Encoding
//!
//! [`Shape::to_bytes`] writes the tree in pre-order as a flat list of nodes, bincode 1 layout
//! (little-endian, fixed-width integers, `u64` lengths, `u32` variant indices); each node is
//! followed by its children, whose number the node itself states. A flat list decodes without
//! recursion in bincode, so a hostile encoding cannot exhaust the stack there;
//! [`Shape::from_bytes`] then rebuilds the tree with an explicit depth bound
//! ([`MAX_DEPTH`]) and refuses leftover nodes, so a decoded tree has exactly as many nodes as
//! the input lists. docs/RECORDING.md gives the node layout.

use serde::{Deserialize, Serialize};

use super::ShapeHasher;

/// The deepest nesting a [`Shape`] may have to be encoded, decoded or used to decode values.
///
/// Types nest far less than this in practice; the bound keeps the decoders' recursion (and so
/// their stack use) bounded on untrusted input.
pub const MAX_DEPTH: usize = 64;

/// The largest encoded shape [`Shape::from_bytes`] accepts, in bytes.
pub const MAX_ENCODED_LEN: usize = 64 * 1024;

/// A primitive type, as bincode writes it (`usize`/`isize` as 8 bytes, `char` as its UTF-8
/// bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[allow(missing_docs)] // Each variant is the Rust type of the same name.
pub enum Primitive {
    U8,
    U16,
    U32,
    U64,
    U128,
    Usize,
    I8,
    I16,
    I32,
    I64,
    I128,
    Isize,
    Bool,
    Char,
    F32,
    F64,
}

impl Primitive {
    /// The Rust name of the type, which is what the fingerprint hashes.
    pub const fn name(self) -> &'static str {
        match self {
            Primitive::U8 => "u8",
            Primitive::U16 => "u16",
            Primitive::U32 => "u32",
            Primitive::U64 => "u64",
            Primitive::U128 => "u128",
            Primitive::Usize => "usize",
            Primitive::I8 => "i8",
            Primitive::I16 => "i16",
            Primitive::I32 => "i32",
            Primitive::I64 => "i64",
            Primitive::I128 => "i128",
            Primitive::Isize => "isize",
            Primitive::Bool => "bool",
            Primitive::Char => "char",
            Primitive::F32 => "f32",
            Primitive::F64 => "f64",
        }
    }
}

/// The name of a service's shape ([`Shape::service`]): a dot keeps it apart from every Rust
/// type's name.
pub const SERVICE_SHAPE_NAME: &str = "llbus.Service";

/// A type's shape: the tree [`Schema::SHAPE`](super::Schema::SHAPE) hashes.
///
/// `Box<T>` has `T`'s shape, `&'static str` is [`Shape::Str`], maps (`HashMap`, `BTreeMap`) are
/// [`Shape::Map`]. [`Shape::fingerprint`] hashes a tree the way the derive hashes the type, so
/// `M::shape().fingerprint() == M::SHAPE` for every derived type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A number, `bool` or `char`.
    Primitive(Primitive),
    /// `String` or `&'static str`.
    Str,
    /// A tuple; `()` is the empty tuple.
    Tuple(Vec<Shape>),
    /// `Vec<T>`: a `u64` length, then the elements.
    Vec(Box<Shape>),
    /// `[T; N]`: `N` elements, no length on the wire.
    Array {
        /// `N`.
        len: u64,
        /// `T`.
        item: Box<Shape>,
    },
    /// `Option<T>`: a byte 0 or 1, then the value if 1.
    Option(Box<Shape>),
    /// A map: a `u64` length, then the key-value pairs.
    Map {
        /// The key's shape.
        key: Box<Shape>,
        /// The value's shape.
        value: Box<Shape>,
    },
    /// A struct, named as written without its module path.
    Struct {
        /// The type's name.
        name: String,
        /// Its fields in declaration order.
        fields: Fields,
    },
    /// An enum: a `u32` variant index, then that variant's fields.
    Enum {
        /// The type's name.
        name: String,
        /// Its variants in declaration order.
        variants: Vec<Variant>,
    },
    /// A type whose `Schema` impl was written by hand without a shape: only its fingerprint is
    /// known, so its values cannot be decoded.
    Opaque(u64),
}

/// The fields of a struct or of an enum variant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Fields {
    /// `{ a: A, b: B }`, in declaration order.
    Named(Vec<(String, Shape)>),
    /// `(A, B)`.
    Unnamed(Vec<Shape>),
    /// No fields.
    Unit,
}

/// One variant of an enum.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// The variant's name as written.
    pub name: String,
    /// Its fields.
    pub fields: Fields,
}

impl Shape {
    /// A struct's shape (what the derive writes).
    pub fn structure(name: &str, fields: Fields) -> Shape {
        Shape::Struct {
            name: name.to_owned(),
            fields,
        }
    }

    /// A served service's shape, what its bridge serves for its topic id: a struct named
    /// [`SERVICE_SHAPE_NAME`] (no Rust type can be named so) whose fields `request` and
    /// `reply` are the request's and the reply's shapes. From it a tool without the types
    /// encodes a request and decodes a reply, and derives the fingerprints the service's
    /// frames carry ([`request_fingerprint`](crate::request_fingerprint),
    /// [`reply_fingerprint`](crate::reply_fingerprint)).
    ///
    /// ```
    /// use llbus::schema::Shape;
    /// let s = Shape::service(Shape::Str, Shape::Tuple(vec![]));
    /// assert_eq!(s.as_service(), Some((&Shape::Str, &Shape::Tuple(vec![]))));
    /// assert_eq!(Shape::Str.as_service(), None);
    /// ```
    pub fn service(request: Shape, reply: Shape) -> Shape {
        Shape::structure(
            SERVICE_SHAPE_NAME,
            Fields::named([("request", request), ("reply", reply)]),
        )
    }

    /// The request's and the reply's shapes of a [`service`](Self::service) shape; `None`
    /// for any other shape.
    pub fn as_service(&self) -> Option<(&Shape, &Shape)> {
        match self {
            Shape::Struct {
                name,
                fields: Fields::Named(fields),
            } if name == SERVICE_SHAPE_NAME => match fields.as_slice() {
                [(request_name, request), (reply_name, reply)]
                    if request_name == "request" && reply_name == "reply" =>
                {
                    Some((request, reply))
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// An enum's shape (what the derive writes).
    pub fn enumeration(name: &str, variants: impl IntoIterator<Item = Variant>) -> Shape {
        Shape::Enum {
            name: name.to_owned(),
            variants: variants.into_iter().collect(),
        }
    }

    /// The 64-bit hash of this shape, computed exactly as [`Schema::SHAPE`](super::Schema) is
    /// (the algorithm documented there): a derived type's `shape().fingerprint()` is its
    /// `SHAPE`, so a served shape can be checked against the fingerprint on the wire.
    pub fn fingerprint(&self) -> u64 {
        let h = ShapeHasher::new;
        match self {
            Shape::Primitive(p) => h().name(p.name()).finish(),
            Shape::Str => h().name("str").finish(),
            Shape::Tuple(items) => items
                .iter()
                .fold(h().name("tuple").word(items.len() as u64), |h, item| {
                    h.word(item.fingerprint())
                })
                .finish(),
            Shape::Vec(item) => h().name("Vec").word(item.fingerprint()).finish(),
            Shape::Array { len, item } => h()
                .name("array")
                .word(*len)
                .word(item.fingerprint())
                .finish(),
            Shape::Option(item) => h().name("Option").word(item.fingerprint()).finish(),
            Shape::Map { key, value } => h()
                .name("Map")
                .word(key.fingerprint())
                .word(value.fingerprint())
                .finish(),
            Shape::Struct { name, fields } => {
                fields.hash_into(h().name("struct").name(name)).finish()
            }
            Shape::Enum { name, variants } => variants
                .iter()
                .fold(
                    h().name("enum").name(name).word(variants.len() as u64),
                    |h, variant| variant.fields.hash_into(h.name(&variant.name)),
                )
                .finish(),
            Shape::Opaque(fingerprint) => *fingerprint,
        }
    }

    /// How deep the tree nests: 1 for a leaf.
    pub fn depth(&self) -> usize {
        1 + self.children().map(Shape::depth).max().unwrap_or(0)
    }

    /// The shapes directly inside this one, in encoding order.
    fn children(&self) -> Box<dyn Iterator<Item = &Shape> + '_> {
        match self {
            Shape::Primitive(_) | Shape::Str | Shape::Opaque(_) => Box::new(std::iter::empty()),
            Shape::Tuple(items) => Box::new(items.iter()),
            Shape::Vec(item) | Shape::Array { item, .. } | Shape::Option(item) => {
                Box::new(std::iter::once(&**item))
            }
            Shape::Map { key, value } => Box::new([&**key, &**value].into_iter()),
            Shape::Struct { fields, .. } => fields.shapes(),
            Shape::Enum { variants, .. } => {
                Box::new(variants.iter().flat_map(|variant| variant.fields.shapes()))
            }
        }
    }

    /// The stable binary encoding of this shape (see the module docs), at most
    /// [`MAX_ENCODED_LEN`] bytes for any shape [`Shape::from_bytes`] accepts.
    ///
    /// # Errors
    ///
    /// [`ShapeError::TooDeep`] if the shape nests deeper than [`MAX_DEPTH`], and
    /// [`ShapeError::TooLarge`] if its encoding is longer than [`MAX_ENCODED_LEN`]: the peer
    /// would refuse either.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ShapeError> {
        if self.depth() > MAX_DEPTH {
            return Err(ShapeError::TooDeep);
        }
        let mut nodes = Vec::new();
        self.flatten(&mut nodes);
        let bytes = bincode::serde::encode_to_vec(&nodes, bincode::config::legacy())
            .map_err(|error| ShapeError::Malformed(error.to_string()))?;
        if bytes.len() > MAX_ENCODED_LEN {
            return Err(ShapeError::TooLarge { len: bytes.len() });
        }
        Ok(bytes)
    }

    /// Decodes a shape written by [`Shape::to_bytes`], from untrusted bytes: it reads at most
    /// [`MAX_ENCODED_LEN`] bytes, allocates in proportion to them, and never recurses deeper
    /// than [`MAX_DEPTH`].
    ///
    /// # Errors
    ///
    /// [`ShapeError`] says what does not fit: bytes that are not a node list, a node list that is
    /// not exactly one tree, a tree too deep, an input too long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Shape, ShapeError> {
        if bytes.len() > MAX_ENCODED_LEN {
            return Err(ShapeError::TooLarge { len: bytes.len() });
        }
        let config = bincode::config::legacy().with_limit::<MAX_ENCODED_LEN>();
        let (nodes, read): (Vec<Node>, usize) = bincode::serde::decode_from_slice(bytes, config)
            .map_err(|error| ShapeError::Malformed(error.to_string()))?;
        if read != bytes.len() {
            return Err(ShapeError::Malformed(format!(
                "{} bytes left after the node list",
                bytes.len() - read
            )));
        }
        let mut nodes = nodes.into_iter();
        let shape = Shape::unflatten(&mut nodes, 1)?;
        match nodes.next() {
            None => Ok(shape),
            Some(_) => Err(ShapeError::Malformed(
                "nodes left after the root's tree".to_owned(),
            )),
        }
    }

    /// Appends this tree's nodes in pre-order.
    fn flatten(&self, out: &mut Vec<Node>) {
        out.push(match self {
            Shape::Primitive(p) => Node::Primitive(*p),
            Shape::Str => Node::Str,
            Shape::Tuple(items) => Node::Tuple(items.len() as u64),
            Shape::Vec(_) => Node::Vec,
            Shape::Array { len, .. } => Node::Array(*len),
            Shape::Option(_) => Node::Option,
            Shape::Map { .. } => Node::Map,
            Shape::Struct { name, fields } => Node::Struct(name.clone(), fields.node()),
            Shape::Enum { name, variants } => Node::Enum(
                name.clone(),
                variants
                    .iter()
                    .map(|variant| (variant.name.clone(), variant.fields.node()))
                    .collect(),
            ),
            Shape::Opaque(fingerprint) => Node::Opaque(*fingerprint),
        });
        for child in self.children() {
            child.flatten(out);
        }
    }

    /// Rebuilds one tree from the front of `nodes`, `depth` being the depth of the node read.
    fn unflatten(nodes: &mut std::vec::IntoIter<Node>, depth: usize) -> Result<Shape, ShapeError> {
        if depth > MAX_DEPTH {
            return Err(ShapeError::TooDeep);
        }
        let node = nodes.next().ok_or_else(|| {
            ShapeError::Malformed("the node list ends inside the tree".to_owned())
        })?;
        let mut child = || Shape::unflatten(nodes, depth + 1).map(Box::new);
        Ok(match node {
            Node::Primitive(p) => Shape::Primitive(p),
            Node::Str => Shape::Str,
            Node::Tuple(n) => Shape::Tuple(Shape::unflatten_n(nodes, n, depth)?),
            Node::Vec => Shape::Vec(child()?),
            Node::Array(len) => Shape::Array {
                len,
                item: child()?,
            },
            Node::Option => Shape::Option(child()?),
            Node::Map => Shape::Map {
                key: child()?,
                value: child()?,
            },
            Node::Struct(name, fields) => Shape::Struct {
                name,
                fields: Fields::unflatten(fields, nodes, depth)?,
            },
            Node::Enum(name, variants) => {
                let mut out = Vec::new();
                for (name, fields) in variants {
                    let fields = Fields::unflatten(fields, nodes, depth)?;
                    out.push(Variant { name, fields });
                }
                Shape::Enum {
                    name,
                    variants: out,
                }
            }
            Node::Opaque(fingerprint) => Shape::Opaque(fingerprint),
        })
    }

    /// Rebuilds the `n` children of a node at `depth`. `n` comes from the input, so nothing is
    /// reserved for it up front: a short node list ends the loop with an error.
    fn unflatten_n(
        nodes: &mut std::vec::IntoIter<Node>,
        n: u64,
        depth: usize,
    ) -> Result<Vec<Shape>, ShapeError> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(Shape::unflatten(nodes, depth + 1)?);
        }
        Ok(out)
    }
}

impl Fields {
    /// Named fields from `(name, shape)` pairs (what the derive writes).
    pub fn named<'a>(fields: impl IntoIterator<Item = (&'a str, Shape)>) -> Fields {
        Fields::Named(
            fields
                .into_iter()
                .map(|(name, shape)| (name.to_owned(), shape))
                .collect(),
        )
    }

    /// Unnamed fields (what the derive writes).
    pub fn unnamed(fields: impl IntoIterator<Item = Shape>) -> Fields {
        Fields::Unnamed(fields.into_iter().collect())
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        match self {
            Fields::Named(fields) => fields.len(),
            Fields::Unnamed(fields) => fields.len(),
            Fields::Unit => 0,
        }
    }

    /// True for no fields (unit, or `{}`/`()`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Feeds these fields to `h` as the derive does.
    fn hash_into(&self, h: ShapeHasher) -> ShapeHasher {
        match self {
            Fields::Named(fields) => fields.iter().fold(
                h.name("named").word(fields.len() as u64),
                |h, (name, shape)| h.name(name).word(shape.fingerprint()),
            ),
            Fields::Unnamed(fields) => fields
                .iter()
                .fold(h.name("unnamed").word(fields.len() as u64), |h, shape| {
                    h.word(shape.fingerprint())
                }),
            Fields::Unit => h.name("unit"),
        }
    }

    /// The fields' shapes in order.
    fn shapes(&self) -> Box<dyn Iterator<Item = &Shape> + '_> {
        match self {
            Fields::Named(fields) => Box::new(fields.iter().map(|(_, shape)| shape)),
            Fields::Unnamed(fields) => Box::new(fields.iter()),
            Fields::Unit => Box::new(std::iter::empty()),
        }
    }

    /// The node form: names without shapes (the shapes follow as children).
    fn node(&self) -> FieldsNode {
        match self {
            Fields::Named(fields) => {
                FieldsNode::Named(fields.iter().map(|(name, _)| name.clone()).collect())
            }
            Fields::Unnamed(fields) => FieldsNode::Unnamed(fields.len() as u64),
            Fields::Unit => FieldsNode::Unit,
        }
    }

    /// Rebuilds the fields of a node at `depth` from the nodes that follow it.
    fn unflatten(
        node: FieldsNode,
        nodes: &mut std::vec::IntoIter<Node>,
        depth: usize,
    ) -> Result<Fields, ShapeError> {
        Ok(match node {
            FieldsNode::Named(names) => {
                let mut out = Vec::with_capacity(names.len());
                for name in names {
                    out.push((name, Shape::unflatten(nodes, depth + 1)?));
                }
                Fields::Named(out)
            }
            FieldsNode::Unnamed(n) => Fields::Unnamed(Shape::unflatten_n(nodes, n, depth)?),
            FieldsNode::Unit => Fields::Unit,
        })
    }
}

impl Variant {
    /// A variant (what the derive writes).
    pub fn new(name: &str, fields: Fields) -> Variant {
        Variant {
            name: name.to_owned(),
            fields,
        }
    }
}

/// One node of the encoding: a shape without its children, and how many children follow.
///
/// The variant order is the wire format: append new variants at the end only.
#[derive(Serialize, Deserialize)]
enum Node {
    Primitive(Primitive),
    Str,
    Tuple(u64),
    Vec,
    Array(u64),
    Option,
    Map,
    Struct(String, FieldsNode),
    Enum(String, Vec<(String, FieldsNode)>),
    Opaque(u64),
}

/// A field list without its shapes: for named fields one child per name follows.
#[derive(Serialize, Deserialize)]
enum FieldsNode {
    Named(Vec<String>),
    Unnamed(u64),
    Unit,
}

/// Why an encoded shape was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShapeError {
    /// The bytes are not a node list, or the list is not exactly one tree.
    Malformed(String),
    /// The tree nests deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The encoding is longer than [`MAX_ENCODED_LEN`].
    TooLarge {
        /// Its length in bytes.
        len: usize,
    },
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShapeError::Malformed(why) => write!(f, "malformed shape encoding: {why}"),
            ShapeError::TooDeep => write!(
                f,
                "shape nests deeper than {MAX_DEPTH} levels: refused as hostile or broken"
            ),
            ShapeError::TooLarge { len } => write!(
                f,
                "shape encoding of {len} bytes is longer than the {MAX_ENCODED_LEN}-byte limit"
            ),
        }
    }
}

impl std::error::Error for ShapeError {}
