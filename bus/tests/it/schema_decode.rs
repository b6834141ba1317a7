//! The generic decoder against serde's own decoding: for arbitrary instances of derived types,
//! `decode(bincode bytes, T::shape())` serializes to the same JSON as the value itself, every
//! derived shape hashes to its fingerprint and survives its encoding, and bytes that do not fit
//! are refused with an error.

use std::collections::{BTreeMap, HashMap};

use llbus::schema::{decode, DecodeError, Primitive, Shape, ShapeError, Value, MAX_DEPTH};
use llbus::{Message, Schema};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[message(topic = "test.quote")]
struct Quote {
    px: f64,
    qty: u32,
    venue: String,
    side: Side,
    tags: Vec<Vec<u16>>,
    note: Option<String>,
    book: BTreeMap<String, i64>,
    ids: HashMap<u32, (bool, char)>,
    raw: [u8; 4],
    big: u128,
    small: i8,
    level: Level,
    pair: (i16, Option<Vec<f32>>),
    unit: (),
    size: usize,
    r#type: isize,
}

/// A tuple struct: a JSON array.
#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Level(u64, i32);

/// A newtype struct: serde writes its inner value only.
#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Id(u64);

/// A unit struct: null.
#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Marker;

#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Side {
    Buy,
    Sell(u8),
    Cross { at: f64, by: Option<Id> },
    Pair(i32, String),
    Mark(Marker),
    Nested(Option<Box<Side2>>),
}

#[derive(Message, Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Side2 {
    Only,
    Both { many: Vec<Option<Level>> },
}

fn side2() -> impl Strategy<Value = Side2> {
    prop_oneof![
        Just(Side2::Only),
        prop::collection::vec(
            prop::option::of((any::<u64>(), any::<i32>()).prop_map(|(a, b)| Level(a, b))),
            0..4
        )
        .prop_map(|many| Side2::Both { many }),
    ]
}

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![
        Just(Side::Buy),
        any::<u8>().prop_map(Side::Sell),
        (any::<f64>(), prop::option::of(any::<u64>().prop_map(Id)))
            .prop_map(|(at, by)| Side::Cross { at, by }),
        (any::<i32>(), ".{0,8}").prop_map(|(a, b)| Side::Pair(a, b)),
        Just(Side::Mark(Marker)),
        prop::option::of(side2().prop_map(Box::new)).prop_map(Side::Nested),
    ]
}

prop_compose! {
    fn quote()(
        head in (any::<f64>(), any::<u32>(), ".{0,12}", side()),
        tags in prop::collection::vec(prop::collection::vec(any::<u16>(), 0..5), 0..5),
        note in prop::option::of(".{0,8}"),
        book in prop::collection::btree_map(".{0,6}", any::<i64>(), 0..5),
        ids in prop::collection::hash_map(any::<u32>(), (any::<bool>(), any::<char>()), 0..5),
        raw in any::<[u8; 4]>(),
        // serde_json refuses a u128 beyond u64 (tested directly below), so stay inside it here.
        big in any::<u64>().prop_map(u128::from),
        small in any::<i8>(),
        level in (any::<u64>(), any::<i32>()).prop_map(|(a, b)| Level(a, b)),
        pair in (any::<i16>(), prop::option::of(prop::collection::vec(any::<f32>(), 0..4))),
        tail in (any::<usize>(), any::<isize>()),
    ) -> Quote {
        let (px, qty, venue, side) = head;
        Quote {
            px, qty, venue, side, tags, note, book, ids, raw, big, small, level, pair,
            unit: (), size: tail.0, r#type: tail.1,
        }
    }
}

fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::legacy())
        .unwrap_or_else(|e| panic!("bincode encodes every test value: {e}"))
}

fn json<T: Serialize>(value: &T) -> Result<serde_json::Value, String> {
    serde_json::to_value(value).map_err(|e| e.to_string())
}

