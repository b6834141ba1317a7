//! Derive macros for [llbus](https://docs.rs/llbus): `#[derive(Message)]` and
//! `#[derive(Inbox)]`.
//!
//! Users do not depend on this crate directly: `llbus` re-exports both derives, and the code
//! they generate names only `::llbus::...` and `::core::...` paths.
//!
//! Everything is computed at compile time: the topic id, the schema fingerprint, and the wiring
//! of an inbox enum. The generated code allocates nothing and dispatches statically.
//!
//! Each derive parses its input (`parse`), checks it (`validate`) and writes the impls
//! (`expand`). A mistake is reported at the offending span with what to write instead, and the
//! impls are still generated from what was usable, so one mistake yields one message.
#![deny(missing_docs)]

mod expand;
mod parse;
mod validate;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `llbus::Message` (and `llbus::Schema`) for a struct or enum.
///
/// ```
/// use llbus::Message;
///
/// #[derive(Message)]
/// #[message(topic = "md.quote")]
/// struct Quote {
///     px: f64,
///     qty: u32,
/// }
///
/// assert_eq!(Quote::TOPIC, "md.quote");
/// assert_eq!(Quote::TOPIC_ID, llbus::topic_id("md.quote"));
/// ```
///
/// # The topic
///
/// `#[message(topic = "...")]` names the topic. Without the attribute the topic is the type's
/// name exactly as written, without its module path: `struct Quote` publishes on `"Quote"`.
///
/// A topic name is 1 to 64 bytes of ASCII letters, digits, `_` and `-`, in segments separated by
/// `.` or `/` that are not empty (so no leading, trailing or doubled separator): the rule of
/// `llbus::TopicName`, which names topics at run time. Names are case sensitive. Anything else
/// is a compile error at the name.
///
/// `TOPIC_ID` is `llbus::topic_id(TOPIC)`: FNV-1a 64 over the name's bytes, the same on every
/// host.
///
/// # The fingerprint
///
/// `FINGERPRINT` is the type's `llbus::Schema::SHAPE`, which the derive also implements: a hash
/// of the type's name, its field (and variant) names and order, and its field types,
/// recursively; the algorithm is documented on `llbus::Schema`. It sees the Rust names as
/// written, not serde renames, and neither the topic nor the module path: two crates with the
/// same definition agree.
///
/// # What it accepts
///
/// Structs with named fields, tuple structs, unit structs and enums, without generic parameters
/// (a topic carries one concrete type). Every field type must implement `llbus::Schema`: the
/// primitives, `String`, `Vec<T>`, arrays, `Option<T>`, `Box<T>`, tuples, and other types that
/// derive `Message` do; any other field type is a compile error at that field.
///
/// The type must also be `Send + 'static`, as `llbus::Message` requires.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let mut errors = parse::Errors::default();
    let def = parse::message(&input, &mut errors);
    let mut out = validate::message(def, &mut errors)
        .map(|checked| expand::message(&checked))
        .unwrap_or_default();
    out.extend(errors.into_compile_errors());
    out.into()
}

/// Derives `llbus::Inbox` for an enum whose variants each wrap one message type, so that an
/// actor can take several topics as one input.
///
/// ```
/// use llbus::{Inbox, Message, TopicSpec};
///
/// #[derive(Message)]
/// struct Quote { px: f64 }
/// #[derive(Message)]
/// struct Trade { px: f64, qty: u32 }
///
/// #[derive(Inbox)]
/// enum StrategyIn {
///     Quote(Quote),
///     Trade(Trade),
/// }
///
/// let mut topics = Vec::new();
/// StrategyIn::topics(&mut topics);
/// let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
/// assert_eq!(names, ["Quote", "Trade"]);
///
/// let input: StrategyIn = Quote { px: 1.5 }.into();
/// assert!(matches!(input, StrategyIn::Quote(_)));
/// ```
///
/// Subscribing an actor to the enum subscribes it to every variant's topic. Its `poll` visits
/// the variants in declaration order, hands up to `budget` messages of each to the handler
/// wrapped in their variant, and returns the sum: no boxing, no `dyn`, no allocation. The derive
/// also writes `From<M>` for each variant's message type `M`.
///
/// Each variant has exactly one unnamed field, its message type, and a message type appears in
/// one variant only (types are compared as written; the same type written two ways, as `Quote`
/// and `crate::Quote`, is caught by rustc as two conflicting `From` impls). Generic enums are
/// refused. An actor with no input takes `()` as its inbox.
#[proc_macro_derive(Inbox)]
pub fn derive_inbox(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let mut errors = parse::Errors::default();
    let def = parse::inbox(&input);
    let mut out = validate::inbox(def, &mut errors)
        .map(|checked| expand::inbox(&checked))
        .unwrap_or_default();
    out.extend(errors.into_compile_errors());
    out.into()
}
