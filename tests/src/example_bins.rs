//! The example programs of `examples/` and the `llbus` command, as child processes, for the
//! tests that run them as a user does.
//!
//! `cargo test` builds them beside the test binaries, in the same profile and with the same
//! features: every example of the selected packages into `<target>/<profile>/examples/`, and
//! the `llbus` command into `<target>/<profile>/` (its package, `cli`, has integration
//! tests). [`example`] and [`crate::cli::llbus_bin`] take them from there: `<target>/<profile>`
//! is the parent of the `deps/` directory that holds the running test binary.
//!
//! A binary is built only where it is missing or older than its sources (`cargo test -p tests`
//! builds neither, and leaves an earlier build's in place): once per test process, by
//! `cargo build --workspace --example NAME` (or `--bin NAME`) in that target directory and
//! profile, bounded in time. `--workspace` gives it the workspace's feature
//! resolution, so that it reuses the crates `cargo test` has built.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::netns::{output_with_timeout, KillOnDrop};

/// How long building the binaries may take (a cold debug build on two busy cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1200);

/// Where the running test binary's cargo puts binaries, and how to ask it for more.
#[derive(Debug)]
struct Profile {
    /// `<target>/<profile>` (or `<target>/<triple>/<profile>` when built for `--target`).
    dir: PathBuf,
    /// The arguments that make `cargo build` write into `dir`.
    cargo_args: Vec<String>,
}

/// The profile of the running test binary, `<target>[/<triple>]/<profile>/deps/<test>-<hash>`.
fn profile() -> Result<&'static Profile, String> {
    static PROFILE: OnceLock<Result<Profile, String>> = OnceLock::new();
    PROFILE
        .get_or_init(|| {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find the running test binary: {e}"))?;
            let dir = exe
                .parent()
                .filter(|deps| deps.file_name().is_some_and(|n| n == "deps"))
                .and_then(Path::parent)
                .ok_or_else(|| {
                    format!(
                        "{} is not in a cargo target's deps/ directory",
                        exe.display()
                    )
                })?
                .to_path_buf();
            let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
            let profile = name(&dir).unwrap_or_default();
            let mut cargo_args = match profile.as_str() {
                "debug" => Vec::new(),
                "release" => vec!["--release".to_owned()],
                other => vec!["--profile".to_owned(), other.to_owned()],
            };
            let mut target = dir.parent().map(Path::to_path_buf).unwrap_or_default();
            // Cargo marks the root of a target directory with CACHEDIR.TAG; a directory between
            // it and the profile's is the `--target` triple's.
            if !target.join("CACHEDIR.TAG").exists() {
                if let Some(root) = target.parent().filter(|r| r.join("CACHEDIR.TAG").exists()) {
                    cargo_args.extend(["--target".to_owned(), name(&target).unwrap_or_default()]);
                    target = root.to_path_buf();
                }
            }
            cargo_args.extend(["--target-dir".to_owned(), target.display().to_string()]);
            Ok(Profile { dir, cargo_args })
        })
        .as_ref()
        .map_err(String::clone)
}

/// The workspace root: the parent of this package's directory.
fn workspace_root() -> PathBuf {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    tests.parent().map(PathBuf::from).unwrap_or(tests)
}

