//! What other local processes and users can do to the `llbus` command through counters files:
//! nothing that hangs it, fools the terminal, or hides a bus.
//!
//! - A FIFO, a symbolic link, an oversized (sparse, 300 MB) file and (as root) another user's
//!   file named like counters files beside a live bus: `llbus list`, `stat` and `top` return
//!   promptly, skip each with one warning, and still show the live bus with its owner.
//! - A file whose bus, topic and actor names hold terminal escape sequences: printed escaped.
//! - A squatted per-user counters directory: the bus runs without its file (never writing
//!   there) and root's `llbus list` reports the directory instead of reading it.
//! - Counters files are created 0600.
//!
//! The scenarios with a second user need root; they say so and skip that part otherwise.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::cli::{llbus, llbus_bin, CountersDir, Watched};
use tests::example_bins::Fields;
use tests::local::{crafted_counters_file, euid, is_root, nobody};

/// A uid no account uses: the victim of a squatted counters directory.
const VICTIM_UID: u32 = 65532;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const ESC_NAME: &str = "evil\x1b]0;pwned\x07\u{202e}";

/// Plants the hostile files in `dir`; returns what each is called.
fn plant(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut planted = Vec::new();
    let fifo = dir.join("llbus-fifo-1-0.cnc");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid C string; mkfifo reads nothing else of ours.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    planted.push(("a FIFO", fifo));
    let link = dir.join("llbus-link-1-0.cnc");
    std::os::unix::fs::symlink("/etc/passwd", &link).expect("symlink");
    planted.push(("a symbolic link", link));
    let big = dir.join("llbus-big-1-0.cnc");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(300 << 20))
        .expect("sparse file");
    planted.push(("larger than any counters file", big));
    if is_root() {
        let other = dir.join("llbus-other-1-0.cnc");
        std::fs::write(&other, crafted_counters_file("other", "x", "y")).expect("write");
        let (uid, gid) = nobody();
        std::os::unix::fs::chown(&other, Some(uid), Some(gid)).expect("chown");
        planted.push(("belongs to uid", other));
    }
    let evil = dir.join(format!("llbus-evil-{}-0.cnc", std::process::id()));
    std::fs::write(
        &evil,
        crafted_counters_file(ESC_NAME, "t\x1b[2J\x1b[31m", "a\u{9b}1m"),
    )
    .expect("write");
    planted
}

/// Runs `llbus ARGS` with `dir`, asserting it ends (successfully) within 10 s.
fn prompt(dir: &CountersDir, args: &[&str]) -> (String, String) {
    // Built before the clock starts.
    llbus_bin();
    let started = Instant::now();
    let out = llbus(dir, args);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "llbus {args:?} took {took:?} beside the planted files"
    );
    assert!(
        out.status.success(),
        "llbus {args:?} failed: {}",
        text(&out.stderr)
    );
    (text(&out.stdout), text(&out.stderr))
}

fn no_raw_control(what: &str, s: &str) {
    assert!(
        !s.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{what} printed a raw control character: {s:?}"
    );
}

#[test]
fn planted_files_beside_live_ones_are_skipped_promptly_and_names_are_escaped() {
    let dir = CountersDir::new("local-planted");
    let mut w = Watched::spawn(&dir, &["--name", "honest", "--count", "1000"]);
    let ready = w.wait_for("READY", Duration::from_secs(180));
    let file = Fields::find(&ready, "READY ")
        .and_then(|f| f.get("file").map(PathBuf::from))
        .expect("the example's counters file");
    // Created owner-only.
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "counters file mode {mode:o}");
    let planted = plant(dir.path());

    let (out, err) = prompt(&dir, &["list"]);
    assert!(out.contains("honest"), "{out}");
    assert!(out.contains("OWNER"), "{out}");
    let me = if is_root() {
        "root".to_owned()
    } else {
        euid().to_string()
    };
    assert!(
        out.lines().any(|l| l.contains("honest") && l.contains(&me)),
        "no owner {me} on the live bus's line:\n{out}"
    );
    no_raw_control("list", &out);
    no_raw_control("list's warnings", &err);
    assert!(out.contains("evil\\x1b]0;pwned\\x07\\u{202e}"), "{out}");
    for (what, path) in &planted {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let lines = err
            .lines()
            .filter(|l| l.contains(name) && l.contains(what))
            .count();
        assert_eq!(lines, 1, "want one warning about {name} ({what}):\n{err}");
    }
    let (json, _) = prompt(&dir, &["list", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(rows.as_array().is_some_and(|r| r
        .iter()
        .any(|b| b["bus"] == "honest" && b["owner"] == euid())));

    let (stat, _) = prompt(&dir, &["stat", "honest"]);
    assert!(stat.contains("feed -> scale"), "{stat}");
    let (evil, _) = prompt(&dir, &["stat", &std::process::id().to_string()]);
    no_raw_control("stat", &evil);
    assert!(evil.contains("t\\x1b[2J\\x1b[31m"), "{evil}");
    assert!(evil.contains("a\\x9b1m"), "{evil}");
    let (om, _) = prompt(
        &dir,
        &["stat", &std::process::id().to_string(), "--openmetrics"],
    );
    no_raw_control("openmetrics", &om);

    top_draws_promptly(&dir);
    w.stop(Duration::from_secs(60));
}

/// `llbus top` in a terminal (`script` gives it one) draws its first frame beside the planted
/// files within 10 s, without the escape sequences of the crafted names, and quits on `q`.
fn top_draws_promptly(dir: &CountersDir) {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped `llbus top`: no `script` to give it a terminal");
        return;
    }
    let command = format!(
        "env LLBUS_COUNTERS_DIR={} {} top honest --interval-ms 100",
        dir.path().display(),
        llbus_bin().display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("script");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut out = out;
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut screen = Vec::new();
    while !text(&screen).contains("llbus top - bus honest") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(b) => screen.extend(b),
            Err(_) => {
                // SAFETY: kill on our own child's process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                panic!("llbus top drew nothing within 10 s:\n{}", text(&screen));
            }
        }
    }
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"q");
    }
    let quit_by = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break Some(s);
        }
        if Instant::now() > quit_by {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_none() {
        // SAFETY: as above.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        panic!("llbus top did not quit on q");
    }
    assert!(!text(&screen).contains("pwned\x07"), "{:?}", text(&screen));
}

