//! JSON to bincode by a shape (feature `json`): what a tool without the Rust type (`llbus call`)
//! sends. The JSON is read as [`Value`](super::Value) writes it (the mapping of
//! [`json_schema`](super::json_schema)): structs are objects with every field, newtype structs
//! their inner value, unit structs and `()` null, tuples and tuple structs arrays, enums
//! externally tagged (`"V"` or `{"V": ...}`), `Option` the value or null, maps objects (keys are
//! strings, parsed as the key's shape when it is a number or a character) or `[key, value]`
//! pairs. The bytes are bincode 1's layout, as [`decode`](super::decode) reads it.

use super::{Fields, Primitive, Shape, MAX_DEPTH};
use serde_json::Value as Json;

/// `json` encoded as `shape`'s bincode, or why it does not fit the shape (with the path of the
/// part that does not, as `.field[2].variant`).
///
/// ```
/// use llbus::schema::{encode_json, Fields, Primitive, Shape};
/// let px = Shape::structure("Px", Fields::named([("v", Shape::Primitive(Primitive::U16))]));
/// assert_eq!(encode_json(&px, &serde_json::json!({"v": 258})), Ok(vec![2, 1]));
/// assert!(encode_json(&px, &serde_json::json!({"v": -1})).is_err());
/// ```
///
/// # Errors
/// A message naming where the JSON departs from the shape: a missing or unknown field, a
/// number out of its type's range, a wrong type, an unknown variant, an opaque shape.
pub fn encode_json(shape: &Shape, json: &Json) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    write(shape, json, &mut out, &mut String::new(), 0)?;
    Ok(out)
}

fn write(
    shape: &Shape,
    json: &Json,
    out: &mut Vec<u8>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{}: nested deeper than {MAX_DEPTH}", at(path)));
    }
    let depth = depth + 1;
    match shape {
        Shape::Primitive(p) => primitive(*p, json, out, path),
        Shape::Str => match json {
            Json::String(s) => {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
                Ok(())
            }
            other => Err(wrong(path, "a string", other)),
        },
        Shape::Tuple(items) if items.is_empty() => unit(json, path),
        Shape::Tuple(items) => sequence(items.iter(), json, out, path, depth),
        Shape::Vec(item) => match json {
            Json::Array(values) => {
                out.extend_from_slice(&(values.len() as u64).to_le_bytes());
                each(item, values, out, path, depth)
            }
            other => Err(wrong(path, "an array", other)),
        },
        Shape::Array { len, item } => match json {
            Json::Array(values) if values.len() as u64 == *len => each(item, values, out, path, depth),
            Json::Array(values) => Err(format!(
                "{}: {} items where the array has {len}",
                at(path),
                values.len()
            )),
            other => Err(wrong(path, "an array", other)),
        },
        Shape::Option(item) => match json {
            Json::Null => {
                out.push(0);
                Ok(())
            }
            value => {
                out.push(1);
                write(item, value, out, path, depth)
            }
        },
        Shape::Map { key, value } => map(key, value, json, out, path, depth),
        Shape::Struct { fields, .. } => fields_of(fields, json, out, path, depth),
        Shape::Enum { variants, .. } => {
            let (name, body) = match json {
                Json::String(name) => (name.as_str(), None),
                Json::Object(map) if map.len() == 1 => match map.iter().next() {
                    Some((name, body)) => (name.as_str(), Some(body)),
                    None => return Err(wrong(path, "a variant", json)),
                },
                other => return Err(wrong(path, "a variant: \"Name\" or {\"Name\": ...}", other)),
            };
            let Some(index) = variants.iter().position(|v| v.name == name) else {
                let known: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
                return Err(format!(
                    "{}: no variant '{name}' (the variants: {})",
                    at(path),
                    known.join(", ")
                ));
            };
            let index = u32::try_from(index).map_err(|_| format!("{}: too many variants", at(path)))?;
            out.extend_from_slice(&index.to_le_bytes());
            let fields = &variants[index as usize].fields;
            let mark = path.len();
            path.push('.');
            path.push_str(name);
            let written = match (fields, body) {
                (Fields::Unit, None | Some(Json::Null)) => Ok(()),
                (Fields::Unit, Some(other)) => Err(wrong(path, "nothing (a unit variant)", other)),
                (_, None) => Err(format!("{}: the variant has fields: {{\"{name}\": ...}}", at(path))),
                (fields, Some(body)) => fields_of(fields, body, out, path, depth),
            };
            path.truncate(mark);
            written
        }
        Shape::Opaque(fingerprint) => Err(format!(
            "{}: a type of unknown layout (fingerprint {fingerprint:#018x}) cannot be written from JSON",
            at(path)
        )),
    }
}

