//! What another user can do to a channel: plant its socket at the channel's name (a root
//! reader and writer refuse it, reported, never used, never removed, unless that user is
//! admitted by opt-in), connect to another user's channel (closed unanswered, counted), squat
//! the per-user directory or every default directory (reported, never used; the rightful
//! user's channel is made elsewhere and works).
//!
//! These scenarios need root (they run the other side as `nobody` or as an unused uid, with
//! `setuid` in the child); they say so and pass without checking anything when not root, so
//! that a developer's unprivileged run stays green (CI runs as root).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use llbus_ipc::{ChannelConfig, OpenError, Pod, Receiver, Sender};
use tests::example_bins::Running;
use tests::local::nobody;

use crate::fixtures::{config_in, Dir, Tick};
use crate::local::{channel, got, spawn};
use crate::{eventually, ready, reexec};

/// A uid no account uses: the victim of a squatted per-user directory.
const PER_USER_VICTIM_UID: u32 = 65533;

/// A directory for the test (see [`Dir`]) owned by `owner` (uid, gid).
fn dir_of(test: &str, owner: (u32, u32)) -> Dir {
    let d = Dir::new(test);
    std::os::unix::fs::chown(&d.0, Some(owner.0), Some(owner.1)).expect("chown");
    d
}

#[test]
fn another_users_channel_is_refused_unless_admitted() {
    if !tests::local::root_or_skip("another users channel") {
        return;
    }
    let nobody = nobody();
    let name = channel("foreign");
    let theirs = dir_of("theirs", nobody);
    let ours = dir_of("ours", (0, 0));
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
    let cfg = config_in(&ours.0);
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
    eventually(Duration::from_secs(10), || {
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
    let victim = (PER_USER_VICTIM_UID, PER_USER_VICTIM_UID);
    let squatted = Path::new("/dev/shm").join(format!("llbus-{PER_USER_VICTIM_UID}"));
    let _ = std::fs::remove_dir_all(&squatted);
    let _ =
        std::fs::remove_dir_all(squatted.with_file_name(format!("llbus-{PER_USER_VICTIM_UID}-1")));
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
        squatted.with_file_name(format!("llbus-{PER_USER_VICTIM_UID}-1")),
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

const VICTIM_CHILD: &str = "LLBUS_VICTIM_CHILD";
/// A uid no account uses: the victim of squatted default channel directories.
const DEFAULT_DIR_VICTIM_UID: u32 = 65531;

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
    let squats: Vec<PathBuf> = std::iter::once(format!("llbus-{DEFAULT_DIR_VICTIM_UID}"))
        .chain((1..8).map(|n| format!("llbus-{DEFAULT_DIR_VICTIM_UID}-{n}")))
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
    let home = std::env::temp_dir().join(format!("llbus-test-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir(&home).expect("mkdir home");
    std::os::unix::fs::chown(
        &home,
        Some(DEFAULT_DIR_VICTIM_UID),
        Some(DEFAULT_DIR_VICTIM_UID),
    )
    .expect("chown home");
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
    let mut cmd = reexec("users::victim_child");
    cmd.env(VICTIM_CHILD, "1")
        .env("HOME", &home)
        .env_remove("XDG_RUNTIME_DIR");
    cmd.uid(DEFAULT_DIR_VICTIM_UID);
    cmd.gid(DEFAULT_DIR_VICTIM_UID);
    let mut child = Running::spawn("victim", cmd);
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
