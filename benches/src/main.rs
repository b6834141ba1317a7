//! The llbus comparison harness (placeholder).
fn main() {}
