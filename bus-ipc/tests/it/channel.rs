//! A channel's `Sender` and `Receiver` in one process: `send_slice`, `recv_slice` and
//! `recv_each` keep order across the ring's wrap, in runs of slots or a value at a time; a
//! channel made for a group is group-readable.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use llbus::Message;
use llbus_ipc::{ChannelConfig, Pod, Receiver, Sender};

use crate::fixtures::Tick;

/// Channels of 16 slots in this user's channel directory.
fn config() -> ChannelConfig {
    ChannelConfig {
        capacity: 16,
        ..ChannelConfig::default()
    }
}

/// A channel name of this process's for `test`.
fn channel(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

/// Removes a channel's file when the test ends, however it ends.
struct FileGuard(PathBuf);

impl Drop for FileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn guard(name: &str) -> FileGuard {
    FileGuard(config().path(name))
}

#[test]
fn group_files_are_group_readable() {
    let name = channel("group");
    let _g = guard(&name);
    // SAFETY: getegid cannot fail.
    let gid = unsafe { libc::getegid() };
    let cfg = ChannelConfig {
        group: Some(gid),
        ..config()
    };
    let tx = Sender::<Tick, Pod>::create(&name, &cfg).expect("create");
    let meta = std::fs::metadata(tx.path()).expect("file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), gid);
}

/// A plain-data message 12 bytes wide: its slots are 16, so slices go a value at a time.
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.narrow")]
#[repr(C)]
struct Narrow {
    seq: u32,
    a: u32,
    b: u32,
}

// SAFETY: `repr(C)` of three u32s: no padding, any bits are a `Narrow`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Narrow {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Narrow {}

/// Sends `0..total` through a 16-slot channel with `send_slice` in chunks of 7 and receives
/// them in chunks of 5, with `recv_slice` or (`each`) `recv_each`, so batches fill the ring,
/// wrap, and stop short; returns what arrived.
fn through_slices<T: Message + llbus_ipc::bytemuck::Pod>(
    test: &str,
    total: u32,
    make: fn(u32) -> T,
    each: bool,
) -> Vec<T> {
    let name = channel(test);
    let _file = guard(&name);
    let mut tx = Sender::<T, Pod>::create(&name, &config()).expect("the channel is created");
    let mut rx = Receiver::<T, Pod>::open(&name, &config()).expect("the reader attaches");
    let all: Vec<T> = (0..total).map(make).collect();
    let (mut sent, mut got) = (0usize, Vec::new());
    let mut buf = [make(u32::MAX); 5];
    while got.len() < all.len() {
        let end = (sent + 7).min(all.len());
        let k = tx.send_slice(&all[sent..end]).expect("the ring is sound");
        assert!(k <= end - sent);
        sent += k;
        let n = if each {
            let before = got.len();
            let n = rx
                .recv_each(buf.len(), |v| got.push(v))
                .expect("the ring is sound");
            assert_eq!(
                got.len() - before,
                n,
                "recv_each counts what it handed over"
            );
            n
        } else {
            let n = rx.recv_slice(&mut buf).expect("the ring is sound");
            got.extend_from_slice(&buf[..n]);
            n
        };
        assert!(n > 0 || sent == got.len(), "values sent but none received");
        assert!(got.len() <= sent);
    }
    got
}

/// A plain-data message aligned beyond the slots' placement (slot `i` starts at
/// 1024 + 2048 i bytes into the mapping), so `recv_each` cannot view a run as a slice of it and
/// reads it a value at a time, unaligned.
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.huge")]
#[repr(C, align(2048))]
struct Huge {
    seq: u64,
    body: [[u64; 32]; 7],
    tail: [u64; 31],
}

// SAFETY: `repr(C)` of 256 u64s, 2048 bytes at alignment 2048: no padding, any bits valid.
unsafe impl llbus_ipc::bytemuck::Zeroable for Huge {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Huge {}

#[test]
fn slices_keep_order_across_the_wrap_in_runs_or_one_at_a_time() {
    for each in [false, true] {
        let test = |what: &str| format!("slices-{what}-{each}");
        // 8 wide: one copy (recv_slice) or one slice view (recv_each) per run of slots.
        let wide = through_slices(
            &test("wide"),
            1000,
            |i| Tick {
                seq: u64::from(i),
                check: u64::from(i) * 3,
            },
            each,
        );
        assert!(wide
            .iter()
            .enumerate()
            .all(|(i, t)| t.seq == i as u64 && t.check == 3 * i as u64));
        assert_eq!(wide.len(), 1000, "each={each}");
        // 12 wide in 16-byte slots: a value at a time, same results.
        let narrow = through_slices(
            &test("narrow"),
            1000,
            |i| Narrow {
                seq: i,
                a: !i,
                b: i.rotate_left(7),
            },
            each,
        );
        assert_eq!(narrow.len(), 1000, "each={each}");
        assert!(narrow.iter().enumerate().all(|(i, n)| n.seq == i as u32
            && n.a == !(i as u32)
            && n.b == (i as u32).rotate_left(7)));
    }
    // Aligned beyond the slots: `recv_each`'s unaligned path, same results.
    let huge = through_slices(
        "slices-huge",
        100,
        |i| {
            let mut h = Huge {
                seq: u64::from(i),
                body: [[0; 32]; 7],
                tail: [0; 31],
            };
            h.body[6][31] = u64::from(i) * 7;
            h.tail[30] = !u64::from(i);
            h
        },
        true,
    );
    assert_eq!(huge.len(), 100);
    assert!(huge.iter().enumerate().all(|(i, h)| h.seq == i as u64
        && h.body[6][31] == 7 * i as u64
        && h.tail[30] == !(i as u64)));
}
