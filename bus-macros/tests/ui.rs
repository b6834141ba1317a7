//! A binary of its own because trybuild builds a project of its own: compile-fail tests for the
//! derives, each `tests/ui/*.rs` holding one mistake, and its `.stderr` the one message the user
//! sees for it. The generated project depends on this crate and its dev-dependencies only
//! (llbus, and through it serde), which keeps its build short.
//!
//! The expected output is rustc's, so it is pinned to one toolchain: [`PINNED`], the one this
//! project builds with (`build.rs` checks which rustc builds the tests). Under another one the
//! comparison is marked ignored, and `cargo test` shows it with its reason
//! (`derive_errors_point_at_the_mistake ... ignored, pinned to rustc 1.95.0 ...`); under CI
//! (`CI=true`) the skip also fails the run (see [`the_ui_tests_are_not_skipped_in_ci`]) unless
//! `LLBUS_UI_SKIP_EXPECTED=1` says the skip is expected there.
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p llbus-macros --test ui`
//! and read every one before committing it.

/// The rustc release whose diagnostics the `.stderr` files hold (keep in step with `build.rs`).
const PINNED: &str = "rustc 1.95.0 ";

#[test]
#[cfg_attr(miri, ignore)]
#[cfg_attr(
    not(derive_ui_pinned),
    ignore = "pinned to rustc 1.95.0 and this is another rustc: the .stderr files would not match"
)]
fn derive_errors_point_at_the_mistake() {
    assert!(
        env!("DERIVE_UI_RUSTC").starts_with(PINNED),
        "built by {}, not {PINNED}",
        env!("DERIVE_UI_RUSTC")
    );
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

/// Fails when the comparison above is skipped under CI, so that a toolchain change cannot turn
/// the UI tests off unseen; `LLBUS_UI_SKIP_EXPECTED=1` accepts the skip (a CI job on another
/// toolchain). Off CI it passes and prints why the comparison was skipped (`--nocapture`
/// shows it; the ignored test's reason is shown either way).
#[cfg(not(derive_ui_pinned))]
#[test]
fn the_ui_tests_are_not_skipped_in_ci() {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let expected = std::env::var("LLBUS_UI_SKIP_EXPECTED").is_ok_and(|v| v == "1");
    let why = format!(
        "the compile-fail UI tests (bus-macros/tests/ui.rs) are pinned to {PINNED}and this is {}: \
         they were SKIPPED",
        env!("DERIVE_UI_RUSTC")
    );
    assert!(
        !ci || expected,
        "{why}; under CI that is a failure (set LLBUS_UI_SKIP_EXPECTED=1 if it is expected)"
    );
    eprintln!("WARNING: {why}");
}
