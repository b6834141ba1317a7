//! What other local processes and users can do to llbus-ipc channels: nothing that crashes,
//! spoofs or hangs either side.
//!
//! - Every shared region of a running pair is truncated, grown and hole-punched through
//!   `/proc` (as root, the strongest local attacker): the seals refuse the resizes, and both
//!   processes survive (or end with an error of their own), never by a signal.
//! - A channel socket made by another user is refused by a root reader and a root writer
//!   (reported, never used, never removed) unless that user is admitted by opt-in.
//! - A per-user directory squatted by another user is reported and never used: the rightful
//!   user's channel is made beside it and works.
//!
//! The scenarios with a second user need root (they run the other side as `nobody` or as an
//! unused uid with `setuid` in the child); they say so and pass without checking anything
//! when not root, so that a developer's unprivileged run stays green (CI runs as root).
//! Every child is killed when its guard drops; every wait is bounded.

use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use llbus::Message;
use llbus_ipc::{ChannelConfig, OpenError, PeerState, Pod, Receiver, Sender};
use tests::example_bins::Running;
use tests::local::{is_root, mapped_memfds_of, memfds_of, nobody};

#[derive(Message, Clone, Copy, Debug, PartialEq)]
#[message(topic = "local.tick")]
#[repr(C)]
struct Tick {
    seq: u64,
    check: u64,
}

// SAFETY: `repr(C)` of two u64s: no padding, no pointers, any bits are a `Tick`.
unsafe impl llbus_ipc::bytemuck::Zeroable for Tick {}
// SAFETY: as above.
unsafe impl llbus_ipc::bytemuck::Pod for Tick {}

const CHILD_VAR: &str = "LLBUS_LOCAL_CHILD";
const CHILD_LIFETIME: Duration = Duration::from_secs(30);
/// A uid no account uses: the victim of a squatted per-user directory.
const VICTIM_UID: u32 = 65533;

fn config_in(dir: Option<PathBuf>) -> ChannelConfig {
    let mut c = ChannelConfig {
        capacity: 64,
        ..ChannelConfig::default()
    };
    if let Some(d) = dir {
        c.dir = d;
    }
    c
}

/// The configuration a child uses: `LLBUS_LOCAL_DIR` if set, else the default; users named
/// in `LLBUS_LOCAL_ALLOW` admitted.
fn child_config() -> ChannelConfig {
    let mut c = config_in(std::env::var_os("LLBUS_LOCAL_DIR").map(PathBuf::from));
    if let Ok(allow) = std::env::var("LLBUS_LOCAL_ALLOW") {
        c.allow_uids = allow.split(',').filter_map(|u| u.parse().ok()).collect();
    }
    c
}

fn channel(test: &str) -> String {
    format!("l{}-{test}", std::process::id())
}

/// Starts this binary as the other side: `mode` on channel `name`, as user `as_user` if given.
fn spawn(mode: &str, name: &str, as_user: Option<(u32, u32)>, env: &[(&str, String)]) -> Running {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, mode)
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

