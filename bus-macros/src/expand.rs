//! Expand: the generated impls, with absolute paths only (`::llbus::...`, `::core::...`).
//!
//! `#[derive(Message)]` writes `impl Schema` (the shape hash described on `llbus::Schema`) and
//! `impl Message` on top of it. `#[derive(Inbox)]` writes `impl Inbox`, one `Inputs<M>` per
//! variant polled in declaration order, and `From<M>` per variant.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::{ext::IdentExt, spanned::Spanned, Fields};

use crate::validate::{CheckedBody, CheckedInbox, CheckedMessage};

/// The `Schema` and `Message` impls of a checked `#[derive(Message)]` input.
pub(crate) fn message(checked: &CheckedMessage<'_>) -> TokenStream {
    let ident = checked.ident;
    let name = &checked.name;
    let topic = &checked.topic;
    let shape = match checked.body {
        CheckedBody::Struct(fields) => {
            let fields = fields_shape(fields);
            quote!(.name("struct").name(#name) #fields)
        }
        CheckedBody::Enum(variants) => {
            let count = variants.len() as u64;
            let variants = variants.iter().map(|variant| {
                let name = variant.ident.unraw().to_string();
                let fields = fields_shape(&variant.fields);
                quote!(.name(#name) #fields)
            });
            quote!(.name("enum").name(#name).word(#count) #(#variants)*)
        }
    };
    quote! {
        #[automatically_derived]
        impl ::llbus::Schema for #ident {
            const SHAPE: ::core::primitive::u64 = ::llbus::ShapeHasher::new() #shape .finish();
        }

        #[automatically_derived]
        impl ::llbus::Message for #ident {
            const TOPIC: &'static ::core::primitive::str = #topic;
            const TOPIC_ID: ::core::primitive::u64 = ::llbus::topic_id(#topic);
            const FINGERPRINT: ::core::primitive::u64 = <Self as ::llbus::Schema>::SHAPE;
        }
    }
}

/// The `ShapeHasher` calls for a field list. Each field type's `.shape::<T>()` carries the span
/// of that type, so a type without `Schema` is reported at the field.
fn fields_shape(fields: &Fields) -> TokenStream {
    let count = fields.len() as u64;
    match fields {
        Fields::Named(named) => {
            let fields = named.named.iter().map(|field| {
                let ty = &field.ty;
                let name = field
                    .ident
                    .as_ref()
                    .map(|ident| ident.unraw().to_string())
                    .unwrap_or_default();
                let shape = quote_spanned!(ty.span()=> .shape::<#ty>());
                quote!(.name(#name) #shape)
            });
            quote!(.name("named").word(#count) #(#fields)*)
        }
        Fields::Unnamed(unnamed) => {
            let fields = unnamed.unnamed.iter().map(|field| {
                let ty = &field.ty;
                quote_spanned!(ty.span()=> .shape::<#ty>())
            });
            quote!(.name("unnamed").word(#count) #(#fields)*)
        }
        Fields::Unit => quote!(.name("unit")),
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
        quote!(rx.#i.poll(budget, |message| handler(#ident::#variant(message))))
    });
    // With no variant (already reported as an error) the arguments are unused: name them so.
    let arg = |name: &str| {
        if variants.is_empty() {
            format_ident!("_{name}")
        } else {
            format_ident!("{name}")
        }
    };
    let (out, wiring, rx, budget, handler) = (
        arg("out"),
        arg("wiring"),
        arg("rx"),
        arg("budget"),
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

            fn poll<F: ::core::ops::FnMut(Self)>(
                #rx: &mut Self::Receivers,
                #budget: ::core::primitive::usize,
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
