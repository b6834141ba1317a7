//! A binary of its own because the process is the fixture: the test runs this binary again as a
//! recording process (`LLBUS_RECORD_CHILD` naming the file; it records a steady stream) and kills
//! it mid-write (SIGKILL: no destructor, no summary, no footer). The recording reads up to its
//! last complete chunk, by the mcap crate's reader and by `read`, with every message in it
//! intact and in sequence from the first.

#[path = "it/fixtures.rs"]
mod fixtures;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixtures::{bincode_of, quote, Quote, TempDir};
use llbus::Bus;
use llbus_record::{read, Recorder};

const CHILD: &str = "LLBUS_RECORD_CHILD";

/// The child's body: publish quotes at a steady pace for up to a minute (the parent kills it
/// long before), recording with 20 ms flushes.
fn child(path: &str) {
    let mut bus = Bus::builder();
    let quotes = bus.publisher::<Quote>("quotes");
    bus.add(
        Recorder::new(path)
            .chunk_size(4096)
            .flush_every(Some(Duration::from_millis(20)))
            .record::<Quote>(),
    );
    let Ok(mut running) = bus.start() else {
        std::process::exit(3)
    };
    let Ok(mut q) = running.publisher(quotes) else {
        std::process::exit(4)
    };
    let end = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while Instant::now() < end {
        if q.publish(quote(i)).is_err() {
            std::process::exit(5);
        }
        i += 1;
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::process::exit(6);
}

#[test]
fn a_recording_killed_mid_write_reads_up_to_its_last_complete_chunk() {
    if let Ok(path) = std::env::var(CHILD) {
        child(&path);
        return;
    }
    let dir = TempDir::new("killed");
    let path = dir.join("killed.mcap");
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test binary: {e}"));
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "a_recording_killed_mid_write_reads_up_to_its_last_complete_chunk",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawns the child: {e}"));
    // Wait for some chunks (bounded), then kill it wherever it is.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        if len > 64 * 1024 {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child exited before it was killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child
        .kill()
        .unwrap_or_else(|e| panic!("kills the child: {e}"));
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(!status.success(), "killed, not exited: {status}");

    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        bytes.len() > 64 * 1024,
        "the child wrote {} bytes",
        bytes.len()
    );

    // No summary and no footer: the mcap crate's streaming reader, told not to require the
    // end magic, reads the complete chunks and then reports the cut.
    let options = mcap::read::Options::IgnoreEndMagic.into();
    let stream = mcap::MessageStream::new_with_options(&bytes, options)
        .unwrap_or_else(|e| panic!("the header is intact: {e}"));
    let mut n = 0u64;
    for message in stream {
        let Ok(message) = message else { break };
        assert_eq!(u64::from(message.sequence), n, "in sequence from the first");
        assert_eq!(message.data.as_ref(), bincode_of(&quote(n)).as_slice());
        n += 1;
    }
    assert!(n > 100, "the complete chunks hold {n} messages");

    let recording = read(&bytes);
    assert_eq!(recording.frames.len() as u64, n, "read() agrees");
    assert!(
        recording.cut_off.is_some(),
        "a killed recording has no footer: read() says where it stopped"
    );
}
