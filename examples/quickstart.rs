//! Placeholder quickstart.
fn main() {}
