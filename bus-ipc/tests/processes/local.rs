//! What another local process of the same user (or root) can do to a running channel: resize,
//! grow or punch its memory through `/proc` (the seals refuse the resizes; both sides go on,
//! never ended by a signal), stop its writer (`open` fails promptly), hand over huge pages and
//! take them back (no SIGBUS), or write a payload nested as deep as a slot allows (an error, not
//! a stack overflow). The other side is [`child`] (chosen by `LLBUS_LOCAL_CHILD`) or one of the
//! `*_child` tests.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_ipc::{ChannelConfig, OpenError, PeerState, Pod, Receiver, Sender};
use tests::example_bins::Running;
use tests::local::{is_root, mapped_memfds_of, memfds_of};

use crate::fixtures::{config_in, send_fds, Dir, Tick};
use crate::{eventually, ready, reexec};

const CHILD_VAR: &str = "LLBUS_LOCAL_CHILD";
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

/// The configuration a child uses: 64 slots in `LLBUS_LOCAL_DIR` if set, else in the default
/// directory; users named in `LLBUS_LOCAL_ALLOW` admitted.
fn child_config() -> ChannelConfig {
    let mut c = ChannelConfig {
        capacity: 64,
        ..ChannelConfig::default()
    };
    if let Some(d) = std::env::var_os("LLBUS_LOCAL_DIR") {
        c.dir = PathBuf::from(d);
    }
    if let Ok(allow) = std::env::var("LLBUS_LOCAL_ALLOW") {
        c.allow_uids = allow.split(',').filter_map(|u| u.parse().ok()).collect();
    }
    c
}

/// A channel name of this process's for `test`.
pub(crate) fn channel(test: &str) -> String {
    format!("l{}-{test}", std::process::id())
}

/// Starts this binary as the other side: `mode` on channel `name`, as user `as_user` if given.
pub(crate) fn spawn(
    mode: &str,
    name: &str,
    as_user: Option<(u32, u32)>,
    env: &[(&str, String)],
) -> Running {
    let mut cmd = reexec("local::child");
    cmd.env(CHILD_VAR, mode)
        .env("LLBUS_LOCAL_CHANNEL", name)
        .env_remove("XDG_RUNTIME_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some((uid, gid)) = as_user {
        cmd.uid(uid).gid(gid);
    }
    Running::spawn(mode, cmd)
}

/// The number after `GOT ` on the child's next such line.
pub(crate) fn got(child: &mut Running) -> Option<u64> {
    child
        .wait_line(Duration::from_secs(10), |l| l.contains("GOT "))
        .and_then(|l| {
            l.split_once("GOT ")
                .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
        })
}

// ---------------------------------------------------------------------------------------------
// The other processes.

