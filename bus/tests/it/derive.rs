//! `#[derive(Message)]`: topic names and ids, and schema fingerprints that change with the
//! type's shape and only with it.
#![allow(dead_code)] // Most types here exist for their fingerprints only.

use llbus::{topic_id, Message, Schema, ShapeHasher};

/// FNV-1a 64 reference vectors (Fowler, Noll, Vo test suite): the topic id is on the wire, so
/// these must never change.
#[test]
fn topic_id_matches_fnv1a64_golden_vectors() {
    let golden: [(&str, u64); 7] = [
        ("", 0xcbf2_9ce4_8422_2325),
        ("a", 0xaf63_dc4c_8601_ec8c),
        ("b", 0xaf63_df4c_8601_f1a5),
        ("c", 0xaf63_de4c_8601_eff2),
        ("foo", 0xdcb2_7518_fed9_d577),
        ("foobar", 0x8594_4171_f739_67e8),
        ("chongo was here!\n", 0x4681_0940_eff5_f915),
    ];
    for (name, id) in golden {
        assert_eq!(topic_id(name), id, "{name:?}");
    }
}

mod market {
    use llbus::Message;

    #[derive(Message, Clone, Debug, PartialEq)]
    pub enum Venue {
        Xnas,
        Xlon,
        Other(String),
    }

    #[derive(Message, Clone, Debug, PartialEq)]
    #[message(topic = "md.quote")]
    pub struct Quote {
        pub px: f64,
        pub qty: u32,
        pub venue: Venue,
    }

    #[derive(Message, Clone, Copy, Debug)]
    pub struct Heartbeat;
}

use market::{Heartbeat, Quote, Venue};

/// Topic ids and fingerprints of derived types, worked out independently of the crate (by a
/// short script implementing the algorithm documented on `Schema`). The bridge puts both on the
/// wire, so a change here is a protocol change.
#[test]
fn derived_constants_match_golden_values() {
    assert_eq!(Quote::TOPIC, "md.quote");
    assert_eq!(Quote::TOPIC_ID, 0x163c_596d_2bed_0152);
    assert_eq!(Heartbeat::TOPIC_ID, 0xbb06_e4bc_7e4e_3277);
    assert_eq!(Venue::TOPIC_ID, 0x96d9_1ac2_46fd_7abc);
    assert_eq!(Venue::FINGERPRINT, 0x2bd9_e466_a67f_5743);
    assert_eq!(Quote::FINGERPRINT, 0x0057_294b_14d2_eabf);
    assert_eq!(Heartbeat::FINGERPRINT, 0x7fc1_88bb_cb01_1d47);
}

#[test]
fn topic_defaults_to_the_type_name_as_written() {
    assert_eq!(Heartbeat::TOPIC, "Heartbeat");
    assert_eq!(Venue::TOPIC, "Venue");
    assert_eq!(Heartbeat::TOPIC_ID, topic_id("Heartbeat"));

    #[derive(Message)]
    struct r#Raw;
    assert_eq!(Raw::TOPIC, "Raw");
}

#[test]
fn topic_id_is_the_hash_of_the_topic() {
    #[derive(Message)]
    #[message(topic = "sys.heart-beat_2")]
    struct Beat;
    assert_eq!(Beat::TOPIC, "sys.heart-beat_2");
    assert_eq!(Beat::TOPIC_ID, topic_id("sys.heart-beat_2"));
}

#[test]
fn constants_are_usable_at_compile_time() {
    const ID: u64 = Quote::TOPIC_ID;
    const FP: u64 = Quote::FINGERPRINT;
    const _: () = assert!(ID == topic_id("md.quote"));
    assert_eq!(FP, <Quote as Schema>::SHAPE);
}

#[test]
fn identical_definitions_in_two_crates_agree() {
    use llbus_test_twin as twin;
    assert_eq!(Quote::FINGERPRINT, twin::Quote::FINGERPRINT);
    assert_eq!(Quote::TOPIC_ID, twin::Quote::TOPIC_ID);
    assert_eq!(Venue::FINGERPRINT, twin::Venue::FINGERPRINT);
    assert_eq!(Heartbeat::FINGERPRINT, twin::Heartbeat::FINGERPRINT);
    assert_eq!(Heartbeat::TOPIC, twin::Heartbeat::TOPIC);
}

