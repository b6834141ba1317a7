//! Running tools and test processes with time limits, and killing them on drop.

use std::io::{self, BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::error::io_err;
use super::NetnsError;

pub(super) fn cmd_line(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion with its output captured, killing it after `timeout`.
pub fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, NetnsError> {
    let line = cmd_line(cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound && cmd.get_program() == "ip" {
                NetnsError::IpMissing
            } else if e.kind() == io::ErrorKind::NotFound && cmd.get_program() == "tc" {
                NetnsError::TcMissing
            } else {
                NetnsError::Io {
                    what: format!("cannot start `{line}`"),
                    source: e,
                }
            }
        })?;
    wait_with_timeout(child, timeout).map_err(|e| match e {
        NetnsError::Timeout { after, .. } => NetnsError::Timeout { cmd: line, after },
        e => e,
    })
}

/// Waits for `child` (whose stdout and stderr, if piped, are collected), killing it if it has not
/// exited after `timeout`. Returns its output, or [`NetnsError::Timeout`] once it is killed.
pub fn wait_with_timeout(mut child: Child, timeout: Duration) -> Result<Output, NetnsError> {
    fn drain<R: Read + Send + 'static>(r: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
        r.map(|mut r| {
            thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().map_err(io_err("waiting for a child"))? {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => thread::sleep(Duration::from_millis(5)),
        }
    };
    let stdout = out
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    let stderr = err
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(NetnsError::Timeout {
            cmd: format!(
                "pid {} (stderr so far: {})",
                child.id(),
                String::from_utf8_lossy(&stderr).trim()
            ),
            after: timeout,
        }),
    }
}

/// A child process that is killed (and reaped) when dropped, unless taken back with
/// [`KillOnDrop::into_inner`].
#[derive(Debug)]
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Guards `child`.
    pub fn new(child: Child) -> Self {
        KillOnDrop(Some(child))
    }

    /// The child, no longer guarded.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("child present until taken")
    }

    /// The guarded child.
    pub fn child_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("child present until taken")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// The lines of a child's stdout, read on a thread so that the caller can wait with a timeout
/// (`recv_timeout`). The channel closes when the child closes its stdout.
pub fn lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    rx
}
