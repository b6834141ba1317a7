//! The `llbus` command against counters files that other local processes and users plant
//! beside a bus's: files forever "in the middle of a write" (this user's, or another user's
//! under root's `llbus list`) cannot stall it or make it read hundreds of megabytes, and names
//! holding escape sequences are printed escaped, in text and in JSON.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::cli::{llbus_bin, CountersDir};
use tests::local::crafted_counters_file;

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
    let dir = CountersDir::new("ipc-busy");
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
    let dir = CountersDir::new("ipc-json");
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
        .map(|i| theirs.join(format!("llbus-planted{i}-{}-0.cnc", std::process::id())))
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

/// SECURITY.md: "every name, path and error printed has control characters and bidirectional
/// overrides escaped". Planted files whose *file names* hold escape sequences (a FIFO, a
/// directory, a file of garbage): `llbus list` and `stat` warn about each without printing a
/// raw control character, and return promptly.
#[test]
fn planted_file_names_with_escape_sequences_are_printed_escaped() {
    let dir = CountersDir::new("ipc-names");
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