/// Variants of `Quote`, each differing from `market::Quote` in one way.
mod changed {
    use llbus::Message;

    use super::market::Venue;

    pub mod renamed_field {
        #[derive(super::Message)]
        pub struct Quote {
            pub price: f64,
            pub qty: u32,
            pub venue: super::Venue,
        }
    }

    pub mod reordered_fields {
        #[derive(super::Message)]
        pub struct Quote {
            pub qty: u32,
            pub px: f64,
            pub venue: super::Venue,
        }
    }

    pub mod retyped_field {
        #[derive(super::Message)]
        pub struct Quote {
            pub px: f64,
            pub qty: u64,
            pub venue: super::Venue,
        }
    }

    pub mod added_field {
        #[derive(super::Message)]
        pub struct Quote {
            pub px: f64,
            pub qty: u32,
            pub venue: super::Venue,
            pub ts: i64,
        }
    }

    pub mod renamed_type {
        #[derive(super::Message)]
        pub struct Quote2 {
            pub px: f64,
            pub qty: u32,
            pub venue: super::Venue,
        }
    }

    /// `Quote` written exactly as in `market`, but its nested `Venue` gained a variant.
    pub mod nested_changed {
        use llbus::Message;

        #[derive(Message)]
        pub enum Venue {
            Xnas,
            Xlon,
            Xpar,
            Other(String),
        }

        #[derive(Message)]
        #[message(topic = "md.quote")]
        pub struct Quote {
            pub px: f64,
            pub qty: u32,
            pub venue: Venue,
        }
    }

    /// As `nested_changed`, one level deeper: a struct inside a `Vec` inside an `Option`.
    pub mod deeply_nested {
        use llbus::Message;

        pub mod v1 {
            use super::Message;
            #[derive(Message)]
            pub struct Level {
                pub px: f64,
            }
            #[derive(Message)]
            pub struct Book {
                pub bids: Option<Vec<Level>>,
            }
        }

        pub mod v2 {
            use super::Message;
            #[derive(Message)]
            pub struct Level {
                pub px: f32,
            }
            #[derive(Message)]
            pub struct Book {
                pub bids: Option<Vec<Level>>,
            }
        }
    }
}

#[test]
fn fingerprint_changes_with_the_shape() {
    let original = Quote::FINGERPRINT;
    let changed = [
        ("renamed field", changed::renamed_field::Quote::FINGERPRINT),
        (
            "reordered fields",
            changed::reordered_fields::Quote::FINGERPRINT,
        ),
        ("retyped field", changed::retyped_field::Quote::FINGERPRINT),
        ("added field", changed::added_field::Quote::FINGERPRINT),
        ("renamed type", changed::renamed_type::Quote2::FINGERPRINT),
        (
            "nested type changed",
            changed::nested_changed::Quote::FINGERPRINT,
        ),
    ];
    for (what, fingerprint) in changed {
        assert_ne!(original, fingerprint, "{what}");
    }
    for (i, (a, x)) in changed.iter().enumerate() {
        for (b, y) in &changed[i + 1..] {
            assert_ne!(x, y, "{a} vs {b}");
        }
    }
}

#[test]
fn fingerprint_follows_nesting_through_containers() {
    use changed::deeply_nested::{v1, v2};
    assert_ne!(v1::Level::FINGERPRINT, v2::Level::FINGERPRINT);
    assert_ne!(v1::Book::FINGERPRINT, v2::Book::FINGERPRINT);
}

#[test]
fn fingerprint_ignores_the_topic() {
    assert_eq!(changed::nested_changed::Quote::TOPIC_ID, Quote::TOPIC_ID);

    mod other_topic {
        #[derive(llbus::Message)]
        #[message(topic = "md.quote.v2")]
        pub struct Quote {
            pub px: f64,
            pub qty: u32,
            pub venue: super::Venue,
        }
    }
    assert_eq!(other_topic::Quote::FINGERPRINT, Quote::FINGERPRINT);
    assert_ne!(other_topic::Quote::TOPIC_ID, Quote::TOPIC_ID);
}

mod kinds {
    use llbus::Message;