/// Not a test on its own: the entry point of the child processes (does nothing without
/// `LLBUS_LOCAL_CHILD`).
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_VAR) else {
        return;
    };
    let name = std::env::var("LLBUS_LOCAL_CHANNEL").unwrap_or_default();
    let config = child_config();
    let deadline = Instant::now() + CHILD_LIFETIME;
    match mode.as_str() {
        "writer" => {
            let mut tx = match Sender::<Tick, Pod>::create(&name, &config) {
                Ok(tx) => tx,
                Err(e) => {
                    println!("CREATE-ERROR {e}");
                    std::process::exit(2);
                }
            };
            println!("READY {}", tx.path().display());
            let mut seq = 0;
            while Instant::now() < deadline {
                if tx.heartbeat(false) == PeerState::Broken && tx.reset().is_err() {
                    println!("ERROR cannot reset");
                    std::process::exit(3);
                }
                match tx.try_send(&Tick::new(seq)) {
                    Ok(true) => seq += 1,
                    Ok(false) => {
                        let _ = tx.park(Duration::from_millis(1));
                    }
                    // The reader broke the ring (or someone scribbled on it): start afresh.
                    Err(_) => {
                        if tx.reset().is_err() {
                            println!("ERROR cannot reset");
                            std::process::exit(3);
                        }
                    }
                }
            }
        }
        "reader" => {
            let mut rx = match eventually(Duration::from_secs(10), || {
                Receiver::<Tick, Pod>::open(&name, &config).ok()
            }) {
                Some(rx) => rx,
                None => {
                    println!("OPEN-ERROR never attached");
                    std::process::exit(2);
                }
            };
            println!("READY {}", std::process::id());
            let (mut n, mut bad, mut last_said) = (0u64, 0u64, Instant::now());
            while Instant::now() < deadline {
                if !matches!(rx.heartbeat(true), PeerState::Alive(_)) {
                    // The writer went or started afresh: attach to its new ring.
                    if let Some(again) = eventually(Duration::from_secs(5), || {
                        Receiver::<Tick, Pod>::open(&name, &config).ok()
                    }) {
                        rx = again;
                    }
                }
                let r = rx.recv_batch(64, |t| {
                    if t.check != !t.seq {
                        bad += 1;
                    }
                    n += 1;
                });
                if let Err(e) = r {
                    // An error of its own: reconnect, as an import does.
                    println!("CORRUPT {e}");
                    match eventually(Duration::from_secs(5), || {
                        Receiver::<Tick, Pod>::open(&name, &config).ok()
                    }) {
                        Some(again) => rx = again,
                        None => {
                            println!("ERROR cannot reattach");
                            std::process::exit(3);
                        }
                    }
                }
                if last_said.elapsed() > Duration::from_millis(20) {
                    println!("GOT {n} BAD {bad}");
                    last_said = Instant::now();
                }
                let _ = rx.park(Duration::from_millis(1));
            }
        }
        "connect" => {
            // A process that connects to a channel's socket itself: what does it get?
            let path = config.path(&name);
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(mut s) => {
                    use std::io::Read;
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut buf = [0u8; 64];
                    let n = s.read(&mut buf).unwrap_or(0);
                    println!("CONNECTED GOT {n}");
                }
                Err(e) => println!("CONNECTED REFUSED {e}"),
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// Asserts `child` is still running or ended with an exit code, not a signal; returns its
/// output.
fn not_killed_by_a_signal(child: Running) -> String {
    let name = child.name().to_owned();
    let (status, out, err) = child.finish(Duration::from_millis(300));
    if let Some(s) = status {
        assert!(
            s.signal().is_none(),
            "{name} died by signal {:?}\n{out}\n{err}",
            s.signal()
        );
    }
    out
}

#[test]
fn resizing_the_shared_memory_is_refused_and_both_sides_keep_going() {
    let name = channel("resize");
    let mut writer = spawn("writer", &name, None, &[]);
    let socket = PathBuf::from(ready(&mut writer));
    let mut reader = spawn("reader", &name, None, &[]);
    let reader_pid: u32 = ready(&mut reader).parse().expect("pid");
    let Some(before) = got(&mut reader) else {
        let (_, out, err) = reader.finish(Duration::from_secs(1));
        panic!("the reader receives nothing:\n{out}\n{err}");
    };

    // Every way a process of the same user (or root) reaches the memory: the writer's
    // descriptor, and the mappings of both sides (the reader closed its descriptor).
    let writer_pid = writer.pid();
    let mut regions = memfds_of(writer_pid);
    if is_root() {
        regions.extend(mapped_memfds_of(writer_pid));
        regions.extend(mapped_memfds_of(reader_pid));
    }
    assert!(!regions.is_empty(), "no channel memory found in /proc");
    for path in &regions {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let len = file.metadata().expect("stat").len();
        for (what, r) in [
            ("truncate to 0", file.set_len(0)),
            ("truncate to a page", file.set_len(4096)),
            ("grow", file.set_len(len * 2)),
        ] {
            let e = r.expect_err(what);
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{what}: {e}");
        }
        // SAFETY: fallocate on an open descriptor; no memory of ours is passed.
        let rc = unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                len as libc::off_t,
                4096,
            )
        };
        assert_eq!(rc, -1, "growing by fallocate was allowed");
        assert_eq!(file.metadata().expect("stat").len(), len, "the size moved");
    }
    // The name is a socket: it cannot be opened, let alone truncated.
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(&socket)
        .expect_err("a socket is not a file");
    assert_ne!(e.kind(), ErrorKind::NotFound, "{e}");

    // Both are alive and the messages still flow.
    let after = eventually(Duration::from_secs(10), || {
        got(&mut reader).filter(|&n| n > before + 100)
    });
    assert!(after.is_some(), "no message after the attempts");

    // What the seals allow, punching holes (zeroing pages, header included), only makes
    // the bytes wrong: each side notices and starts afresh, or carries on; no signal.
    if let Some(path) = regions.first() {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        let len = file.metadata().expect("stat").len();
        // SAFETY: as above.
        let rc = unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                len as libc::off_t,
            )
        };
        assert_eq!(
            rc,
            0,
            "punching a hole: {}",
            std::io::Error::last_os_error()
        );
        // And scribbling: a tail far ahead.
        let _ = file.write_at(&(u64::MAX / 3).to_le_bytes(), 384);
    }
    std::thread::sleep(Duration::from_millis(300));
    not_killed_by_a_signal(reader);
    not_killed_by_a_signal(writer);
}

