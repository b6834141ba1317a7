//! Schema fingerprints (placeholder until the derive-macro issue).
