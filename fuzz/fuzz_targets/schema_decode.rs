//! llbus's schema layer on untrusted bytes: `Shape::from_bytes` on the input, and the generic
//! decoder `decode` on the input against a fixed shape that has every kind of node (and, when
//! the input starts with a shape that decodes, against that shape on the rest). Any panic,
//! stack overflow or allocation beyond the RSS limit is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llbus::schema::{decode, Fields, Primitive, Shape, Variant};

fn every_kind() -> Shape {
    let p = Shape::Primitive;
    let item = Shape::Tuple(vec![
        p(Primitive::Bool),
        p(Primitive::Char),
        p(Primitive::U128),
        p(Primitive::F32),
        Shape::Str,
    ]);
    Shape::structure(
        "Every",
        Fields::named([
            ("list", Shape::Vec(Box::new(item))),
            (
                "arr",
                Shape::Array {
                    len: 3,
                    item: Box::new(Shape::Option(Box::new(p(Primitive::I16)))),
                },
            ),
            (
                "map",
                Shape::Map {
                    key: Box::new(Shape::Str),
                    value: Box::new(Shape::Vec(Box::new(Shape::Tuple(vec![])))),
                },
            ),
            (
                "side",
                Shape::enumeration(
                    "Side",
                    [
                        Variant::new("Unit", Fields::Unit),
                        Variant::new("One", Fields::unnamed([p(Primitive::Usize)])),
                        Variant::new(
                            "Named",
                            Fields::named([("deep", Shape::Vec(Box::new(Shape::Vec(Box::new(p(Primitive::U8))))))]),
                        ),
                    ],
                ),
            ),
        ]),
    )
}

fuzz_target!(|data: &[u8]| {
    let _ = decode(data, &every_kind());
    if let Ok(shape) = Shape::from_bytes(data) {
        // A decoded shape re-encodes to the same bytes.
        assert_eq!(shape.to_bytes().ok().as_deref(), Some(data));
    }
    // The first byte says how long a leading shape is; the rest is a value of it.
    if let Some((&n, rest)) = data.split_first() {
        let n = usize::from(n).min(rest.len());
        if let Ok(shape) = Shape::from_bytes(&rest[..n]) {
            let _ = decode(&rest[n..], &shape);
        }
    }
});
