//! An adversarial review of what other local processes can do to llbus-ipc channels, the
//! shared payload decoder and the `llbus` command (docs/IPC.md, SECURITY.md's local sections).
//!
//! - A listener at a channel's name that never accepts (a stopped writer, or this user's
//!   squatter), with its connection queue full: `Receiver::open` must still answer within its
//!   handover timeout, and `Sender::create` must not hang on it.
//! - Handovers the existing suite does not send: memory sealed against writing, two or more
//!   descriptors at once (none may stay open in the reader).
//! - Payloads that claim much: zero-size elements in sets, maps and nested sequences, strings
//!   longer than the payload; and a deeply nested value of a recursive type, which must be an
//!   error of the decoder's, not a stack overflow.
//! - Counters files that always look "in the middle of a write": `llbus list` must stay prompt
//!   and not read hundreds of megabytes.
//!
//! Every wait is bounded; children are killed when their guards drop.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_ipc::{ChannelConfig, OpenError, Pod, Receiver, Sender};
use tests::cli::{llbus_bin, CountersDir};
use tests::local::crafted_counters_file;

#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "review.tick")]
#[repr(C)]
struct Tick {
    seq: u64,
    check: u64,
}

// SAFETY: `repr(C)` of two u64s: no padding, no pointers, any bits are a `Tick`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Tick {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Tick {}

/// A 0700 directory of this user for one test; removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("llbus-review-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).expect("mkdir");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config_in(dir: &Path) -> ChannelConfig {
    ChannelConfig {
        capacity: 64,
        dir: dir.to_path_buf(),
        ..ChannelConfig::default()
    }
}

/// A listening Unix socket at `path` with a connection queue of one, already full: whoever
/// connects next waits until the listener accepts or closes. Returns the listener and the
/// connection that fills its queue.
fn full_listener(path: &Path) -> (OwnedFd, std::os::unix::net::UnixStream) {
    // SAFETY: plain socket calls on a fresh descriptor; the address is built in a zeroed
    // sockaddr_un whose path fits (checked).
    let fd = unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        let fd = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_encoded_bytes();
        assert!(bytes.len() < addr.sun_path.len(), "path too long");
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len
            ),
            0,
            "bind: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::listen(fd.as_raw_fd(), 0), 0, "listen");
        fd
    };
    let filler = std::os::unix::net::UnixStream::connect(path).expect("the first connection");
    (fd, filler)
}

