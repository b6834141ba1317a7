//! Expand: the generated impls, with absolute paths only (`::llbus::...`, `::core::...`).
//!
//! `#[derive(Message)]` writes `impl Schema` (the shape hash described on `llbus::Schema`, and
//! the same shape as data, `Schema::shape`) and `impl Message` on top of it. `#[derive(Inbox)]` writes `impl Inbox`, one `Inputs<M>` per
//! variant polled in declaration order, and `From<M>` per variant.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::{ext::IdentExt, spanned::Spanned, Fields};

use crate::validate::{CheckedBody, CheckedInbox, CheckedMessage};

/// The `Schema` and `Message` impls of a checked `#[derive(Message)]` input.
///
/// Every field type is named once, in a hidden inherent table of `llbus::schema::Part`s (one
/// row per struct or variant); the hash (`SHAPE`) and the tree (`shape()`) are both computed
/// from that table, so a field type without `Schema` is reported once, at the field.
pub(crate) fn message(checked: &CheckedMessage<'_>) -> TokenStream {
    let ident = checked.ident;
    let name = &checked.name;
    let topic = &checked.topic;
    let (rows, hash, tree) = match checked.body {
        CheckedBody::Struct(fields) => {
            let row = parts_row(fields);
            let hash = fields_hash(fields, 0);
            let tree = fields_tree(fields, 0);
            (
                vec![row],
                quote!(.name("struct").name(#name) #hash),
                quote!(::llbus::schema::Shape::structure(#name, #tree)),
            )
        }
        CheckedBody::Enum(variants) => {
            let count = variants.len() as u64;
            let rows = variants.iter().map(|v| parts_row(&v.fields)).collect();
            let hashes = variants.iter().enumerate().map(|(i, variant)| {
                let name = variant.ident.unraw().to_string();
                let fields = fields_hash(&variant.fields, i);
                quote!(.name(#name) #fields)
            });
            let trees = variants.iter().enumerate().map(|(i, variant)| {
                let name = variant.ident.unraw().to_string();
                let fields = fields_tree(&variant.fields, i);
                quote!(::llbus::schema::Variant::new(#name, #fields))
            });
            (
                rows,
                quote!(.name("enum").name(#name).word(#count) #(#hashes)*),
                quote!(::llbus::schema::Shape::enumeration(#name, [#(#trees),*])),
            )
        }
    };
    let n = rows.len();
    quote! {
        #[automatically_derived]
        impl #ident {
            #[doc(hidden)]
            const __LLBUS_PARTS: [&'static [::llbus::schema::Part]; #n] = [#(#rows),*];
        }

        #[automatically_derived]
        impl ::llbus::Schema for #ident {
            const SHAPE: ::core::primitive::u64 = ::llbus::ShapeHasher::new() #hash .finish();

            fn shape() -> ::llbus::schema::Shape {
                #tree
            }
        }

        #[automatically_derived]
        impl ::llbus::Message for #ident {
            const TOPIC: &'static ::core::primitive::str = #topic;
            const TOPIC_ID: ::core::primitive::u64 = ::llbus::topic_id(#topic);
            const FINGERPRINT: ::core::primitive::u64 = <Self as ::llbus::Schema>::SHAPE;

            fn schema() -> ::llbus::schema::Shape {
                <Self as ::llbus::Schema>::shape()
            }
        }
    }
}

/// One row of the parts table: `&[Part::of::<A>("a"), ...]`. Each `Part::of::<T>` carries the
/// span of `T`, so a type without `Schema` is reported at the field.
fn parts_row(fields: &Fields) -> TokenStream {
    let parts = fields.iter().map(|field| {
        let ty = &field.ty;
        let name = field
            .ident
            .as_ref()
            .map(|ident| ident.unraw().to_string())
            .unwrap_or_default();
        quote_spanned!(ty.span()=> ::llbus::schema::Part::of::<#ty>(#name))
    });
    quote!(&[#(#parts),*])
}

/// The `ShapeHasher` calls for the field list in row `row` of the parts table.
fn fields_hash(fields: &Fields, row: usize) -> TokenStream {
    match fields {
        Fields::Named(_) => quote!(.named_parts(Self::__LLBUS_PARTS[#row])),
        Fields::Unnamed(_) => quote!(.unnamed_parts(Self::__LLBUS_PARTS[#row])),
        Fields::Unit => quote!(.name("unit")),
    }
}

/// The `llbus::schema::Fields` value for the field list in row `row` of the parts table.
fn fields_tree(fields: &Fields, row: usize) -> TokenStream {
    match fields {
        Fields::Named(_) => {
            quote!(::llbus::schema::Fields::from_named_parts(Self::__LLBUS_PARTS[#row]))
        }
        Fields::Unnamed(_) => {
            quote!(::llbus::schema::Fields::from_unnamed_parts(Self::__LLBUS_PARTS[#row]))
        }
        Fields::Unit => quote!(::llbus::schema::Fields::Unit),
    }
}

/// The `Inbox` and `From` impls of a checked `#[derive(Inbox)]` input.
pub(crate) fn inbox(checked: &CheckedInbox<'_>) -> TokenStream {
    let ident = checked.ident;
    let variants = &checked.variants;
    let tys: Vec<_> = variants.iter().map(|(_, ty)| *ty).collect();
    let index = (0..variants.len()).map(syn::Index::from);
    let topics = tys
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> ::llbus::TopicSpec::of::<#ty>()));
    let polls = variants.iter().zip(index.clone()).map(|((variant, _), i)| {
        quote!(rx.#i.poll_edges(budget, &mut *on_topic, |message| handler(#ident::#variant(message))))
    });
    // With no variant (already reported as an error) the arguments are unused: name them so.
    let arg = |name: &str| {
        if variants.is_empty() {
            format_ident!("_{name}")
        } else {
            format_ident!("{name}")
        }
    };
    let (out, wiring, rx, budget, on_topic, handler) = (
        arg("out"),
        arg("wiring"),
        arg("rx"),
        arg("budget"),
        arg("on_topic"),
        arg("handler"),
    );
    let froms = variants.iter().map(|(variant, ty)| {
        quote! {
            #[automatically_derived]
            impl ::core::convert::From<#ty> for #ident {
                fn from(message: #ty) -> Self {
                    #ident::#variant(message)
                }
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl ::llbus::Inbox for #ident {
            type Receivers = (#(::llbus::Inputs<#tys>,)*);

            fn topics(#out: &mut ::llbus::__private::Vec<::llbus::TopicSpec>) {
                #(out.push(#topics);)*
            }

            fn receivers(#wiring: &mut ::llbus::Wiring) -> Self::Receivers {
                (#(::llbus::Inputs::<#tys>::take(wiring),)*)
            }

            fn poll<T: ::core::ops::FnMut(::core::primitive::u64), F: ::core::ops::FnMut(Self)>(
                #rx: &mut Self::Receivers,
                #budget: ::core::primitive::usize,
                #on_topic: &mut T,
                #handler: &mut F,
            ) -> ::core::primitive::usize {
                0 #(+ #polls)*
            }

            fn is_finished(#rx: &Self::Receivers) -> ::core::primitive::bool {
                true #(&& rx.#index.is_finished())*
            }
        }

        #(#froms)*
    }
}
