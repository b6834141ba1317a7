//! Parse: from the derive input to what each derive needs, reading `#[message(...)]`.
//!
//! Parsing keeps going after a mistake: every error goes into [`Errors`] and the parsed
//! definition keeps whatever was usable, so the expansion can still emit the impls and the user
//! sees one message per mistake instead of a cascade of missing-impl errors.

use proc_macro2::{TokenStream, TokenTree};
use syn::{
    punctuated::Punctuated, Attribute, Data, DeriveInput, Expr, ExprLit, Fields, Generics, Ident,
    Lit, LitStr, Token, Type, Variant,
};

/// The errors found so far, reported together as `compile_error!`s.
#[derive(Default)]
pub(crate) struct Errors {
    first: Option<syn::Error>,
}

impl Errors {
    /// Records one error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.first {
            Some(first) => first.combine(error),
            None => self.first = Some(error),
        }
    }

    /// The `compile_error!` invocations for every recorded error (nothing if there were none).
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.first
            .map(|error| error.to_compile_error())
            .unwrap_or_default()
    }
}

/// A `#[derive(Message)]` input.
pub(crate) struct MessageDef<'a> {
    /// The type's name.
    pub ident: &'a Ident,
    /// The type's generics (refused by validation if there are any).
    pub generics: &'a Generics,
    /// `topic = "..."` from `#[message(...)]`, the first one if there were several.
    pub topic: Option<LitStr>,
    /// The type's body.
    pub body: Body<'a>,
}

/// The body of a `#[derive(Message)]` type.
pub(crate) enum Body<'a> {
    /// A struct with named, unnamed or no fields.
    Struct(&'a Fields),
    /// An enum and its variants.
    Enum(&'a Punctuated<Variant, Token![,]>),
    /// A union (refused by validation); the span is the `union` keyword.
    Union(Token![union]),
}

/// Parses a `#[derive(Message)]` input, recording malformed `#[message(...)]` attributes.
pub(crate) fn message<'a>(input: &'a DeriveInput, errors: &mut Errors) -> MessageDef<'a> {
    let body = match &input.data {
        Data::Struct(data) => Body::Struct(&data.fields),
        Data::Enum(data) => Body::Enum(&data.variants),
        Data::Union(data) => Body::Union(data.union_token),
    };
    misplaced_attrs(&input.data, errors);
    MessageDef {
        ident: &input.ident,
        generics: &input.generics,
        topic: message_attrs(&input.attrs, errors),
        body,
    }
}

/// Records every `#[message(...)]` on a field or a variant: the attribute names the type's
/// topic and belongs on the type.
fn misplaced_attrs(data: &Data, errors: &mut Errors) {
    let mut check = |attrs: &[Attribute], what: &str| {
        for attr in attrs.iter().filter(|attr| attr.path().is_ident("message")) {
            errors.push(syn::Error::new_spanned(
                attr,
                format!(
                    "`#[message(...)]` names the type's topic and goes on the type, not on a \
                     {what}: move it above the `struct` or `enum`"
                ),
            ));
        }
    };
    match data {
        Data::Struct(data) => data.fields.iter().for_each(|f| check(&f.attrs, "field")),
        Data::Enum(data) => {
            for variant in &data.variants {
                check(&variant.attrs, "variant");
                variant.fields.iter().for_each(|f| check(&f.attrs, "field"));
            }
        }
        Data::Union(data) => data
            .fields
            .named
            .iter()
            .for_each(|f| check(&f.attrs, "field")),
    }
}

/// Reads every `#[message(...)]` attribute and returns the topic, if one was given.
fn message_attrs(attrs: &[Attribute], errors: &mut Errors) -> Option<LitStr> {
    let mut topic: Option<LitStr> = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("message")) {
        if !matches!(attr.meta, syn::Meta::List(_)) {
            errors.push(syn::Error::new_spanned(
                attr,
                "`#[message]` takes the topic in parentheses: write \
                 `#[message(topic = \"md.quote\")]`",
            ));
            continue;
        }
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("topic") {
                let value: Expr = meta.value()?.parse()?;
                let Expr::Lit(ExprLit {
                    lit: Lit::Str(lit), ..
                }) = value
                else {
                    errors.push(syn::Error::new_spanned(
                        value,
                        "the topic is a string literal: write `topic = \"md.quote\"`",
                    ));
                    return Ok(());
                };
                if topic.is_some() {
                    errors.push(syn::Error::new_spanned(
                        &meta.path,
                        "duplicate `topic`: a message has exactly one topic; remove this one",
                    ));
                } else {
                    topic = Some(lit);
                }
            } else {
                let key = meta
                    .path
                    .get_ident()
                    .map_or_else(|| "this key".to_owned(), |ident| format!("`{ident}`"));
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    format!(
                        "unknown key {key} in `#[message(...)]`: the only key is `topic`, \
                         as in `#[message(topic = \"md.quote\")]`"
                    ),
                ));
                skip_value(&meta)?;
            }
            Ok(())
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    topic
}

/// Skips the `= value` or `(...)` after an unknown key so that parsing can go on.
fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let _value: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _group: TokenTree = meta.input.parse()?;
    }
    Ok(())
}

/// A `#[derive(Inbox)]` input.
pub(crate) struct InboxDef<'a> {
    /// The type's name.
    pub ident: &'a Ident,
    /// The type's generics (refused by validation if there are any).
    pub generics: &'a Generics,
    /// The enum's variants, or the error that the input is not an enum.
    pub variants: Result<&'a Punctuated<Variant, Token![,]>, syn::Error>,
}

/// Parses a `#[derive(Inbox)]` input.
pub(crate) fn inbox(input: &DeriveInput) -> InboxDef<'_> {
    let not_enum = |keyword: &dyn quote::ToTokens| {
        syn::Error::new_spanned(
            keyword,
            "`#[derive(Inbox)]` is for enums whose variants each wrap one message type, \
             as in `enum StrategyIn { Quote(Quote), Trade(Trade) }`; a single message type \
             is an inbox already: derive `Message` on it instead",
        )
    };
    let variants = match &input.data {
        Data::Enum(data) => Ok(&data.variants),
        Data::Struct(data) => Err(not_enum(&data.struct_token)),
        Data::Union(data) => Err(not_enum(&data.union_token)),
    };
    InboxDef {
        ident: &input.ident,
        generics: &input.generics,
        variants,
    }
}

/// The one field of an `Inbox` variant, if it has exactly one unnamed field.
pub(crate) fn single_unnamed_field(variant: &Variant) -> Option<&Type> {
    match &variant.fields {
        Fields::Unnamed(fields) if fields.unnamed.len() == 1 => {
            fields.unnamed.first().map(|field| &field.ty)
        }
        _ => None,
    }
}
