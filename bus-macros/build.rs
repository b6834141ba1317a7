//! Tells the tests which rustc builds them: `tests/ui.rs` compares rustc's diagnostics with
//! `.stderr` files written by one pinned release, and is marked ignored (with its reason shown
//! by `cargo test`) under any other.

use std::process::Command;

/// The rustc release the `tests/ui/*.stderr` files were written by (keep in step with
/// `tests/ui.rs`).
const PINNED: &str = "rustc 1.95.0 ";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(derive_ui_pinned)");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    if version.starts_with(PINNED) {
        println!("cargo::rustc-cfg=derive_ui_pinned");
    }
    let shown = if version.is_empty() {
        format!("unknown (`{rustc} --version` failed)")
    } else {
        version
    };
    println!("cargo::rustc-env=DERIVE_UI_RUSTC={shown}");
}