/// The fields of a struct or variant.
fn fields_of(
    fields: &Fields,
    json: &Json,
    out: &mut Vec<u8>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    match fields {
        Fields::Unit => unit(json, path),
        Fields::Unnamed(items) if items.len() == 1 => write(&items[0], json, out, path, depth),
        Fields::Unnamed(items) => sequence(items.iter(), json, out, path, depth),
        Fields::Named(named) => {
            let Json::Object(object) = json else {
                return Err(wrong(path, "an object", json));
            };
            if let Some(unknown) = object.keys().find(|k| !named.iter().any(|(n, _)| n == *k)) {
                return Err(format!("{}: no field '{unknown}'", at(path)));
            }
            for (name, shape) in named {
                let mark = path.len();
                path.push('.');
                path.push_str(name);
                let Some(value) = object.get(name) else {
                    let e = format!("{}: missing", at(path));
                    path.truncate(mark);
                    return Err(e);
                };
                write(shape, value, out, path, depth)?;
                path.truncate(mark);
            }
            Ok(())
        }
    }
}

/// A tuple's items: a JSON array of as many.
fn sequence<'s>(
    items: impl ExactSizeIterator<Item = &'s Shape>,
    json: &Json,
    out: &mut Vec<u8>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    let Json::Array(values) = json else {
        return Err(wrong(path, "an array", json));
    };
    if values.len() != items.len() {
        return Err(format!(
            "{}: {} items where the tuple has {}",
            at(path),
            values.len(),
            items.len()
        ));
    }
    for (i, (shape, value)) in items.zip(values).enumerate() {
        let mark = path.len();
        path.push_str(&format!("[{i}]"));
        write(shape, value, out, path, depth)?;
        path.truncate(mark);
    }
    Ok(())
}

fn each(
    item: &Shape,
    values: &[Json],
    out: &mut Vec<u8>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    for (i, value) in values.iter().enumerate() {
        let mark = path.len();
        path.push_str(&format!("[{i}]"));
        write(item, value, out, path, depth)?;
        path.truncate(mark);
    }
    Ok(())
}

fn map(
    key: &Shape,
    value: &Shape,
    json: &Json,
    out: &mut Vec<u8>,
    path: &mut String,
    depth: usize,
) -> Result<(), String> {
    match json {
        Json::Object(entries) => {
            out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
            for (k, v) in entries {
                let mark = path.len();
                path.push_str(&format!("[{k:?}]"));
                // JSON keys are strings: a number or character key is parsed from it.
                let key_json = match key {
                    Shape::Str => Json::String(k.clone()),
                    Shape::Primitive(Primitive::Char) => Json::String(k.clone()),
                    Shape::Enum { .. } => Json::String(k.clone()),
                    _ => serde_json::from_str(k)
                        .map_err(|e| format!("{}: the key: {e}", at(path)))?,
                };
                write(key, &key_json, out, path, depth)?;
                write(value, v, out, path, depth)?;
                path.truncate(mark);
            }
            Ok(())
        }
        // Keys JSON cannot hold: `[key, value]` pairs, as `Value` writes them.
        Json::Array(pairs) => {
            out.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
            for (i, pair) in pairs.iter().enumerate() {
                let mark = path.len();
                path.push_str(&format!("[{i}]"));
                match pair {
                    Json::Array(kv) if kv.len() == 2 => {
                        write(key, &kv[0], out, path, depth)?;
                        write(value, &kv[1], out, path, depth)?;
                    }
                    other => return Err(wrong(path, "a [key, value] pair", other)),
                }
                path.truncate(mark);
            }
            Ok(())
        }
        other => Err(wrong(path, "an object (or [key, value] pairs)", other)),
    }
}