/// Runs `f` on a thread and waits at most `limit` for it; `None` if it did not return.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// docs/IPC.md: "A writer that sends nothing within `stale_after` ...: `OpenError::Handover`";
/// `Receiver::open` "waits at most `config.stale_after`, and at most 250 ms"; a squatted
/// name is "reported, never silently used or fatal to the rightful creator". A writer that is
/// stopped (or a squatter of this user) whose listening socket's queue is full must not hold
/// `open` or `create` in `connect` forever.
#[test]
fn a_listener_that_never_accepts_cannot_hold_open_or_create() {
    let dir = Dir::new("full-queue");
    let cfg = config_in(&dir.0);
    let name = "queue";
    let (listener, _filler) = full_listener(&cfg.path(name));

    let c = cfg.clone();
    let started = Instant::now();
    let open = within(Duration::from_secs(3), move || {
        Receiver::<Tick, Pod>::open(name, &c)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let open_took = started.elapsed();
    let c = cfg.clone();
    let create = within(Duration::from_secs(3), move || {
        Sender::<Tick, Pod>::create(name, &c)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    // Closing the listener wakes any connect still waiting on it (ECONNREFUSED), so no thread
    // outlives the test.
    drop(listener);
    assert!(
        open.is_some(),
        "Receiver::open still blocked after {open_took:?} on a listener that never accepts"
    );
    assert!(
        create.is_some(),
        "Sender::create still blocked after 3 s on a listener that never accepts"
    );
    assert!(open.is_some_and(|r| r.is_err()), "open attached to nothing");
}

/// A fake writer at `name` in `dir` that answers one connection with `answer`.
fn fake_writer(
    dir: &Path,
    name: &str,
    answer: impl FnOnce(&std::os::unix::net::UnixStream) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(dir.join(format!("llbus-ipc-{name}")))
        .expect("bind");
    std::thread::spawn(move || {
        if let Some(Ok(s)) = listener.incoming().next() {
            answer(&s);
        }
    })
}

/// Sends `data` and descriptors `fds` on `s` (`SCM_RIGHTS`, one control message).
fn send_fds(s: &std::os::unix::net::UnixStream, data: &[u8], fds: &[i32]) {
    let mut data = data.to_vec();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; 32];
    let bytes = (fds.len() * 4) as u32;
    // SAFETY: an all-zero msghdr is valid; the fields set point at live buffers; the control
    // buffer (256 bytes) holds one header with up to 16 descriptors (asserted).
    unsafe {
        assert!(libc::CMSG_SPACE(bytes) as usize <= std::mem::size_of_val(&control));
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
        for (i, fd) in fds.iter().enumerate() {
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>().add(i), *fd);
        }
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
    }
}

const LEAK_NAME: &str = "llbus-review-leak";

/// A memory file of `len` bytes named [`LEAK_NAME`], sealed with `seals`.
fn memfd(len: i64, seals: i32) -> OwnedFd {
    let name = std::ffi::CString::new(LEAK_NAME).expect("name");
    // SAFETY: a valid C string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is ours; ftruncate and fcntl touch no memory of ours.
    unsafe {
        assert_eq!(libc::ftruncate(fd, len), 0);
        assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0, "seal");
        OwnedFd::from_raw_fd(fd)
    }
}

/// How many of this process's descriptors are memory files named [`LEAK_NAME`].
fn leaked() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().contains(LEAK_NAME))
                })
                .count()
        })
        .unwrap_or(0)
}