fn ready(child: &mut Running) -> String {
    child
        .wait_line(Duration::from_secs(20), |l| l.contains("READY"))
        .and_then(|l| {
            l.split_once("READY")
                .map(|(_, rest)| rest.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("{} never said READY", child.name()))
}

/// The number after `GOT ` on the child's next such line.
fn got(child: &mut Running) -> Option<u64> {
    child
        .wait_line(Duration::from_secs(10), |l| l.contains("GOT "))
        .and_then(|l| {
            l.split_once("GOT ")
                .and_then(|(_, n)| n.split_whitespace().next()?.parse().ok())
        })
}

fn retry<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
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
                match tx.try_send(&Tick { seq, check: !seq }) {
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
            let mut rx = match retry(Duration::from_secs(10), || {
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
                    if let Some(again) = retry(Duration::from_secs(5), || {
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
                    match retry(Duration::from_secs(5), || {
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
    let after = retry(Duration::from_secs(10), || {
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

/// A directory made for the test, owned by `uid`/`gid`, mode 0700; removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str, owner: (u32, u32)) -> Dir {
        let p = std::env::temp_dir().join(format!("llbus-local-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).expect("mkdir");
        std::os::unix::fs::chown(&p, Some(owner.0), Some(owner.1)).expect("chown");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn another_users_channel_is_refused_unless_admitted() {
    if !tests::local::root_or_skip("another users channel") {
        return;
    }
    let nobody = nobody();
    let name = channel("foreign");
    let theirs = Dir::new("theirs", nobody);
    let ours = Dir::new("ours", (0, 0));
    // It admits root by opt-in (both ends must: this is the other end's).
    let mut writer = spawn(
        "writer",
        &name,
        Some(nobody),
        &[
            ("LLBUS_LOCAL_DIR", theirs.0.display().to_string()),
            ("LLBUS_LOCAL_ALLOW", "0".to_owned()),
        ],
    );
    let socket = PathBuf::from(ready(&mut writer));
    // The other user's socket appears at our channel's name (as it would in a directory it
    // could write): a root reader refuses it, naming the user, and so does a root writer,
    // which leaves it where it is.
    let planted = ours.0.join(socket.file_name().expect("name"));
    std::fs::rename(&socket, &planted).expect("move the socket");
    let cfg = config_in(Some(ours.0.clone()));
    match Receiver::<Tick, Pod>::open(&name, &cfg) {
        Err(OpenError::Foreign { uid, pid, .. }) => {
            assert_eq!(uid, nobody.0);
            assert!(pid.is_some());
        }
        other => panic!("a root reader attached to another user's channel: {other:?}"),
    }
    let err = Sender::<Tick, Pod>::create(&name, &cfg).expect_err("squatted name");
    assert!(matches!(err, OpenError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains("belongs to uid"), "{err}");
    assert!(
        planted.exists(),
        "a root writer removed another user's socket"
    );

    // Admitted by explicit opt-in, the same channel works.
    let admitted = ChannelConfig {
        allow_uids: vec![nobody.0],
        ..cfg.clone()
    };
    let mut rx = Receiver::<Tick, Pod>::open(&name, &admitted).expect("admitted by opt-in");
    let mut n = 0;
    retry(Duration::from_secs(10), || {
        rx.recv_batch(64, |_| n += 1).expect("recv");
        (n > 10).then_some(())
    })
    .expect("messages from the admitted user");
    drop(rx);

    // The other way round: even when it can reach the socket (its directory and the socket
    // opened up here by hand), another user's process gets nothing from a writer: the
    // connection is closed unanswered, and counted.
    let root_name = channel("rootchan");
    std::fs::set_permissions(&ours.0, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let tx = Sender::<Tick, Pod>::create(&root_name, &cfg).expect("root channel");
    std::fs::set_permissions(tx.path(), std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let mut intruder = spawn(
        "connect",
        &root_name,
        Some(nobody),
        &[("LLBUS_LOCAL_DIR", ours.0.display().to_string())],
    );
    let line = intruder
        .wait_line(Duration::from_secs(20), |l| l.contains("CONNECTED"))
        .expect("the intruder's report");
    assert!(line.contains("CONNECTED GOT 0"), "{line}");
    assert!(tx.refused() > 0, "the refused connection was not counted");
    writer.kill();
}

#[test]
fn a_squatted_per_user_directory_is_reported_never_used_and_not_fatal() {
    if !tests::local::root_or_skip("a squatted per-user directory") {
        return;
    }
    let nobody = nobody();
    let victim = (VICTIM_UID, VICTIM_UID);
    let squatted = Path::new("/dev/shm").join(format!("llbus-{VICTIM_UID}"));
    let _ = std::fs::remove_dir_all(&squatted);
    let _ = std::fs::remove_dir_all(squatted.with_file_name(format!("llbus-{VICTIM_UID}-1")));
    // `nobody` made the victim's directory first, open to all.
    std::fs::create_dir(&squatted).expect("mkdir");
    std::os::unix::fs::chown(&squatted, Some(nobody.0), Some(nobody.1)).expect("chown");
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    struct Cleanup(Vec<PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    let _cleanup = Cleanup(vec![
        squatted.clone(),
        squatted.with_file_name(format!("llbus-{VICTIM_UID}-1")),
    ]);

    let name = channel("squat");
    let mut writer = spawn("writer", &name, Some(victim), &[]);
    let socket = PathBuf::from(ready(&mut writer));
    assert_ne!(
        socket.parent(),
        Some(squatted.as_path()),
        "the squatted directory was used"
    );
    assert!(
        std::fs::read_dir(&squatted).expect("ls").next().is_none(),
        "something was written into the squatted directory"
    );
    let mut reader = spawn("reader", &name, Some(victim), &[]);
    ready(&mut reader);
    assert!(
        got(&mut reader).is_some(),
        "the victim's channel does not work"
    );
}

/// A fake writer of this user, listening at a channel's name in a directory of the test's,
/// that answers every connection with `answer`.
fn fake_writer(
    dir: &Path,
    name: &str,
    answer: impl Fn(&std::os::unix::net::UnixStream) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(dir.join(format!("llbus-ipc-{name}")))
        .expect("bind");
    std::thread::spawn(move || {
        // One connection: each case below opens once.
        if let Some(Ok(s)) = listener.incoming().next() {
            answer(&s);
        }
    })
}

/// Sends `data` and, if given, descriptor `fd` on `s` (`SCM_RIGHTS`).
fn send_with_fd(s: &std::os::unix::net::UnixStream, data: &[u8], fd: Option<i32>) {
    use std::os::fd::AsRawFd;
    let mut data = data.to_vec();
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers, and
    // the control buffer (64 bytes) holds one header with one descriptor.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
        }
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
    }
}

/// A memory file of `len` bytes, sealed with `seals` (0: none).
fn memfd(len: i64, seals: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: a valid C string; the result is checked.
    let fd = unsafe {
        libc::memfd_create(
            c"llbus-test".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is ours; ftruncate and fcntl touch no memory of ours.
    unsafe {
        assert_eq!(libc::ftruncate(fd, len), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0);
        }
        std::os::fd::OwnedFd::from_raw_fd(fd)
    }
}

/// A writer that hands over garbage, or nothing, gets a clear error from `Receiver::open`,
/// promptly, and the reader maps nothing it should not.
#[test]
fn a_writer_that_hands_over_garbage_gets_a_clear_error() {
    use std::os::fd::AsRawFd;
    let me = (tests::local::euid(), tests::local::euid());
    let dir = Dir::new("garbage-handover", me);
    let cfg = config_in(Some(dir.0.clone()));
    let greeting = *b"llbusFD\x01";
    let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    type Answer = Box<dyn Fn(&std::os::unix::net::UnixStream) + Send>;
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
            Box::new(move |s| send_with_fd(s, b"HTTP/1.1", None)),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "no descriptor",
            Box::new(move |s| send_with_fd(s, &greeting, None)),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "an unsealed memory file",
            Box::new(move |s| {
                let m = memfd(4096, 0);
                send_with_fd(s, &greeting, Some(m.as_raw_fd()));
            }),
            |e| matches!(e, OpenError::Unsealed),
        ),
        (
            "a pipe",
            Box::new(move |s| {
                let mut fds = [0; 2];
                // SAFETY: `fds` has room for the two descriptors.
                unsafe { libc::pipe(fds.as_mut_ptr()) };
                send_with_fd(s, &greeting, Some(fds[0]));
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
                let m = memfd(16, sealed);
                send_with_fd(s, &greeting, Some(m.as_raw_fd()));
            }),
            |e| matches!(e, OpenError::Handover(_)),
        ),
        (
            "a sealed file of zeros (no header)",
            Box::new(move |s| {
                let m = memfd(1024 + 64 * 16, sealed);
                send_with_fd(s, &greeting, Some(m.as_raw_fd()));
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