fn unit(json: &Json, path: &str) -> Result<(), String> {
    match json {
        Json::Null => Ok(()),
        other => Err(wrong(path, "null", other)),
    }
}

fn primitive(p: Primitive, json: &Json, out: &mut Vec<u8>, path: &str) -> Result<(), String> {
    macro_rules! int {
        ($t:ty) => {{
            let v: $t = integer(json, path, stringify!($t))?;
            out.extend_from_slice(&v.to_le_bytes());
        }};
    }
    match p {
        Primitive::U8 => int!(u8),
        Primitive::U16 => int!(u16),
        Primitive::U32 => int!(u32),
        Primitive::U64 | Primitive::Usize => int!(u64),
        Primitive::U128 => int!(u128),
        Primitive::I8 => int!(i8),
        Primitive::I16 => int!(i16),
        Primitive::I32 => int!(i32),
        Primitive::I64 | Primitive::Isize => int!(i64),
        Primitive::I128 => int!(i128),
        Primitive::F32 => {
            let v = float(json, path)?;
            // Narrowed as `as` does, after checking the value is a float at all.
            #[allow(clippy::cast_possible_truncation)]
            out.extend_from_slice(&(v as f32).to_le_bytes());
        }
        Primitive::F64 => out.extend_from_slice(&float(json, path)?.to_le_bytes()),
        Primitive::Bool => match json {
            Json::Bool(b) => out.push(u8::from(*b)),
            other => return Err(wrong(path, "true or false", other)),
        },
        Primitive::Char => match json {
            Json::String(s) if s.chars().count() == 1 => out.extend_from_slice(s.as_bytes()),
            other => return Err(wrong(path, "a one-character string", other)),
        },
    }
    Ok(())
}

/// A JSON integer (or a string of one, for 128-bit values beyond a double) within `T`'s range.
fn integer<T: TryFrom<i128> + TryFrom<u128>>(
    json: &Json,
    path: &str,
    ty: &str,
) -> Result<T, String> {
    let out_of_range = || format!("{}: {json} does not fit a {ty}", at(path));
    match json {
        Json::Number(n) => {
            if let Some(v) = n.as_u64() {
                T::try_from(u128::from(v)).map_err(|_| out_of_range())
            } else if let Some(v) = n.as_i64() {
                T::try_from(i128::from(v)).map_err(|_| out_of_range())
            } else {
                Err(wrong(path, &format!("an integer ({ty})"), json))
            }
        }
        Json::String(s) => {
            if let Ok(v) = s.parse::<u128>() {
                T::try_from(v).map_err(|_| out_of_range())
            } else if let Ok(v) = s.parse::<i128>() {
                T::try_from(v).map_err(|_| out_of_range())
            } else {
                Err(wrong(path, &format!("an integer ({ty})"), json))
            }
        }
        other => Err(wrong(path, &format!("an integer ({ty})"), other)),
    }
}

fn float(json: &Json, path: &str) -> Result<f64, String> {
    match json {
        Json::Number(n) => n.as_f64().ok_or_else(|| wrong(path, "a number", json)),
        other => Err(wrong(path, "a number", other)),
    }
}

/// Where `path` is, for a message: the root is `the value`.
fn at(path: &str) -> String {
    if path.is_empty() {
        "the value".to_owned()
    } else {
        path.to_owned()
    }
}