/// A recursive type (a user's, with a hand-written `Schema`, which llbus documents): a chain of
/// `Node(Box<Tree>)` as deep as the payload allows.
#[derive(serde::Deserialize, Debug)]
#[allow(dead_code)]
enum Tree {
    Leaf,
    Node(Box<Tree>),
}

const DEEP_CHILD: &str = "LLBUS_DEEP_CHILD";

/// Not a test on its own: the child of `a_deeply_nested_payload_is_an_error_not_a_stack_overflow`.
#[test]
fn deep_child() {
    if std::env::var_os(DEEP_CHILD).is_none() {
        return;
    }
    // One IPC slot's worth (1 MiB, the largest): `Node` 262,143 times, then `Leaf`. Decoded on
    // a thread with the default stack of a bus's threads (2 MiB).
    let mut payload = Vec::with_capacity(1 << 20);
    for _ in 0..(1 << 18) - 1 {
        payload.extend_from_slice(&1u32.to_le_bytes());
    }
    payload.extend_from_slice(&0u32.to_le_bytes());
    let r = std::thread::spawn(move || llbus::decode_bounded::<Tree>(&payload).map(|_| ())).join();
    println!("DEEP-RESULT {:?}", r.map_err(|_| "panicked"));
}

/// docs/IPC.md: "No bytes a peer writes cause undefined behaviour or a panic in this crate";
/// SECURITY.md: the memory's bytes cannot cause "a panic, a hang or an unbounded allocation"
/// and no side ends by a signal. A slot of a recursive type nested as deep as a slot allows
/// recurses once per level in the decoder: the process must see an error, not die of a stack
/// overflow (SIGABRT or SIGSEGV). The same decoder reads network payloads (`llbus-net`).
#[test]
fn a_deeply_nested_payload_is_an_error_not_a_stack_overflow() {
    let mut cmd = reexec("local::deep_child");
    cmd.env(DEEP_CHILD, "1");
    let child = Running::spawn("deep", cmd);
    let (status, out, err) = child.finish(Duration::from_secs(20));
    let status = status.expect("the child did not end in 20 s");
    assert!(
        status.signal().is_none(),
        "decoding a deep payload killed the process by signal {:?}\n{out}\n{}",
        status.signal(),
        err.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(out.contains("DEEP-RESULT Ok(Err("), "{out}");
}

/// A plain-data message exactly as wide as a slot must be for 128 slots and the header to fill
/// one 2 MiB huge page.
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "ipc.wide")]
#[repr(C)]
struct Wide {
    w: [u64; 2047],
}

// SAFETY: `repr(C)` of u64s: no padding, no pointers, any bits are a `Wide`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Wide {}

const HUGE_CHILD: &str = "LLBUS_HUGE_CHILD";
const HUGE_PAGE: usize = 2 << 20;