/// Decodes with the shape and compares with serde's JSON of the original.
fn check_same_json<T: Serialize + Schema>(value: &T) {
    let bytes = bincode_of(value);
    let decoded = decode(&bytes, &T::shape()).unwrap_or_else(|e| panic!("decodes: {e}"));
    assert_eq!(json(&decoded), json(value));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 8 } else { 256 }))]

    #[test]
    fn decoded_values_serialize_as_the_originals(q in quote()) {
        check_same_json(&q);
        check_same_json(&q.side);
        check_same_json(&q.level);
        check_same_json(&q.tags);
        check_same_json(&q.ids);
    }

    /// Every proper prefix is refused (short or a length beyond it), and so is one byte more.
    #[test]
    fn prefixes_and_extensions_are_refused(q in quote(), cut in any::<prop::sample::Index>(), extra in any::<u8>()) {
        let bytes = bincode_of(&q);
        let shape = Quote::shape();
        let cut = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..cut], &shape).is_err());
        let mut longer = bytes.clone();
        longer.push(extra);
        prop_assert_eq!(decode(&longer, &shape), Err(DecodeError::Trailing { left: 1 }));
    }

    /// Arbitrary bytes decode or fail with an error, never a panic, and whatever decodes is what
    /// bincode itself decodes.
    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let ours = decode(&bytes, &Side::shape());
        let theirs = bincode::serde::decode_from_slice::<Side, _>(&bytes, bincode::config::legacy());
        if let Ok(value) = &ours {
            let (side, read) = theirs.unwrap_or_else(|e| panic!("bincode agrees: {e}"));
            prop_assert_eq!(read, bytes.len());
            prop_assert_eq!(json(value), json(&side));
        }
    }

    /// The shape encoding never panics on arbitrary bytes.
    #[test]
    fn arbitrary_shape_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(shape) = Shape::from_bytes(&bytes) {
            prop_assert!(shape.depth() <= MAX_DEPTH);
            let again = shape.to_bytes().unwrap_or_else(|e| panic!("re-encodes: {e}"));
            prop_assert_eq!(again, bytes);
        }
    }
}

#[test]
fn every_derived_shape_hashes_to_its_fingerprint_and_round_trips() {
    let shapes = [
        (
            Quote::shape(),
            Quote::SHAPE,
            <Quote as Message>::FINGERPRINT,
        ),
        (Level::shape(), Level::SHAPE, Level::FINGERPRINT),
        (Id::shape(), Id::SHAPE, Id::FINGERPRINT),
        (Marker::shape(), Marker::SHAPE, Marker::FINGERPRINT),
        (Side::shape(), Side::SHAPE, Side::FINGERPRINT),
        (Side2::shape(), Side2::SHAPE, Side2::FINGERPRINT),
    ];
    for (shape, hash, fingerprint) in shapes {
        assert_eq!(shape.fingerprint(), hash, "{shape:?}");
        assert_eq!(hash, fingerprint);
        let bytes = shape.to_bytes().unwrap_or_else(|e| panic!("encodes: {e}"));
        assert_eq!(Shape::from_bytes(&bytes), Ok(shape));
    }
    assert_eq!(<Quote as Message>::schema(), Quote::shape());
    assert_eq!((llbus::TopicSpec::of::<Quote>().shape)(), Quote::shape());
}

#[test]
fn container_shapes_hash_to_their_fingerprints() {
    fn check<T: Schema>() {
        assert_eq!(
            T::shape().fingerprint(),
            T::SHAPE,
            "{}",
            std::any::type_name::<T>()
        );
    }
    check::<u8>();
    check::<usize>();
    check::<char>();
    check::<String>();
    check::<&'static str>();
    check::<()>();
    check::<(u8, String, (bool,))>();
    check::<Vec<Option<[i64; 3]>>>();
    check::<Box<f32>>();
    check::<HashMap<String, Vec<u8>>>();
    check::<BTreeMap<u16, Level>>();
    assert_eq!(
        HashMap::<u8, u8>::SHAPE,
        BTreeMap::<u8, u8>::SHAPE,
        "serde writes both maps alike"
    );
}

#[test]
fn a_hand_written_schema_is_opaque_and_refused_by_the_decoder() {
    struct OrderId;
    impl Schema for OrderId {
        const SHAPE: u64 = llbus::ShapeHasher::new().name("OrderId").finish();
    }
    assert_eq!(OrderId::shape(), Shape::Opaque(OrderId::SHAPE));
    assert_eq!(OrderId::shape().fingerprint(), OrderId::SHAPE);
    assert_eq!(
        decode(&[0; 8], &OrderId::shape()),
        Err(DecodeError::Opaque {
            fingerprint: OrderId::SHAPE
        })
    );
}

#[test]
fn u128_beyond_u64_decodes_exactly() {
    let v = u128::MAX - 5;
    assert_eq!(decode(&bincode_of(&v), &u128::shape()), Ok(Value::U128(v)));
}

#[test]
fn invalid_bytes_are_named() {
    let bool_shape = Shape::Primitive(Primitive::Bool);
    assert_eq!(
        decode(&[2], &bool_shape),
        Err(DecodeError::Invalid {
            at: 0,
            what: "bool"
        })
    );
    assert_eq!(
        decode(&[2], &Option::<u8>::shape()),
        Err(DecodeError::Invalid {
            at: 0,
            what: "option tag"
        })
    );
    assert_eq!(
        decode(&[6, 0, 0, 0], &Side::shape()),
        Err(DecodeError::Invalid {
            at: 0,
            what: "variant index"
        })
    );
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend([0xc3, 0x28]);
    assert_eq!(
        decode(&bad_utf8, &String::shape()),
        Err(DecodeError::Invalid {
            at: 8,
            what: "utf-8"
        })
    );
    assert_eq!(
        decode(&[0xed, 0xa0, 0x80], &char::shape()),
        Err(DecodeError::Invalid {
            at: 0,
            what: "char"
        }),
        "a surrogate is no char"
    );
    assert_eq!(
        decode(&[1, 2, 3], &u32::shape()),
        Err(DecodeError::Short { at: 0 })
    );
}

