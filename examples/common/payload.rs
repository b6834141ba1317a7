//! The `--size BYTES` payload of the publisher and subscriber examples: bytes derived from the
//! message's counter value, so the subscriber can check each message's content (a misplaced,
//! stale or corrupted fragment shows).

/// Word `j` of message `n`'s payload (splitmix64 of both).
fn word(n: u64, j: u64) -> u64 {
    let mut z = n
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(j.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The payload of message `n`: `size` bytes.
pub fn fill(n: u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    for (j, _) in (0..size).step_by(8).enumerate() {
        let bytes = word(n, j as u64).to_le_bytes();
        let take = (size - out.len()).min(8);
        out.extend_from_slice(&bytes[..take]);
    }
    out
}

/// Reliable-topic settings for messages of `size` bytes: history (publisher) and reorder
/// buffer (subscriber) of at least four messages' fragments, so a retransmission has a few
/// messages' time to arrive (the default 1024 frames hold 1.4 messages of 1 MB).
pub fn reliable_config(size: Option<usize>) -> llbus_net::ReliableConfig {
    let fragments = size.unwrap_or(0).div_ceil(1400);
    let frames = fragments.saturating_mul(4).max(1024);
    llbus_net::ReliableConfig {
        history: frames,
        reorder: frames,
        ..llbus_net::ReliableConfig::default()
    }
}

/// Whether `payload` is message `n`'s payload, and `size` bytes long if a size is given.
pub fn check(n: u64, payload: &[u8], size: Option<usize>) -> bool {
    size.is_none_or(|s| s == payload.len())
        && payload
            .chunks(8)
            .enumerate()
            .all(|(j, c)| c == &word(n, j as u64).to_le_bytes()[..c.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check() {
        for size in [0, 1, 7, 8, 9, 1000, 1 << 20] {
            let p = fill(42, size);
            assert_eq!(p.len(), size);
            assert!(check(42, &p, Some(size)));
            assert!(check(42, &p, None));
            assert!(!check(42, &p, Some(size + 1)));
            if size > 0 {
                assert!(
                    !check(43, &p, None) || size < 2,
                    "another message's content"
                );
                let mut bad = p.clone();
                bad[size / 2] ^= 1;
                assert!(!check(42, &bad, None));
            }
        }
    }
}