/// Not a test on its own: the reader of `a_writer_handing_over_huge_pages_cannot_kill_the_reader`.
#[test]
fn huge_child() {
    let Some(dir) = std::env::var_os(HUGE_CHILD) else {
        return;
    };
    let cfg = ChannelConfig {
        stale_after: Duration::from_secs(30),
        ..config_in(Path::new(&dir))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rx = loop {
        match Receiver::<Wide, Pod>::open("huge", &cfg) {
            Ok(rx) => break rx,
            Err(e) if Instant::now() > deadline => {
                println!("OPEN-ERROR {e}");
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    println!("READY");
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let _ = rx.heartbeat(false);
        let _ = rx.recv_batch(8, |_| {});
        let _ = rx.park(Duration::from_millis(1));
    }
    println!("SURVIVED");
}

fn huge_pages_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A huge-page memory file of one page, mapped; `None` without a free huge page.
fn huge_memfd(name: &str) -> Option<(OwnedFd, *mut u8)> {
    let cname = std::ffi::CString::new(name).ok()?;
    // SAFETY: a valid C string; every result is checked; the mapping is of the file's size.
    unsafe {
        let fd = libc::memfd_create(
            cname.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB,
        );
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        if libc::ftruncate(fd.as_raw_fd(), HUGE_PAGE as libc::off_t) != 0 {
            return None;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        Some((fd, p.cast()))
    }
}

/// docs/IPC.md: "no access to the mapping can raise `SIGBUS`"; "anyone who can write the
/// ring cannot cause ... a signal"; the reader checks the memory file is "a regular memory
/// file sealed against shrinking and growing". A writer (this user's, or an admitted one)
/// hands over a sealed *huge-page* memory file of a channel's exact size, punches its page out
/// once the reader has mapped it, and takes the last free huge page itself: the reader's next
/// touch of the header has no page to fault in, and the kernel sends it SIGBUS. Needs one free
/// huge page (`echo 1 > /proc/sys/vm/nr_hugepages`); skipped otherwise.
#[test]
fn a_writer_handing_over_huge_pages_cannot_kill_the_reader() {
    if huge_pages_free() < 1 {
        eprintln!("\n!!!!! SKIPPED: needs a free huge page (vm.nr_hugepages) !!!!!\n");
        return;
    }
    let dir = Dir::new("huge");
    let Some((fd, map)) = huge_memfd("llbus-test-huge") else {
        eprintln!("\n!!!!! SKIPPED: no huge-page memory file could be made !!!!!\n");
        return;
    };
    // A valid header for `Wide` over 128 slots (layout in docs/IPC.md), a live writer.
    let words: [(usize, u64); 8] = [
        (8, 1 | (1 << 32)),        // version 1, kind 1 (plain data)
        (16, 16376 | (128 << 32)), // slot size, capacity
        (24, Wide::FINGERPRINT),
        (32, Wide::TOPIC_ID),
        (128, u64::from(std::process::id())), // writer pid, open
        (136, u64::MAX / 2),                  // stamp: far in the future, never stale
        (0, u64::from_le_bytes(*b"llbusIPC")),
        (144, 0),
    ];
    for (at, v) in words {
        // SAFETY: `map` is a live 2 MiB mapping; every offset is 8-aligned and inside it.
        unsafe { map.add(at).cast::<u64>().write_volatile(v) };
    }
    // SAFETY: `fd` is open; adding seals touches no memory of ours.
    let sealed = unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        )
    };
    assert_eq!(sealed, 0, "sealing a huge-page memory file");
    let listener =
        std::os::unix::net::UnixListener::bind(dir.0.join("llbus-ipc-huge")).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let raw = fd.as_raw_fd();
    let serve_until = Instant::now() + Duration::from_secs(15);
    let server = std::thread::spawn(move || {
        while Instant::now() < serve_until {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nonblocking(false);
                    send_fds(&s, b"llbusFD\x01", &[raw]);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });

    let mut cmd = reexec("local::huge_child");
    cmd.env(HUGE_CHILD, &dir.0);
    let mut child = Running::spawn("huge reader", cmd);
    let ready = child.wait_line(Duration::from_secs(15), |l| {
        l.contains("READY") || l.contains("OPEN-ERROR")
    });
    // Punch the page out (our own mapping of it is never touched again), then take the free
    // huge page with another file.
    // SAFETY: fallocate on an open descriptor; no memory of ours is passed.
    let punched = unsafe {
        libc::fallocate(
            raw,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            HUGE_PAGE as libc::off_t,
        )
    };
    let grabbed = huge_memfd("llbus-test-grab");
    if let Some((_, p)) = &grabbed {
        // SAFETY: a live 2 MiB mapping of our own.
        unsafe { p.write_volatile(1) };
    }
    let (status, out, err) = child.finish(Duration::from_secs(15));
    let _ = server.join();
    let Some(ready) = ready else {
        panic!("the reader never attached:\n{out}\n{err}");
    };
    if ready.contains("OPEN-ERROR") {
        // Refusing huge pages at attach is a fine answer.
        return;
    }
    assert_eq!(punched, 0, "punching the huge page out failed");
    let status = status.expect("the reader did not end");
    assert!(
        status.signal().is_none(),
        "the reader died by signal {:?} (free huge pages now {})\n{out}",
        status.signal(),
        huge_pages_free()
    );
    assert!(out.contains("SURVIVED"), "{out}\n{err}");
}

const WRITER_CHILD: &str = "LLBUS_WRITER_CHILD";

/// Not a test on its own: a writer that makes channel "w" in the directory named by
/// [`WRITER_CHILD`] and keeps it for 20 s.
#[test]
fn writer_child() {
    let Some(dir) = std::env::var_os(WRITER_CHILD) else {
        return;
    };
    match Sender::<Tick, Pod>::create("w", &config_in(Path::new(&dir))) {
        Ok(tx) => {
            println!("READY {}", tx.path().display());
            std::thread::sleep(Duration::from_secs(20));
        }
        Err(e) => println!("CREATE-ERROR {e}"),
    }
}

/// docs/IPC.md: the socket is mode 0600 in a 0700 directory; a writer that "sends nothing
/// within `stale_after`" gets `OpenError::Handover`, and `open` waits at most 250 ms. A
/// stopped writer (SIGSTOP: its listener thread stops too) with a connection queue that is
/// not full: `open` fails promptly with a handover error of its own.
#[test]
fn a_stopped_writer_fails_open_promptly_and_its_socket_is_owner_only() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = Dir::new("stopped");
    let mut cmd = reexec("local::writer_child");
    cmd.env(WRITER_CHILD, &dir.0);
    let mut writer = Running::spawn("writer", cmd);
    let line = writer
        .wait_line(Duration::from_secs(20), |l| l.contains("READY"))
        .expect("the writer's READY");
    let socket = dir.0.join("llbus-ipc-w");
    assert!(line.contains(&socket.display().to_string()), "{line}");
    let m = std::fs::symlink_metadata(&socket).expect("the socket");
    assert!(m.file_type().is_socket());
    assert_eq!(m.mode() & 0o777, 0o600, "socket mode {:o}", m.mode());
    let cfg = config_in(&dir.0);
    Receiver::<Tick, Pod>::open("w", &cfg).expect("a running writer hands over");

    let pid = writer.pid() as libc::pid_t;
    // SAFETY: signals to our own child, which the guard kills at the end.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // `kill` returns before the child stops (it may be running on the other core): wait until
    // the kernel says it is stopped, else its handover thread may still answer.
    let stat = format!("/proc/{pid}/stat");
    let stopped = Instant::now() + Duration::from_secs(5);
    while Instant::now() < stopped {
        let state = std::fs::read_to_string(&stat).unwrap_or_default();
        let after_name = state.rsplit(')').next().unwrap_or_default().trim_start();
        if after_name.starts_with('T') {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let started = Instant::now();
    let got = Receiver::<Tick, Pod>::open("w", &cfg);
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    writer.kill();
    assert!(took < Duration::from_secs(1), "open took {took:?}");
    assert!(
        matches!(got, Err(OpenError::Handover(_))),
        "a stopped writer: {:?}",
        got.map(|_| ())
    );
}
