//! `--psk HEX64` of the network examples: a pre-shared key from 64 hex digits.

/// A 32-byte key from 64 hex digits; `None` for anything else.
pub fn parse_psk(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (k, pair) in key.iter_mut().zip(bytes.chunks(2)) {
        *k = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}