/// docs/IPC.md: "The reader accepts exactly one descriptor, checks that it is a regular memory
/// file sealed against shrinking and growing"; a writer that "sends anything else:
/// `OpenError::Handover`"; SECURITY.md: a peer handing over garbage gets a clear error, never
/// a signal. Memory sealed against writing (which cannot be mapped for writing), two
/// descriptors, and more than the reader has room for: each a prompt error, and none of the
/// descriptors stays open in the reader.
#[test]
fn handovers_of_write_sealed_memory_or_several_descriptors_are_errors_and_leak_nothing() {
    let dir = Dir::new("handover");
    let cfg = config_in(&dir.0);
    let greeting = *b"llbusFD\x01";
    let size = 1024 + 64 * 16;
    let grow = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    type Answer = Box<dyn FnOnce(&std::os::unix::net::UnixStream) + Send>;
    let cases: Vec<(&str, Answer)> = vec![
        (
            "sealed against writing",
            Box::new(move |s| {
                let m = memfd(size, grow | libc::F_SEAL_WRITE);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
        ),
        (
            "sealed against future writes",
            Box::new(move |s| {
                let m = memfd(size, grow | libc::F_SEAL_FUTURE_WRITE);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
        ),
        (
            "two sealed memory files",
            Box::new(move |s| {
                let (a, b) = (memfd(size, grow), memfd(size, grow));
                send_fds(s, &greeting, &[a.as_raw_fd(), b.as_raw_fd()]);
            }),
        ),
        (
            "twelve sealed memory files",
            Box::new(move |s| {
                let all: Vec<OwnedFd> = (0..12).map(|_| memfd(size, grow)).collect();
                let raw: Vec<i32> = all.iter().map(AsRawFd::as_raw_fd).collect();
                send_fds(s, &greeting, &raw);
            }),
        ),
    ];
    for (i, (what, answer)) in cases.into_iter().enumerate() {
        let name = format!("h{i}");
        let fake = fake_writer(&dir.0, &name, answer);
        let started = Instant::now();
        let got = Receiver::<Tick, Pod>::open(&name, &cfg);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{what}: open took {:?}",
            started.elapsed()
        );
        let _ = fake.join();
        match got {
            Ok(_) => panic!("{what}: attached"),
            Err(e) => {
                assert!(!e.to_string().is_empty(), "{what}: an error without a text");
                if i >= 2 {
                    assert!(matches!(e, OpenError::Handover(_)), "{what}: {e:?}");
                }
            }
        }
        // The fake writer's copies are closed once it returns: any left are the reader's.
        assert_eq!(leaked(), 0, "{what}: the reader kept descriptors open");
    }
}

/// docs/IPC.md "Bounded decoding": every element of every sequence or map, at any depth, is
/// charged against a budget of the payload's bytes, so zero-size elements cannot claim more
/// than the slot holds; strings may not claim more than the bytes left. Sets and maps of unit
/// values, nested and optional sequences, and a 2^40-byte string are refused at once.
#[test]
fn claims_of_zero_size_elements_in_any_container_are_refused_at_once() {
    use llbus::decode_bounded;
    use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
    let huge = (1u64 << 40).to_le_bytes();
    let mut nested = huge.to_vec();
    nested.extend_from_slice(&huge);
    let mut optional = vec![1u8];
    optional.extend_from_slice(&huge);
    let mut padded = huge.to_vec();
    padded.extend_from_slice(&[0u8; 8]);
    let started = Instant::now();
    assert!(decode_bounded::<Vec<()>>(&padded).is_err(), "Vec<()>");
    assert!(
        decode_bounded::<VecDeque<()>>(&padded).is_err(),
        "VecDeque<()>"
    );
    assert!(
        decode_bounded::<BTreeSet<()>>(&padded).is_err(),
        "BTreeSet<()>"
    );
    assert!(
        decode_bounded::<HashSet<()>>(&padded).is_err(),
        "HashSet<()>"
    );
    assert!(
        decode_bounded::<BTreeMap<(), ()>>(&padded).is_err(),
        "BTreeMap<(), ()>"
    );
    assert!(
        decode_bounded::<HashMap<(), ()>>(&padded).is_err(),
        "HashMap<(), ()>"
    );
    assert!(
        decode_bounded::<Vec<Vec<()>>>(&nested).is_err(),
        "Vec<Vec<()>>"
    );
    assert!(
        decode_bounded::<Option<Vec<()>>>(&optional).is_err(),
        "Option<Vec<()>>"
    );
    assert!(
        decode_bounded::<(u8, Vec<()>)>(&optional).is_err(),
        "(u8, Vec<()>)"
    );
    assert!(decode_bounded::<String>(&padded).is_err(), "String");
    assert!(decode_bounded::<Vec<u8>>(&padded).is_err(), "Vec<u8>");
    // Within the budget, one element per byte of payload: 16 bytes hold a Vec<()> of 8.
    let mut fits = 8u64.to_le_bytes().to_vec();
    fits.extend_from_slice(&[0u8; 8]);
    let (v, left) = decode_bounded::<Vec<()>>(&fits).expect("8 units in 16 bytes");
    assert_eq!((v.len(), left), (8, 8));
    // A million-byte payload of nested unit vectors: bounded work, far under a second.
    let mut wide = vec![0u8; 1 << 20];
    wide[..8].copy_from_slice(&((1u64 << 20) / 8 - 1).to_le_bytes());
    let _ = decode_bounded::<Vec<Vec<()>>>(&wide);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "decoding took {:?}",
        started.elapsed()
    );
}

/// A recursive type (a user's, with a hand-written `Schema`, which llbus documents): a chain of
/// `Node(Box<Tree>)` as deep as the payload allows.
#[derive(serde::Deserialize, Debug)]
#[allow(dead_code)]
enum Tree {
    Leaf,
    Node(Box<Tree>),
}

const DEEP_CHILD: &str = "LLBUS_REVIEW_DEEP_CHILD";

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
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["deep_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(DEEP_CHILD, "1");
    let child = tests::example_bins::Running::spawn("deep", cmd);
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

/// A counters file header (layout of `llbus::COUNTERS_VERSION` 1) that is forever "in the
/// middle of a write" (an odd generation), padded with zeros to `len` bytes (sparse).
fn always_busy(path: &Path, len: u64) {
    let mut b = vec![0u8; 128];
    b[..8].copy_from_slice(&llbus::COUNTERS_MAGIC);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&128u32.to_le_bytes());
    b[16..24].copy_from_slice(&3u64.to_le_bytes());
    b[24..32].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    std::fs::write(path, &b).expect("write");
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .expect("extend");
}

/// The bytes a running process has read so far (`rchar` in `/proc/PID/io`).
fn bytes_read(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// SECURITY.md: whoever can plant a file among counters files (this user, or any user for
/// root's `llbus list` of every user's directory) cannot "hang it" nor "make it read hundreds
/// of megabytes": a planted file is read only if it is regular, the owner's and at most 16 MiB.
/// Files that always look in the middle of a write are each retried 100 times, 1 ms apart,
/// reading the whole file each time: a few dozen stall `llbus list` for seconds, and eight of
/// 16 MiB make it read gigabytes.
#[test]
fn counters_files_forever_mid_write_cannot_stall_or_flood_llbus_list() {
    let dir = CountersDir::new("review-busy");
    for i in 0..60 {
        always_busy(&dir.path().join(format!("llbus-busy{i}-1-0.cnc")), 128);
    }
    for i in 0..8 {
        always_busy(
            &dir.path().join(format!("llbus-big{i}-1-0.cnc")),
            llbus::MAX_FILE_LEN,
        );
    }
    let bin = llbus_bin();
    let started = Instant::now();
    let mut child = Command::new(bin)
        .arg("list")
        .env("LLBUS_COUNTERS_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llbus list");
    let pid = child.id();
    let mut most = 0u64;
    let status = loop {
        if let Some(n) = bytes_read(pid) {
            most = most.max(n);
        }
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < Duration::from_secs(25) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let took = started.elapsed();
    assert!(
        status.is_some(),
        "llbus list did not end in 25 s (read {most} bytes)"
    );
    assert!(
        took < Duration::from_secs(3),
        "llbus list took {took:?} beside 68 planted files (read at least {most} bytes)"
    );
    assert!(
        most < 256 << 20,
        "llbus list read at least {most} bytes beside 68 planted files"
    );
}

/// A plain-data message exactly as wide as a slot must be for 128 slots and the header to fill
/// one 2 MiB huge page.
#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "review.wide")]
#[repr(C)]
struct Wide {
    w: [u64; 2047],
}

// SAFETY: `repr(C)` of u64s: no padding, no pointers, any bits are a `Wide`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Wide {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Wide {}

const HUGE_CHILD: &str = "LLBUS_REVIEW_HUGE_CHILD";
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
    let Some((fd, map)) = huge_memfd("llbus-review-huge") else {
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

    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["huge_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(HUGE_CHILD, &dir.0);
    let mut child = tests::example_bins::Running::spawn("huge reader", cmd);
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
    let grabbed = huge_memfd("llbus-review-grab");
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

/// Any character that acts on a terminal: C0 but newline, DEL, C1 (U+009B is an 8-bit CSI),
/// bidirectional overrides and isolates.
fn raw_terminal_controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

/// SECURITY.md: the `llbus` command cannot be made to "send escape sequences to the terminal
/// (every name, path and error printed has control characters and bidirectional overrides
/// escaped)". JSON output goes to the same terminal: JSON may carry any character escaped
/// (`\u009b`), but a raw 8-bit CSI, DEL or bidi override in a planted name must not be printed.
#[test]
fn json_output_carries_no_raw_terminal_controls_from_planted_names() {
    let dir = CountersDir::new("review-json");
    let hostile = "b\u{9b}2J\u{202e}\x7f";
    let file = dir
        .path()
        .join(format!("llbus-evil-{}-0.cnc", std::process::id()));
    std::fs::write(
        &file,
        crafted_counters_file(hostile, "t\u{9b}31m\u{2066}", "a\x7f\u{202d}"),
    )
    .expect("write");
    let pid = std::process::id().to_string();
    for args in [
        vec!["list"],
        vec!["list", "--json"],
        vec!["stat", &pid],
        vec!["stat", &pid, "--json"],
        vec!["stat", &pid, "--openmetrics"],
    ] {
        let out = tests::cli::llbus(&dir, &args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "llbus {args:?}: {stderr}");
        assert!(
            stdout.contains('b') && stdout.contains("2J"),
            "llbus {args:?} did not show the planted bus:\n{stdout}"
        );
        let raw = raw_terminal_controls(&stdout);
        assert!(
            raw.is_empty(),
            "llbus {args:?} printed raw {raw:?}:\n{stdout:?}"
        );
        assert!(raw_terminal_controls(&stderr).is_empty(), "{stderr:?}");
    }
}

/// The cross-user form of the stalled `llbus list`: SECURITY.md lets "any user for root's
/// `llbus list` of every user's directory" plant files, and promises they cannot hang it. As
/// root, `nobody`'s own per-user counters directory (`/dev/shm/llbus-UID`, 0700, its files)
/// holds files forever in the middle of a write; root's `llbus list` must stay prompt.
#[test]
fn another_users_busy_counters_files_cannot_stall_roots_llbus_list() {
    if !tests::local::root_or_skip("another user's counters directory") {
        return;
    }
    let (uid, gid) = tests::local::nobody();
    let theirs = Path::new("/dev/shm").join(format!("llbus-{uid}"));
    let made = !theirs.exists();
    if made {
        std::fs::create_dir(&theirs).expect("mkdir");
        std::os::unix::fs::chown(&theirs, Some(uid), Some(gid)).expect("chown");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let planted: Vec<PathBuf> = (0..40)
        .map(|i| theirs.join(format!("llbus-review{i}-{}-0.cnc", std::process::id())))
        .collect();
    for p in &planted {
        always_busy(p, 128);
        std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown");
    }
    struct Cleanup(Vec<PathBuf>, Option<PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = std::fs::remove_file(p);
            }
            if let Some(d) = &self.1 {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
    let _cleanup = Cleanup(planted, made.then(|| theirs.clone()));
    let bin = llbus_bin();
    let started = Instant::now();
    let mut child = Command::new(bin)
        .arg("list")
        .env_remove("LLBUS_COUNTERS_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llbus list");
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let took = started.elapsed();
    assert!(status.is_some(), "root's llbus list did not end in 20 s");
    assert!(
        took < Duration::from_secs(2),
        "root's llbus list took {took:?} beside 40 files of uid {uid}"
    );
}

const VICTIM_CHILD: &str = "LLBUS_REVIEW_VICTIM_CHILD";
/// A uid no account uses: the victim of squatted default channel directories.
const VICTIM_UID: u32 = 65531;

/// Not a test on its own: the child of `another_user_cannot_keep_a_user_from_making_channels`,
/// run as the victim with the default channel directory.
#[test]
fn victim_child() {
    if std::env::var_os(VICTIM_CHILD).is_none() {
        return;
    }
    let cfg = ChannelConfig::default();
    match Sender::<Tick, Pod>::create("victim", &cfg) {
        Ok(tx) => println!("CREATED {}", tx.path().display()),
        Err(e) => println!("CREATE-ERROR {e}"),
    }
}

/// docs/IPC.md: another user (not root) can "make a default `/dev/shm/llbus-UID` of its own
/// first" and that "only makes the channel move to `llbus-UID-1` (reported)"; SECURITY.md: a
/// squatted default directory is "reported, never used, the channel moves to the next
/// `llbus-UID-N`". `nobody` makes all of them first (eight directories, 0777): the victim's
/// `Sender::create` with the default configuration must still make its channel.
#[test]
fn another_user_cannot_keep_a_user_from_making_channels() {
    if !tests::local::root_or_skip("squatted default channel directories") {
        return;
    }
    let (uid, gid) = tests::local::nobody();
    let squats: Vec<PathBuf> = std::iter::once(format!("llbus-{VICTIM_UID}"))
        .chain((1..8).map(|n| format!("llbus-{VICTIM_UID}-{n}")))
        .map(|n| Path::new("/dev/shm").join(n))
        .collect();
    struct Cleanup(Vec<PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    // The victim's home: its own, as a login gives it (the fallback once every name is taken).
    let home = std::env::temp_dir().join(format!("llbus-review-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir(&home).expect("mkdir home");
    std::os::unix::fs::chown(&home, Some(VICTIM_UID), Some(VICTIM_UID)).expect("chown home");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod home");
    let _cleanup = Cleanup(
        squats
            .iter()
            .cloned()
            .chain(std::iter::once(home.clone()))
            .collect(),
    );
    for d in &squats {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir(d).expect("mkdir");
        std::os::unix::fs::chown(d, Some(uid), Some(gid)).expect("chown");
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["victim_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(VICTIM_CHILD, "1")
        .env("HOME", &home)
        .env_remove("XDG_RUNTIME_DIR");
    std::os::unix::process::CommandExt::uid(&mut cmd, VICTIM_UID);
    std::os::unix::process::CommandExt::gid(&mut cmd, VICTIM_UID);
    let mut child = tests::example_bins::Running::spawn("victim", cmd);
    let line = child
        .wait_line(Duration::from_secs(20), |l| l.contains("CREATE"))
        .unwrap_or_default();
    let (_, out, err) = child.finish(Duration::from_secs(5));
    assert!(
        line.contains("CREATED"),
        "the victim could not make a channel: {line}\n{out}\n{err}"
    );
    assert!(
        line.contains(&*home.join(".llbus").to_string_lossy()),
        "the channel is not in the victim's home: {line}"
    );
    for d in &squats {
        assert!(
            std::fs::read_dir(d).map_or(true, |mut r| r.next().is_none()),
            "a squatted directory {} was used",
            d.display()
        );
    }
}

/// A zero-size element type with a hand-written schema.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Unit;

impl llbus::Schema for Unit {
    const SHAPE: u64 = llbus::ShapeHasher::new().name("Unit").finish();
}

#[derive(Message, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
#[message(topic = "review.units")]
struct Units {
    items: Vec<Unit>,
}

/// docs/IPC.md: "a 16-byte slot claiming a `Vec<()>` of 2^40 elements is refused at once"; "a
/// bincode length prefix is checked against the slot"; "a slot that does not decode is counted
/// (`malformed`) and skipped". Through a live bincode channel: slots rewritten (through
/// `/proc`, as a peer would) to claim 2^40 zero-size elements, and to a length prefix far
/// beyond the slot, are each counted malformed, promptly; the next genuine message arrives.
#[test]
fn scribbled_bincode_slots_are_counted_malformed_at_once() {
    use std::os::unix::fs::FileExt;
    let dir = Dir::new("bincode");
    let cfg = ChannelConfig {
        max_message: 64,
        ..config_in(&dir.0)
    };
    let mut tx = Sender::<Units, llbus_ipc::Bincode>::create("bz", &cfg).expect("create");
    let mut rx = Receiver::<Units, llbus_ipc::Bincode>::open("bz", &cfg).expect("open");
    let memory = tests::local::memfds_of(std::process::id())
        .into_iter()
        .find(|p| std::fs::read_link(p).is_ok_and(|t| t.to_string_lossy().contains("llbus-ipc-bz")))
        .expect("the channel's memory in /proc/self/fd");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&memory)
        .expect("open the memory");
    let slot = 64 + 8;
    for _ in 0..3 {
        assert!(tx.try_send(&Units { items: vec![] }).expect("send"));
    }
    // Slot 0: 8 bytes claiming 2^40 units. Slot 1: a length prefix of 4 GiB.
    let mut claim = 8u32.to_le_bytes().to_vec();
    claim.extend_from_slice(&[0; 4]);
    claim.extend_from_slice(&(1u64 << 40).to_le_bytes());
    file.write_at(&claim, 1024).expect("scribble");
    file.write_at(&u32::MAX.to_le_bytes(), 1024 + slot)
        .expect("scribble");
    let started = Instant::now();
    let mut got = Vec::new();
    let (n, malformed) = rx.recv_batch(8, |m| got.push(m)).expect("recv");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "decoding took {:?}",
        started.elapsed()
    );
    assert_eq!((n, malformed), (3, 2), "read and malformed");
    assert_eq!(got, vec![Units { items: vec![] }]);
}

/// docs/IPC.md and bus/src/payload.rs: the element budget refuses only claims "the payload
/// could [not] hold"; "no valid value is refused". A genuine message whose last field is a
/// non-empty vector of zero-size elements (here one `Unit`: 8 bytes, the length prefix, and
/// nothing after it) must arrive, not be counted malformed; the bounded decoder must accept
/// what bincode wrote.
#[test]
fn a_genuine_vector_of_zero_size_elements_arrives() {
    let dir = Dir::new("zst");
    let cfg = ChannelConfig {
        max_message: 64,
        ..config_in(&dir.0)
    };
    let mut tx = Sender::<Units, llbus_ipc::Bincode>::create("zst", &cfg).expect("create");
    let mut rx = Receiver::<Units, llbus_ipc::Bincode>::open("zst", &cfg).expect("open");
    let sent = Units {
        items: vec![Unit, Unit, Unit],
    };
    assert!(tx.try_send(&sent).expect("send"));
    let mut got = Vec::new();
    let (n, malformed) = rx.recv_batch(8, |m| got.push(m)).expect("recv");
    assert_eq!((n, malformed), (1, 0), "read and malformed");
    assert_eq!(got, vec![sent]);
    // The decoder alone: a `Vec<()>` of one, as bincode writes it.
    assert!(
        llbus::decode_bounded::<Vec<()>>(&1u64.to_le_bytes()).is_ok(),
        "decode_bounded refuses vec![()]"
    );
}

const WRITER_CHILD: &str = "LLBUS_REVIEW_WRITER_CHILD";

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
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(WRITER_CHILD, &dir.0);
    let mut writer = tests::example_bins::Running::spawn("writer", cmd);
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

/// SECURITY.md: "every name, path and error printed has control characters and bidirectional
/// overrides escaped". Planted files whose *file names* hold escape sequences (a FIFO, a
/// directory, a file of garbage): `llbus list` and `stat` warn about each without printing a
/// raw control character, and return promptly.
#[test]
fn planted_file_names_with_escape_sequences_are_printed_escaped() {
    let dir = CountersDir::new("review-names");
    let fifo = dir.path().join("llbus-\x1b]0;pwned\x07-1-0.cnc");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid C string; mkfifo reads nothing else of ours.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    std::fs::create_dir(dir.path().join("llbus-\u{9b}2J\u{202e}-2-0.cnc")).expect("mkdir");
    std::fs::write(dir.path().join("llbus-\x1b[31mred-3-0.cnc"), b"garbage").expect("write");
    llbus_bin();
    for args in [vec!["list"], vec!["stat"]] {
        let started = Instant::now();
        let out = tests::cli::llbus(&dir, &args);
        let took = started.elapsed();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            took < Duration::from_secs(5),
            "llbus {args:?} took {took:?}"
        );
        assert!(
            raw_terminal_controls(&stdout).is_empty() && raw_terminal_controls(&stderr).is_empty(),
            "llbus {args:?} printed a raw control character:\n{stdout:?}\n{stderr:?}"
        );
        assert!(
            stderr.contains("\\x1b]0;pwned\\x07") || stdout.contains("\\x1b]0;pwned\\x07"),
            "llbus {args:?} did not mention the FIFO:\n{stdout}\n{stderr}"
        );
    }
}
