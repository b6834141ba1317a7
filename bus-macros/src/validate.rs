//! Validate: the rules a derive input must follow, checked before anything is generated.
//!
//! Each check records its error and keeps what is still usable: an invalid topic name is still
//! used (so the impl exists and nothing else breaks), a malformed `Inbox` variant is left out.
//! Only inputs no impl can be written for (generics, unions, an `Inbox` struct) yield `None`.

use std::collections::HashMap;

use quote::ToTokens;
use syn::{ext::IdentExt, punctuated::Punctuated, Fields, Ident, Token, Type, Variant};

use crate::parse::{self, Body, Errors, InboxDef, MessageDef};

/// The longest topic name, in bytes.
pub(crate) const TOPIC_MAX_LEN: usize = 64;

/// A `#[derive(Message)]` input that an impl can be written for.
pub(crate) struct CheckedMessage<'a> {
    /// The type's name.
    pub ident: &'a Ident,
    /// The type's name without `r#`: what the fingerprint hashes.
    pub name: String,
    /// The topic name, from `#[message(topic = "...")]` or the type's name.
    pub topic: String,
    /// The type's body.
    pub body: CheckedBody<'a>,
}

/// The body of a checked `#[derive(Message)]` type.
pub(crate) enum CheckedBody<'a> {
    /// A struct.
    Struct(&'a Fields),
    /// An enum.
    Enum(&'a Punctuated<Variant, Token![,]>),
}

/// Checks a `#[derive(Message)]` input: no generics, not a union, a valid topic name.
pub(crate) fn message<'a>(def: MessageDef<'a>, errors: &mut Errors) -> Option<CheckedMessage<'a>> {
    if !def.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            def.generics,
            "generic message types are not supported: a topic carries one concrete type with one \
             fingerprint; define a concrete type (e.g. `struct QuoteF64 { .. }`), or implement \
             `llbus::Message` and `llbus::Schema` by hand for each instantiation",
        ));
        return None;
    }
    let body = match def.body {
        Body::Struct(fields) => CheckedBody::Struct(fields),
        Body::Enum(variants) => CheckedBody::Enum(variants),
        Body::Union(keyword) => {
            errors.push(syn::Error::new_spanned(
                keyword,
                "a union cannot be a message: its shape has no fingerprint; use an enum",
            ));
            return None;
        }
    };
    let name = def.ident.unraw().to_string();
    let topic = match &def.topic {
        Some(lit) => {
            let topic = lit.value();
            if let Some(problem) = topic_problem(&topic) {
                errors.push(syn::Error::new_spanned(
                    lit,
                    format!("invalid topic name: {problem}"),
                ));
            }
            topic
        }
        None => {
            if let Some(problem) = topic_problem(&name) {
                errors.push(syn::Error::new_spanned(
                    def.ident,
                    format!(
                        "the default topic is the type's name `{name}`, which is not a valid \
                         topic name ({problem}); name the topic: \
                         `#[message(topic = \"md.quote\")]`"
                    ),
                ));
            }
            name.clone()
        }
    };
    Some(CheckedMessage {
        ident: def.ident,
        name,
        topic,
        body,
    })
}

/// What is wrong with a topic name, or `None` if it follows the rule (`llbus::TopicName`'s):
/// 1 to [`TOPIC_MAX_LEN`] bytes of ASCII letters, digits, `_` and `-`, in segments separated by
/// `.` or `/`, none of them empty.
pub(crate) fn topic_problem(topic: &str) -> Option<String> {
    const EXAMPLE: &str = "write a name such as `md.quote`";
    if topic.is_empty() {
        return Some(format!("it is empty; {EXAMPLE}"));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-')))
    {
        return Some(format!(
            "it contains {bad:?}; a topic name is made of ASCII letters, digits, `_` and `-`, \
             in segments separated by `.` or `/`"
        ));
    }
    if topic.split(['.', '/']).any(str::is_empty) {
        return Some(format!(
            "`{topic}` has an empty segment (a leading, trailing or doubled separator); {EXAMPLE}"
        ));
    }
    if topic.len() > TOPIC_MAX_LEN {
        return Some(format!(
            "it is {} bytes long, and the limit is {TOPIC_MAX_LEN}",
            topic.len()
        ));
    }
    None
}

/// A `#[derive(Inbox)]` input that an impl can be written for.
pub(crate) struct CheckedInbox<'a> {
    /// The enum's name.
    pub ident: &'a Ident,
    /// Each well-formed variant and the message type it wraps, in declaration order.
    pub variants: Vec<(&'a Ident, &'a Type)>,
}