/// Runs `cargo build ARGS` in the test binary's target directory and profile, bounded in time.
fn cargo_build(profile: &Profile, args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .arg("build")
        .args(args)
        .args(&profile.cargo_args);
    let out = output_with_timeout(&mut cmd, BUILD_TIMEOUT).map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{cmd:?}` failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The path of a binary cargo builds into the test binary's profile directory: `kind` is
/// `"bin"` (`<profile>/NAME`) or `"example"` (`<profile>/examples/NAME`). Built first if it is
/// missing or older than its sources, alone (`cargo build --workspace --KIND NAME`: the
/// workspace's feature resolution with only that binary's crates; an example with its feature
/// `zenoh`, as `cargo test --workspace` builds it), once per test process.
///
/// # Panics
/// If the build fails or does not finish in time, with cargo's output, or if the binary is not
/// there after it.
fn built(kind: &str, name: &str) -> PathBuf {
    static BUILDS: Mutex<Vec<(String, Result<(), String>)>> = Mutex::new(Vec::new());
    let profile = profile().unwrap_or_else(|e| panic!("cannot find the built binaries: {e}"));
    let path = match kind {
        "example" => profile.dir.join("examples").join(name),
        _ => profile.dir.join(name),
    };
    if !path.is_file() || older_than_sources(&path) {
        let target = format!("--{kind} {name}");
        let mut builds = BUILDS.lock().unwrap_or_else(PoisonError::into_inner);
        let known = builds.iter().position(|(t, _)| *t == target);
        let at = known.unwrap_or_else(|| {
            let flag = format!("--{kind}");
            let mut args = vec!["--workspace", &flag, name];
            if kind == "example" {
                // As `cargo test --workspace` builds them: this package asks for the feature.
                args.extend(["--features", "examples/zenoh"]);
            }
            let outcome = cargo_build(profile, &args);
            builds.push((target, outcome));
            builds.len() - 1
        });
        if let Err(e) = &builds[at].1 {
            panic!("cannot build {name}: {e}");
        }
    }
    assert!(
        path.is_file(),
        "{} is missing after the build",
        path.display()
    );
    path
}

/// Whether a source file (`*.rs`, not tests) of the crates the binaries are built from changed
/// after `binary` was built, as cargo would see it: `cargo test -p tests` leaves the binaries of
/// an earlier build in place.
fn older_than_sources(binary: &Path) -> bool {
    fn newest(dir: &Path, newest_seen: &mut std::time::SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "tests" && name != "target" {
                    newest(&path, newest_seen);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
                    *newest_seen = (*newest_seen).max(modified);
                }
            }
        }
    }
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return true;
    };
    let root = workspace_root();
    let mut newest_seen = std::time::SystemTime::UNIX_EPOCH;
    for dir in [
        "bus",
        "bus-net",
        "bus-ipc",
        "bus-macros",
        "bus-record",
        "bus-zenoh",
        "cli",
        "examples",
    ] {
        newest(&root.join(dir), &mut newest_seen);
    }
    newest_seen > built
}

/// The path of the workspace's binary `name` (the `llbus` command).
///
/// # Panics
/// As [`example`].
pub fn bin(name: &str) -> PathBuf {
    built("bin", name)
}

/// The path of example `name`.
///
/// # Panics
/// If it is missing and cannot be built in time.
pub fn example(name: &str) -> PathBuf {
    built("example", name)
}

/// A loopback UDP port that was free a moment ago (bound to port 0, read, released).
///
/// # Panics
/// If loopback cannot be bound at all.
pub fn free_udp_port() -> u16 {
    free_udp_addr().port()
}

/// A loopback UDP address (127.0.0.1 and a port) that was free a moment ago: for a test that
/// must name an address before the thing under test binds it (`export_compat` binds its own
/// socket and does not tell its port).
///
/// # Panics
/// If loopback cannot be bound at all.
pub fn free_udp_addr() -> SocketAddr {
    let sock = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .expect("binding a loopback UDP socket");
    sock.local_addr().expect("a bound socket's address")
}

/// The `key=value` fields of a tagged line such as the subscriber's `RESULT ...` line.
#[derive(Debug, Clone)]
pub struct Fields(HashMap<String, String>);

impl Fields {
    /// The fields of the last line of `output` that starts with `tag` (e.g. `"RESULT "`).
    pub fn find(output: &str, tag: &str) -> Option<Fields> {
        output
            .lines()
            .rev()
            .find_map(|l| l.find(tag).map(|i| &l[i + tag.len()..]))
            .map(|rest| {
                Fields(
                    rest.split_whitespace()
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                )
            })
    }

    /// Field `key` as a number.
    ///
    /// # Panics
    /// If it is missing or not a number, naming the key and the line.
    pub fn u64(&self, key: &str) -> u64 {
        match self.0.get(key).map(|v| v.parse::<u64>()) {
            Some(Ok(v)) => v,
            _ => panic!("field {key} missing or not a number in {:?}", self.0),
        }
    }

    /// Field `key` as text, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<_> = self.0.keys().collect();
        keys.sort();
        for (i, k) in keys.into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}={}", self.0[k])?;
        }
        Ok(())
    }
}

/// A child process whose stdout and stderr are read line by line on threads, so a test can
/// wait for a line with a deadline. Killed when dropped.
#[derive(Debug)]
pub struct Running {
    name: String,
    child: KillOnDrop,
    lines: Receiver<(bool, String)>,
    stdout: Vec<String>,
    stderr: Vec<String>,
}

impl Running {
    /// Starts `cmd` (stdin null, stdout and stderr piped); `name` labels it in messages.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn spawn(name: &str, mut cmd: Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send((false, line)).is_err() {
                        break;
                    }
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if tx.send((true, line)).is_err() {
                        break;
                    }
                }
            });
        }
        Running {
            name: name.to_owned(),
            child: KillOnDrop::new(child),
            lines,
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    fn keep(&mut self, (is_err, line): (bool, String)) {
        if is_err {
            self.stderr.push(line);
        } else {
            self.stdout.push(line);
        }
    }

    /// Waits until a line of stdout satisfies `pred` and returns it; `None` if `timeout`
    /// passes or the process closes its output first.
    pub fn wait_line(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((is_err, line)) => {
                    let hit = !is_err && pred(&line);
                    self.keep((is_err, line.clone()));
                    if hit {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Kills the process now (SIGKILL) and reaps it.
    pub fn kill(mut self) {
        let child = self.child.child_mut();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for the process to exit (killing it after `timeout`) and returns its status, or
    /// `None` if it had to be killed, with everything it wrote to stdout and stderr.
    pub fn finish(mut self, timeout: Duration) -> (Option<ExitStatus>, String, String) {
        let deadline = Instant::now() + timeout;
        let mut status = None;
        while Instant::now() < deadline {
            match self.child.child_mut().try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
        if status.is_none() {
            let child = self.child.child_mut();
            let _ = child.kill();
            let _ = child.wait();
        }
        // The reader threads end at end-of-file, which follows the exit.
        let drain_deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(l) = self
            .lines
            .recv_timeout(drain_deadline.saturating_duration_since(Instant::now()))
        {
            self.keep(l);
        }
        (status, self.stdout.join("\n"), self.stderr.join("\n"))
    }

    /// The process id.
    pub fn pid(&mut self) -> u32 {
        self.child.child_mut().id()
    }

    /// The name given at [`spawn`](Self::spawn).
    pub fn name(&self) -> &str {
        &self.name
    }
}
