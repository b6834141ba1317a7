//! A binary of its own because it sets `XDG_RUNTIME_DIR`, which every `ChannelConfig::default()`
//! reads: the default channel directory is `$XDG_RUNTIME_DIR/llbus` when that variable names a
//! directory of this user's, else the per-user directory under `/dev/shm`.
#![cfg(not(loom))]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use llbus_ipc::ChannelConfig;

/// A directory of this test's, mode 0700, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "llbus-ipc-default-dir-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("make the directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// docs/IPC.md "Where channels meet": `DIR` is by default `$XDG_RUNTIME_DIR/llbus` when that
/// variable names a directory of this user's, else `/dev/shm/llbus-UID`.
#[test]
fn the_default_channel_directory_follows_xdg_runtime_dir_only_when_it_is_ours() {
    let saved = std::env::var_os("XDG_RUNTIME_DIR");
    let ours = TempDir::new("xdg");
    let writable = TempDir::new("xdg-open");
    std::fs::set_permissions(&writable.0, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    std::env::set_var("XDG_RUNTIME_DIR", &ours.0);
    let with_ours = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", "relative/run");
    let relative = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", ours.0.join("missing"));
    let missing = ChannelConfig::default().dir;
    std::env::set_var("XDG_RUNTIME_DIR", &writable.0);
    let open = ChannelConfig::default().dir;
    match saved {
        Some(v) => std::env::set_var("XDG_RUNTIME_DIR", v),
        None => std::env::remove_var("XDG_RUNTIME_DIR"),
    }

    assert_eq!(with_ours, ours.0.join("llbus"));
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for (what, dir) in [
        ("a relative XDG_RUNTIME_DIR", relative),
        ("a missing XDG_RUNTIME_DIR", missing),
        ("an XDG_RUNTIME_DIR everyone may write", open),
    ] {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(
            dir.parent() == Some(base.as_path()) && name.starts_with(&format!("llbus-{uid}")),
            "{what}: the channel directory is {}",
            dir.display()
        );
    }
}
