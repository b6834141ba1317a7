//! SECURITY.md, "Local processes and users": another user's bus never shadows one's own in the
//! `llbus` command ("each bus shows its owner; one's own buses are preferred"). Needs root, to
//! run a bus as a second user; says so and skips otherwise.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tests::cli::llbus_bin;
use tests::example_bins::example;
use tests::netns::KillOnDrop;

/// A uid no account uses: the other user.
const OTHER_UID: u32 = 65533;

/// The `watched` example running a bus named `name` as `uid` (and its gid), with its counters
/// file in that user's default directory under `/dev/shm`; it runs while its standard input
/// (held here) stays open, and is killed when dropped. Returns it with its pid.
fn watched(name: &str, uid: u32) -> (KillOnDrop, ChildStdin, u32) {
    let mut child = Command::new(example("watched"))
        .args(["--name", name, "--rate", "100"])
        .env_remove("LLBUS_COUNTERS_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watched example");
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let pid = child.id();
    let child = KillOnDrop::new(child);
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("READY") => {
                assert!(
                    !line.contains("file=none"),
                    "uid {uid}'s bus has no file: {line}"
                );
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("the bus of uid {uid} never got ready: {e}"),
        }
    }
    (child, stdin.expect("piped stdin"), pid)
}

#[test]
fn one_s_own_bus_is_preferred_to_another_user_s_of_the_same_name() {
    if !tests::local::root_or_skip("another user's bus of the same name") {
        return;
    }
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ =
                std::fs::remove_dir_all(Path::new("/dev/shm").join(format!("llbus-{OTHER_UID}")));
        }
    }
    let _cleanup = Cleanup;
    let name = format!("shadow-{}", std::process::id());
    let (_other, _other_stdin, other_pid) = watched(&name, OTHER_UID);
    let (_own, _own_stdin, own_pid) = watched(&name, 0);
    let stat = |args: &[&str]| {
        let out = Command::new(llbus_bin())
            .args(args)
            .env_remove("LLBUS_COUNTERS_DIR")
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .expect("run llbus");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Root sees both, each with its owner...
    let (ok, listed, err) = stat(&["list"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = listed.lines().filter(|l| l.contains(&name)).collect();
    assert_eq!(rows.len(), 2, "{listed}");
    assert!(
        rows.iter().any(|r| r.contains(&OTHER_UID.to_string())),
        "{listed}"
    );
    // ...and naming the bus picks its own.
    let (ok, shown, err) = stat(&["stat", &name]);
    assert!(ok, "llbus stat {name} failed: {err}");
    assert!(
        shown.contains(&format!("(pid {own_pid},")),
        "llbus stat {name} did not show root's own bus (pid {own_pid}):\n{shown}"
    );
    assert!(!shown.contains(&format!("(pid {other_pid},")), "{shown}");
}