#[test]
fn a_squatted_counters_directory_is_reported_and_the_bus_runs_without_it() {
    if !tests::local::root_or_skip("a squatted counters directory") {
        return;
    }
    let nobody = nobody();
    let squatted = Path::new("/dev/shm").join(format!("llbus-{VICTIM_UID}"));
    let _ = std::fs::remove_dir_all(&squatted);
    std::fs::create_dir(&squatted).expect("mkdir");
    std::os::unix::fs::chown(&squatted, Some(nobody.0), Some(nobody.1)).expect("chown");
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(squatted.clone());

    // The victim's bus starts and runs; its counters file is not made in the squatter's
    // directory (nor anywhere: it runs without one, and says so).
    let exe = tests::example_bins::example("watched");
    let mut victim = Command::new(exe);
    victim
        .args(["--name", "victim", "--count", "100"])
        .env_remove("LLBUS_COUNTERS_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("RUST_LOG", "warn")
        .uid(VICTIM_UID)
        .gid(VICTIM_UID)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = tests::example_bins::Running::spawn("victim", victim);
    let ready = running
        .wait_line(Duration::from_secs(60), |l| l.contains("READY"))
        .expect("the victim's bus runs");
    assert!(ready.contains("file=none"), "{ready}");
    assert_eq!(
        std::fs::read_dir(&squatted).map(|d| d.count()).unwrap_or(0),
        0,
        "the bus wrote into the squatted directory"
    );

    // Root's listing (every user's directories) names the squatted one instead of reading it.
    let llbus = llbus_bin();
    let started = Instant::now();
    let out = Command::new(llbus)
        .arg("list")
        .env_remove("LLBUS_COUNTERS_DIR")
        .output()
        .expect("llbus list");
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains(&squatted.display().to_string())
                && l.contains(&format!("belongs to uid {}", nobody.0))),
        "{err}"
    );
    let meta = std::fs::metadata(&squatted).expect("still there");
    assert_eq!(meta.uid(), nobody.0, "the squatter's directory was changed");
    running.kill();
}

/// A scan of counters files reads a bounded number of bytes whatever is planted: valid files
/// of the largest size (zero records, sparse) are skipped past the scan's budget with one
/// warning, and a bus's own small file is still listed.
#[test]
fn planted_files_of_the_largest_valid_size_cannot_make_one_scan_read_without_bound() {
    let dir = CountersDir::new("local-budget");
    let mut header = crafted_counters_file("x", "x", "x");
    header.truncate(128);
    header[56..60].copy_from_slice(&0u32.to_le_bytes());
    for i in 0..6 {
        let path = dir.path().join(format!("llbus-a{i}-1-0.cnc"));
        std::fs::write(&path, &header).expect("write");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(llbus::MAX_FILE_LEN))
            .expect("sparse file");
    }
    let small = dir
        .path()
        .join(format!("llbus-small-{}-0.cnc", std::process::id()));
    std::fs::write(&small, crafted_counters_file("small", "t", "a")).expect("write");
    let (out, err) = prompt(&dir, &["list"]);
    assert!(out.contains("small"), "{out}\n{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("skipped") && l.contains("MiB"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    // 64 MiB of files of 16 MiB and a header: three are read, three skipped.
    assert!(warnings[0].contains("skipped 3 counters files"), "{err}");
}
