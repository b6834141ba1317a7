//! A channel's rendezvous (its socket and the descriptor handed over on it) against writers
//! that are not what they claim: a listener that never accepts, a handover of garbage or of
//! nothing, memory sealed against writing, several descriptors at once. Each is a prompt,
//! clear error of `Receiver::open` (or `Sender::create` does not hang), and no descriptor stays
//! open in the reader.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use llbus_ipc::{OpenError, Pod, Receiver, Sender};

use crate::fixtures::{config_in, fake_writer, memfd, send_fds, Dir, Tick};

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

/// The name of the memory files the handover cases send, for [`leaked`] to look for.
const LEAK_NAME: &str = "llbus-it-handover";

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
                let m = memfd(LEAK_NAME, size, grow | libc::F_SEAL_WRITE);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
        ),
        (
            "sealed against future writes",
            Box::new(move |s| {
                let m = memfd(LEAK_NAME, size, grow | libc::F_SEAL_FUTURE_WRITE);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
        ),
        (
            "two sealed memory files",
            Box::new(move |s| {
                let (a, b) = (memfd(LEAK_NAME, size, grow), memfd(LEAK_NAME, size, grow));
                send_fds(s, &greeting, &[a.as_raw_fd(), b.as_raw_fd()]);
            }),
        ),
        (
            "twelve sealed memory files",
            Box::new(move |s| {
                let all: Vec<OwnedFd> = (0..12).map(|_| memfd(LEAK_NAME, size, grow)).collect();
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

/// A writer that hands over garbage, or nothing, gets a clear error from `Receiver::open`,
/// promptly, and the reader maps nothing it should not.
#[test]
fn a_writer_that_hands_over_garbage_gets_a_clear_error() {
    let dir = Dir::new("garbage-handover");
    let cfg = config_in(&dir.0);
    let greeting = *b"llbusFD\x01";
    let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    type Answer = Box<dyn FnOnce(&std::os::unix::net::UnixStream) + Send>;
    type Case = (&'static str, Answer, fn(&OpenError) -> bool);
    let cases: Vec<Case> = vec![
        ("closes at once", Box::new(|_| {}), |e| {
            matches!(e, OpenError::Handover(_))
        }),
        (
            "never answers",
            Box::new(|_| std::thread::sleep(Duration::from_secs(2))),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "another greeting",
            Box::new(move |s| send_fds(s, b"HTTP/1.1", &[])),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "no descriptor",
            Box::new(move |s| send_fds(s, &greeting, &[])),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "an unsealed memory file",
            Box::new(move |s| {
                let m = memfd("llbus-test", 4096, 0);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
            |e| matches!(e, OpenError::Unsealed),
        ),
        (
            "a pipe",
            Box::new(move |s| {
                let mut fds = [0; 2];
                // SAFETY: `fds` has room for the two descriptors.
                unsafe { libc::pipe(fds.as_mut_ptr()) };
                send_fds(s, &greeting, &[fds[0]]);
                // SAFETY: ours, closed once.
                unsafe {
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
            }),
            |e| matches!(e, OpenError::Unsealed),
        ),
        (
            "a sealed file too small for a channel",
            Box::new(move |s| {
                let m = memfd("llbus-test", 16, sealed);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "a sealed file of zeros (no header)",
            Box::new(move |s| {
                let m = memfd("llbus-test", 1024 + 64 * 16, sealed);
                send_fds(s, &greeting, &[m.as_raw_fd()]);
            }),
            |e| matches!(e, OpenError::NotReady),
        ),
    ];
    for (i, (what, answer, expected)) in cases.into_iter().enumerate() {
        let name = format!("garbage{i}");
        let fake = fake_writer(&dir.0, &name, answer);
        let started = Instant::now();
        let got = Receiver::<Tick, Pod>::open(&name, &cfg);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{what}: open took {:?}",
            started.elapsed()
        );
        match got {
            Err(e) => assert!(expected(&e), "{what}: {e:?} ({e})"),
            Ok(_) => panic!("{what}: attached"),
        }
        let _ = fake.join();
    }
}