/// Checks a `#[derive(Inbox)]` input: an enum without generics whose variants each wrap one
/// message type, no type twice.
pub(crate) fn inbox<'a>(def: InboxDef<'a>, errors: &mut Errors) -> Option<CheckedInbox<'a>> {
    let all = match def.variants {
        Ok(all) => all,
        Err(error) => {
            errors.push(error);
            return None;
        }
    };
    if !def.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            def.generics,
            "a generic inbox is not supported: each variant wraps one concrete message type; \
             remove the type parameters",
        ));
        return None;
    }
    if all.is_empty() {
        errors.push(syn::Error::new_spanned(
            def.ident,
            "an inbox needs at least one variant, as in `enum StrategyIn { Quote(Quote) }`; an \
             actor with no input takes `()` as its inbox",
        ));
    }
    let mut seen: HashMap<String, &Ident> = HashMap::new();
    let mut variants = Vec::with_capacity(all.len());
    for variant in all {
        let Some(ty) = parse::single_unnamed_field(variant) else {
            errors.push(variant_shape_error(variant));
            continue;
        };
        let key = ty.to_token_stream().to_string();
        if let Some(first) = seen.get(&key) {
            errors.push(syn::Error::new_spanned(
                ty,
                format!(
                    "`{key}` is wrapped by variant `{first}` already: a message type may appear \
                     in one variant only, since the bus routes by type; remove this variant"
                ),
            ));
            continue;
        }
        seen.insert(key, &variant.ident);
        variants.push((&variant.ident, ty));
    }
    Some(CheckedInbox {
        ident: def.ident,
        variants,
    })
}

/// The error for an `Inbox` variant that does not wrap exactly one type.
fn variant_shape_error(variant: &Variant) -> syn::Error {
    let name = &variant.ident;
    match &variant.fields {
        Fields::Unit => syn::Error::new_spanned(
            variant,
            format!(
                "variant `{name}` carries no message: an `Inbox` variant wraps exactly one \
                 message type, as in `{name}({name})`"
            ),
        ),
        Fields::Named(fields) => syn::Error::new_spanned(
            fields,
            format!(
                "variant `{name}` has named fields: an `Inbox` variant wraps exactly one message \
                 type in parentheses, as in `{name}({name})`"
            ),
        ),
        Fields::Unnamed(fields) => syn::Error::new_spanned(
            fields,
            format!(
                "variant `{name}` wraps {} types: an `Inbox` variant wraps exactly one message \
                 type, as in `{name}({name})`; to receive several values at once, derive \
                 `Message` on a struct that holds them and wrap that",
                fields.unnamed.len()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_topics_pass() {
        for topic in [
            "md.quote",
            "Quote",
            "a",
            "md-feed_2.l2",
            "robot7/odom",
            &"x".repeat(TOPIC_MAX_LEN),
        ] {
            assert_eq!(topic_problem(topic), None, "{topic}");
        }
    }

    #[test]
    fn empty_topic_is_refused() {
        assert!(topic_problem("").is_some_and(|p| p.contains("empty")));
    }

    #[test]
    fn topic_characters_are_checked() {
        for (topic, bad) in [("md quote", "' '"), ("md*", "'*'"), ("grö", "'ö'")] {
            let problem = topic_problem(topic).unwrap_or_default();
            assert!(problem.contains(bad), "{topic}: {problem}");
        }
    }

    #[test]
    fn topic_segments_are_non_empty() {
        for topic in [".md", "md.", "md..quote", ".", "/md", "md/", "md./quote"] {
            let problem = topic_problem(topic).unwrap_or_default();
            assert!(problem.contains("empty segment"), "{topic}: {problem}");
        }
    }

    #[test]
    fn topic_length_is_limited() {
        let problem = topic_problem(&"x".repeat(TOPIC_MAX_LEN + 1)).unwrap_or_default();
        assert!(problem.contains("65 bytes"), "{problem}");
    }

    #[test]
    fn inbox_variants_must_wrap_one_type() {
        let input: syn::DeriveInput = syn::parse_quote! {
            enum In { A(A), B, C { c: C }, D(D, E), F(A), G(G) }
        };
        let mut errors = Errors::default();
        let checked = inbox(parse::inbox(&input), &mut errors);
        let names: Vec<String> = checked
            .map(|c| c.variants.iter().map(|(v, _)| v.to_string()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["A", "G"]);
        // B, C, D and F: four errors, one each.
        assert_eq!(
            errors
                .into_compile_errors()
                .to_string()
                .matches("compile_error")
                .count(),
            4
        );
    }
}