fn wrong(path: &str, expected: &str, got: &Json) -> String {
    let got = match got {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    };
    format!("{}: expected {expected}, got {got}", at(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{decode, Variant};
    use serde_json::json;

    /// Every kind of shape: what `Value` writes as JSON encodes back to the same bytes.
    #[test]
    fn what_value_writes_as_json_encodes_back_to_the_same_bytes() {
        let side = Shape::enumeration(
            "Side",
            [
                Variant::new("Buy", Fields::Unit),
                Variant::new(
                    "Sell",
                    Fields::named([("by", Shape::Primitive(Primitive::U32))]),
                ),
                Variant::new("Hold", Fields::unnamed([Shape::Str])),
            ],
        );
        let shape = Shape::structure(
            "Fill",
            Fields::named([
                ("n", Shape::Primitive(Primitive::U64)),
                ("delta", Shape::Primitive(Primitive::I32)),
                ("big", Shape::Primitive(Primitive::U128)),
                ("px", Shape::Primitive(Primitive::F64)),
                ("f", Shape::Primitive(Primitive::F32)),
                ("ok", Shape::Primitive(Primitive::Bool)),
                ("c", Shape::Primitive(Primitive::Char)),
                ("sides", Shape::Vec(Box::new(side))),
                ("note", Shape::Option(Box::new(Shape::Str))),
                ("none", Shape::Option(Box::new(Shape::Str))),
                (
                    "pair",
                    Shape::Tuple(vec![Shape::Primitive(Primitive::U8), Shape::Str]),
                ),
                (
                    "arr",
                    Shape::Array {
                        len: 3,
                        item: Box::new(Shape::Primitive(Primitive::I8)),
                    },
                ),
                (
                    "by_id",
                    Shape::Map {
                        key: Box::new(Shape::Primitive(Primitive::U16)),
                        value: Box::new(Shape::Str),
                    },
                ),
                (
                    "by_pair",
                    Shape::Map {
                        key: Box::new(Shape::Tuple(vec![
                            Shape::Primitive(Primitive::U8),
                            Shape::Primitive(Primitive::U8),
                        ])),
                        value: Shape::Tuple(vec![]).into(),
                    },
                ),
                (
                    "id",
                    Shape::structure("Id", Fields::unnamed([Shape::Primitive(Primitive::U8)])),
                ),
                ("unit", Shape::structure("Mark", Fields::Unit)),
            ]),
        );
        let json = json!({
            "n": 7, "delta": -3, "big": 5,
            "px": 101.25, "f": 0.5, "ok": true, "c": "é",
            "sides": ["Buy", {"Sell": {"by": 9}}, {"Hold": "x"}],
            "note": "hi", "none": null, "pair": [1, "a"], "arr": [-1, 0, 1],
            "by_id": {"5": "five"}, "by_pair": [[[1, 2], null]],
            "id": 4, "unit": null
        });
        let bytes = encode_json(&shape, &json).expect("the JSON fits the shape");
        let value = decode(&bytes, &shape).expect("the bytes decode as the shape");
        let back = serde_json::to_value(&value).expect("JSON");
        assert_eq!(back, json);
        // A 128-bit integer beyond what JSON numbers hold here is taken as a string.
        let big = Shape::Primitive(Primitive::U128);
        assert_eq!(
            encode_json(&big, &json!("340282366920938463463374607431768211455")),
            Ok(u128::MAX.to_le_bytes().to_vec())
        );
    }

    #[test]
    fn json_that_departs_from_the_shape_is_refused_saying_where() {
        let shape = Shape::structure(
            "Order",
            Fields::named([
                ("qty", Shape::Primitive(Primitive::U8)),
                (
                    "legs",
                    Shape::Vec(Box::new(Shape::Primitive(Primitive::U16))),
                ),
            ]),
        );
        let e = |j: Json| encode_json(&shape, &j).expect_err("refused");
        assert!(e(json!({"qty": 256, "legs": []})).contains(".qty"));
        assert!(e(json!({"qty": 1})).contains(".legs: missing"));
        assert!(e(json!({"qty": 1, "legs": [], "x": 0})).contains("no field 'x'"));
        assert!(e(json!({"qty": 1, "legs": [1, -2]})).contains(".legs[1]"));
        assert!(e(json!({"qty": 1.5, "legs": []})).contains("integer"));
        assert!(e(json!([1, []])).contains("expected an object"));
        assert!(encode_json(&Shape::Opaque(7), &json!(null))
            .expect_err("opaque")
            .contains("unknown layout"));
    }
}
