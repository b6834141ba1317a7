//! The example programs of `examples/` run as child processes, for the multi-process and
//! two-host tests of the network bridge.
//!
//! `cargo test --workspace` does not build another package's examples, so [`example`] builds
//! them once per test process (`cargo build --release -p examples --examples`, with the `cargo`
//! that runs the tests, bounded in time) and returns the path of the binary under
//! `<target>/release/examples/`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::netns::{output_with_timeout, KillOnDrop};

/// How long building the examples may take (a cold release build on two busy cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1200);

/// The workspace root: the parent of this package's directory.
fn workspace_root() -> PathBuf {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    tests.parent().map(PathBuf::from).unwrap_or(tests)
}

/// `<target>/release/examples`, after building the examples once (later calls reuse the first
/// build's outcome).
///
/// # Panics
/// If the build fails or does not finish within its time limit, with cargo's output.
pub fn examples_dir() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    built_examples(
        &BUILT,
        &["build", "--release", "-p", "examples", "--examples"],
        "release",
    )
}

/// `<target>/debug/examples`, after building the examples with their feature `zenoh` once: in
/// the debug profile and with the workspace's feature resolution, so that the zenoh that
/// `cargo test --workspace` has built is reused (a release build, or a `-p examples` one with
/// other features for zenoh's dependencies, would build it a second time).
///
/// # Panics
/// As [`examples_dir`].
pub fn zenoh_examples_dir() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    built_examples(
        &BUILT,
        &[
            "build",
            "--workspace",
            "--examples",
            "--features",
            "examples/zenoh",
        ],
        "debug",
    )
}

/// Runs `cargo ARGS` once per test process (bounded in time), and returns
/// `<target>/PROFILE/examples`.
fn built_examples(
    built: &OnceLock<Result<PathBuf, String>>,
    args: &[&str],
    profile: &str,
) -> PathBuf {
    let built = built.get_or_init(|| {
        let root = workspace_root();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(&root).args(args);
        let out = output_with_timeout(&mut cmd, BUILD_TIMEOUT).map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "`cargo {}` failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        Ok(target.join(profile).join("examples"))
    });
    match built {
        Ok(dir) => dir.clone(),
        Err(e) => panic!("cannot build the examples: {e}"),
    }
}

/// The path of example `name`, built.
///
/// # Panics
/// As [`examples_dir`], or if the binary is not there after the build.
pub fn example(name: &str) -> PathBuf {
    let path = examples_dir().join(name);
    assert!(
        path.is_file(),
        "example binary {} missing after the build",
        path.display()
    );
    path
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