#[test]
fn lengths_beyond_the_input_are_refused_before_allocating() {
    let huge = u64::MAX.to_le_bytes();
    assert_eq!(
        decode(&huge, &Vec::<u8>::shape()),
        Err(DecodeError::Length {
            at: 0,
            len: u64::MAX
        })
    );
    // Zero-sized elements cost no bytes: the length is still charged against the input.
    let mut units = 1000u64.to_le_bytes().to_vec();
    units.extend([0; 10]);
    let shape = Vec::<()>::shape();
    assert_eq!(
        decode(&units, &shape),
        Err(DecodeError::Length { at: 0, len: 1000 })
    );
    // And arrays of them are charged against the value budget.
    let shape = <[[(); 1 << 20]; 1 << 20]>::shape();
    assert_eq!(decode(&[], &shape), Err(DecodeError::TooMany));
}

#[test]
fn hostile_shape_encodings_are_refused() {
    // 10 000 nested `Option`s then a `u8`: a bincode list of nodes, depth far beyond the bound.
    let depth = 10_000u64;
    let mut bytes = (depth + 1).to_le_bytes().to_vec();
    for _ in 0..depth {
        bytes.extend(5u32.to_le_bytes()); // Node::Option
    }
    bytes.extend(0u32.to_le_bytes()); // Node::Primitive
    bytes.extend(0u32.to_le_bytes()); // Primitive::U8
    assert_eq!(Shape::from_bytes(&bytes), Err(ShapeError::TooDeep));

    // A tuple that claims more children than the list holds.
    let mut bytes = 1u64.to_le_bytes().to_vec();
    bytes.extend(2u32.to_le_bytes()); // Node::Tuple
    bytes.extend(u64::MAX.to_le_bytes());
    assert!(matches!(
        Shape::from_bytes(&bytes),
        Err(ShapeError::Malformed(_))
    ));

    // A list that claims more nodes than the limit allows.
    let bytes = u64::MAX.to_le_bytes();
    assert!(Shape::from_bytes(&bytes).is_err());

    // Code-built shapes beyond the bound are refused at encoding, not sent.
    let mut deep = Shape::Primitive(Primitive::U8);
    for _ in 1..MAX_DEPTH {
        deep = Shape::Tuple(vec![deep]);
    }
    assert!(deep.to_bytes().is_ok(), "the bound itself is allowed");
    assert!(decode(&[7], &deep).is_ok());
    let deeper = Shape::Tuple(vec![deep]);
    assert_eq!(deeper.to_bytes(), Err(ShapeError::TooDeep));
    assert_eq!(decode(&[7], &deeper), Err(DecodeError::TooDeep));
}

/// A shape's names may be long, and a message of no bytes may repeat them: copied names are
/// charged to the value budget, so such a message cannot decode into megabytes.
#[test]
fn long_names_repeated_by_an_array_are_charged_to_the_budget() {
    use llbus::schema::Fields;
    let name = "n".repeat(2_000);
    let shape = Shape::Array {
        len: 30_000,
        item: Box::new(Shape::structure(
            "S",
            Fields::named([(name.as_str(), Shape::Tuple(Vec::new()))]),
        )),
    };
    assert!(shape.to_bytes().expect("a servable shape").len() < 64 * 1024);
    assert_eq!(decode(&[], &shape), Err(DecodeError::TooMany));
    // A short name, as often: the same array decodes.
    let shape = Shape::Array {
        len: 30_000,
        item: Box::new(Shape::structure(
            "S",
            Fields::named([("n", Shape::Tuple(Vec::new()))]),
        )),
    };
    assert!(decode(&[], &shape).is_ok());
}

/// Every decoded value has a JSON form: a map keyed by tuples (which serde_json refuses as
/// keys) is written as `[key, value]` pairs; one keyed by integers stays an object.
#[test]
fn maps_with_keys_json_cannot_hold_serialize_as_pairs() {
    let mut by_pair: HashMap<(u8, u8), u32> = HashMap::new();
    by_pair.insert((1, 2), 7);
    assert!(
        serde_json::to_string(&by_pair).is_err(),
        "serde_json refuses the original"
    );
    let value = decode(&bincode_of(&by_pair), &HashMap::<(u8, u8), u32>::shape()).unwrap();
    assert_eq!(
        serde_json::to_value(&value).unwrap(),
        serde_json::json!([[[1, 2], 7]])
    );
    let by_int: BTreeMap<u16, bool> = [(3, true)].into_iter().collect();
    check_same_json(&by_int);
}
