//! A JSON Schema (draft 2020-12) of the JSON that [`Value`](super::Value) serializes to, made
//! from a topic's shape (feature `json`): what `llbus record --encoding json` puts in each
//! Schema record, so that Foxglove and other MCAP viewers show the fields, and what the zenoh
//! gateway serves beside a JSON export, so that clients in any language read them.
//!
//! The mapping follows `Value`'s serialization: structs are objects (their fields required),
//! newtype structs their inner value, unit structs and `()` null, tuples and tuple structs
//! arrays of fixed items, enums externally tagged (`"V"` or `{"V": ...}`), `Option` the value
//! or null, maps objects (JSON keys are strings), 128-bit integers and floats numbers.

use super::{Fields, Primitive, Shape};
use serde_json::{json, Map, Value};

/// The JSON Schema of `shape`'s JSON, with `$schema` and the type's name as `title`.
///
/// ```
/// use llbus::schema::{json_schema, Fields, Primitive, Shape};
/// let px = Shape::structure("Px", Fields::named([("v", Shape::Primitive(Primitive::U16))]));
/// assert_eq!(json_schema(&px)["properties"]["v"]["type"], "integer");
/// ```
pub fn json_schema(shape: &Shape) -> Value {
    let mut schema = node(shape);
    if let Value::Object(map) = &mut schema {
        map.insert(
            "$schema".to_owned(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
    }
    schema
}

fn node(shape: &Shape) -> Value {
    match shape {
        Shape::Primitive(p) => primitive(*p),
        Shape::Str => json!({"type": "string"}),
        Shape::Tuple(items) => tuple(items.iter().map(node).collect()),
        Shape::Vec(item) => json!({"type": "array", "items": node(item)}),
        Shape::Array { len, item } => json!({
            "type": "array", "items": node(item), "minItems": len, "maxItems": len
        }),
        Shape::Option(item) => json!({"anyOf": [node(item), {"type": "null"}]}),
        Shape::Map { value, .. } => json!({"type": "object", "additionalProperties": node(value)}),
        Shape::Struct { name, fields } => {
            let mut schema = fields_schema(fields);
            if let Value::Object(map) = &mut schema {
                map.insert("title".to_owned(), json!(name));
            }
            schema
        }
        Shape::Enum { name, variants } => {
            let one_of: Vec<Value> = variants
                .iter()
                .map(|v| match &v.fields {
                    Fields::Unit => json!({"const": v.name}),
                    fields => {
                        let mut properties = Map::new();
                        properties.insert(v.name.clone(), fields_schema(fields));
                        json!({
                            "type": "object",
                            "properties": properties,
                            "required": [v.name],
                            "additionalProperties": false
                        })
                    }
                })
                .collect();
            json!({"title": name, "oneOf": one_of})
        }
        // Nothing is known of an opaque type's layout: anything.
        Shape::Opaque(_) => json!({}),
    }
}

fn primitive(p: Primitive) -> Value {
    match p {
        Primitive::Bool => json!({"type": "boolean"}),
        Primitive::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Primitive::F32 | Primitive::F64 => json!({"type": "number"}),
        // 128-bit integers print as JSON numbers too, beyond what a double holds exactly.
        _ => json!({"type": "integer"}),
    }
}

fn tuple(items: Vec<Value>) -> Value {
    if items.is_empty() {
        return json!({"type": "null"});
    }
    let n = items.len();
    json!({"type": "array", "prefixItems": items, "minItems": n, "maxItems": n})
}

/// The schema of a struct's or variant's fields, as `Value` serializes them.
fn fields_schema(fields: &Fields) -> Value {
    match fields {
        Fields::Named(named) => {
            let mut properties = Map::new();
            for (name, shape) in named {
                properties.insert(name.clone(), node(shape));
            }
            let required: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
            json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false
            })
        }
        Fields::Unnamed(items) if items.len() == 1 => items.first().map_or(json!({}), node),
        Fields::Unnamed(items) => tuple(items.iter().map(node).collect()),
        Fields::Unit => json!({"type": "null"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_enums_options_and_newtypes_map_as_value_serializes_them() {
        let side = Shape::enumeration(
            "Side",
            [
                crate::schema::Variant::new("Buy", Fields::Unit),
                crate::schema::Variant::new(
                    "Sell",
                    Fields::named([("by", Shape::Primitive(Primitive::U32))]),
                ),
            ],
        );
        let fill = Shape::structure(
            "Fill",
            Fields::named([
                ("n", Shape::Primitive(Primitive::U64)),
                ("side", side),
                ("note", Shape::Option(Box::new(Shape::Str))),
                (
                    "id",
                    Shape::structure("Id", Fields::unnamed([Shape::Primitive(Primitive::U8)])),
                ),
            ]),
        );
        let expected = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Fill",
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "side": {"title": "Side", "oneOf": [
                    {"const": "Buy"},
                    {"type": "object", "properties": {"Sell": {
                        "type": "object", "properties": {"by": {"type": "integer"}},
                        "required": ["by"], "additionalProperties": false
                    }}, "required": ["Sell"], "additionalProperties": false}
                ]},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "id": {"type": "integer", "title": "Id"}
            },
            "required": ["n", "side", "note", "id"],
            "additionalProperties": false
        });
        assert_eq!(json_schema(&fill), expected);
    }
}
