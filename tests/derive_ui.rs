//! Compile-fail tests for the derives: each `ui/*.rs` holds one mistake, and its `.stderr` the
//! one message the user sees for it.
//!
//! The expected output is rustc's, so it is pinned to one toolchain: [`PINNED`], the one this
//! project builds with. On another toolchain the test says so and passes without comparing.
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p tests --test derive_ui`
//! and read every one before committing it.

use std::process::Command;

/// The rustc release whose diagnostics the `.stderr` files hold.
const PINNED: &str = "rustc 1.95.0 ";

#[test]
#[cfg_attr(miri, ignore)]
fn derive_errors_point_at_the_mistake() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    if !version.starts_with(PINNED) {
        eprintln!("skipping the UI tests: they are pinned to {PINNED}and this is {version}");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
}