    pub mod named {
        #[derive(llbus::Message)]
        pub struct Pair {
            pub a: u8,
            pub b: u8,
        }
    }
    pub mod tuple {
        #[derive(llbus::Message)]
        pub struct Pair(pub u8, pub u8);
    }
    pub mod tuple_swapped {
        #[derive(llbus::Message)]
        pub struct Pair(pub u8, pub i8);
    }
    pub mod unit {
        #[derive(llbus::Message)]
        pub struct Pair;
    }
    pub mod enum_ {
        #[derive(llbus::Message)]
        pub enum Pair {
            A,
            B,
        }
    }
    pub mod enum_reordered {
        #[derive(llbus::Message)]
        pub enum Pair {
            B,
            A,
        }
    }
    pub mod enum_renamed {
        #[derive(llbus::Message)]
        pub enum Pair {
            A,
            C,
        }
    }
    pub mod enum_fields {
        #[derive(llbus::Message)]
        pub enum Pair {
            A(u8),
            B,
        }
    }

    /// Every field type the `Schema` impls cover, in one message.
    #[derive(Message)]
    pub struct Everything {
        pub unsigned: (u8, u16, u32, u64, u128, usize),
        pub signed: (i8, i16, i32, i64, i128, isize),
        pub other: (bool, char, f32, f64, ()),
        pub text: (String, &'static str),
        pub boxed: Box<[Option<super::Venue>; 4]>,
        pub twelve: (u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8, u8),
        pub nested: Vec<named::Pair>,
    }
}

#[test]
fn structs_tuple_structs_unit_structs_and_enums_all_differ() {
    use kinds::*;
    let all = [
        named::Pair::FINGERPRINT,
        tuple::Pair::FINGERPRINT,
        tuple_swapped::Pair::FINGERPRINT,
        unit::Pair::FINGERPRINT,
        enum_::Pair::FINGERPRINT,
        enum_reordered::Pair::FINGERPRINT,
        enum_renamed::Pair::FINGERPRINT,
        enum_fields::Pair::FINGERPRINT,
        Everything::FINGERPRINT,
    ];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(unit::Pair::TOPIC, "Pair");
}

#[test]
fn hand_written_shapes_compose_with_derived_ones() {
    struct OrderId(u64);
    impl Schema for OrderId {
        const SHAPE: u64 = ShapeHasher::new().name("OrderId").shape::<u64>().finish();
    }

    #[derive(Message)]
    struct Fill {
        id: OrderId,
    }
    #[derive(Message)]
    struct RawFill {
        id: u64,
    }
    assert_ne!(Fill::FINGERPRINT, RawFill::FINGERPRINT);
}

/// Messages travel by value through serde codecs; the derive must not get in the way of the
/// usual derives beside it.
#[test]
fn derive_sits_beside_serde() {
    #[derive(Message, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
    #[message(topic = "md.trade")]
    struct Trade {
        px: f64,
        qty: u32,
    }
    assert_eq!(Trade::TOPIC_ID, 0x7320_83af_51a2_bedc);
}

/// The generated code names everything by absolute path, so it compiles without the prelude and
/// next to user items that shadow common names.
mod hygiene {
    #![no_implicit_prelude]

    pub struct Schema;
    pub struct ShapeHasher;
    pub type Result = ();

    #[derive(::llbus::Message)]
    #[message(topic = "hygiene.bare")]
    pub struct Bare {
        pub v: u8,
        pub s: ::std::string::String,
    }
}

#[test]
fn derive_needs_no_prelude() {
    assert_eq!(hygiene::Bare::TOPIC, "hygiene.bare");
}

/// The derive's topic rule is `TopicName`'s: a name with `/` separators derives, and its
/// constants are the run-time name's.
#[test]
fn a_derived_topic_is_a_valid_run_time_topic_name_slashes_included() {
    #[derive(Message)]
    #[message(topic = "robot7/odom")]
    #[allow(dead_code)]
    struct Odom {
        x: f64,
    }
    let name = llbus::TopicName::new(Odom::TOPIC).expect("the derive's name is a valid name");
    assert_eq!(name, llbus::TopicName::of::<Odom>());
    assert_eq!(name.id(), topic_id("robot7/odom"));
}
