//! The `llbus` command and the `watched` example as child processes, for the CLI tests.
//!
//! Every test gets a counters directory of its own ([`CountersDir`], removed when dropped) and
//! passes it to both processes as `LLBUS_COUNTERS_DIR`, so buses of other tests running beside
//! it are not seen. Children are killed when their guard drops, also when a test fails.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::netns::{output_with_timeout, KillOnDrop};

/// The `llbus` command that cargo built beside the running test binary (built first if it is
/// missing; see [`crate::example_bins`]).
///
/// # Panics
/// If it is missing and cannot be built in time.
pub fn llbus_bin() -> PathBuf {
    crate::example_bins::bin("llbus")
}

/// A counters directory of one test, removed (with what is left in it) when dropped.
#[derive(Debug)]
pub struct CountersDir(PathBuf);

impl CountersDir {
    /// A fresh directory named after `test` and this process.
    ///
    /// # Panics
    /// If it cannot be made.
    pub fn new(test: &str) -> CountersDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("llbus-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the counters directory");
        CountersDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The counters files in it.
    pub fn files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.0)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default()
    }
}

impl Drop for CountersDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `llbus ARGS` ([`llbus_bin`]) with the counters directory `dir`, bounded to 60 s.
///
/// # Panics
/// If it cannot run or does not end in time.
pub fn llbus(dir: &CountersDir, args: &[&str]) -> Output {
    run(&llbus_bin(), dir, args)
}

/// Runs the `llbus` command at `bin` with `args` and the counters directory `dir`, bounded to
/// 60 s (the command's own tests name the binary cargo built for them).
///
/// # Panics
/// If it cannot run or does not end in time.
pub fn run(bin: &Path, dir: &CountersDir, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args).env("LLBUS_COUNTERS_DIR", dir.path());
    output_with_timeout(&mut cmd, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("llbus {args:?}: {e}"))
}

/// A running `watched` example: its standard input (closing it stops the bus) and its output
/// lines. Killed when dropped.
#[derive(Debug)]
pub struct Watched {
    child: KillOnDrop,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line read so far.
    pub output: Vec<String>,
}

impl Watched {
    /// Starts `watched ARGS` with the counters directory `dir`.
    ///
    /// # Panics
    /// If it cannot be started.
    pub fn spawn(dir: &CountersDir, args: &[&str]) -> Watched {
        let mut child = Command::new(crate::example_bins::example("watched"))
            .args(args)
            .env("LLBUS_COUNTERS_DIR", dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the watched example");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Watched {
            child: KillOnDrop::new(child),
            stdin,
            lines,
            output: Vec::new(),
        }
    }

    /// Waits up to `timeout` for a line starting with `tag` and returns it.
    ///
    /// # Panics
    /// If none comes in time, with what it printed.
    pub fn wait_for(&mut self, tag: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.output.push(line.clone());
                    if line.starts_with(tag) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "watched printed no '{tag}' line within {timeout:?}; it printed:\n{}",
                    self.output.join("\n")
                ),
            }
        }
    }

    /// Asks it to stop (a `stop` line on its standard input) and waits up to `timeout` for
    /// its exit; returns everything it printed.
    ///
    /// # Panics
    /// If it does not exit in time, or fails.
    pub fn stop(mut self, timeout: Duration) -> Vec<String> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.output.push(line);
        }
        let status = loop {
            match self.child.child_mut().try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                other => panic!("watched did not exit in time ({other:?})"),
            }
        };
        assert!(
            status.success(),
            "watched failed: {status}\n{}",
            self.output.join("\n")
        );
        std::mem::take(&mut self.output)
    }

    /// Kills it at once (SIGKILL), as a crash would, and reaps it.
    pub fn kill(mut self) {
        let child = self.child.child_mut();
        let _ = child.kill();
        let _ = child.wait();
    }
}
