//! Command-line pieces shared by the network examples: the idle strategy as a flag, the
//! allowlist, the pre-shared key, seconds as a duration, and an error report that names what
//! failed in words.

use std::time::Duration;

use llbus::Idle;

/// `--idle`: how a bus thread waits when it has nothing to do.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleArg {
    /// Busy-spin: the lowest latency, and a whole core per thread.
    Spin,
    /// Spin, then yield the core.
    Backoff,
    /// Spin, yield, then sleep until woken.
    Park,
}

impl From<IdleArg> for Idle {
    fn from(idle: IdleArg) -> Idle {
        match idle {
            IdleArg::Spin => Idle::BusySpin,
            IdleArg::Backoff => Idle::Backoff,
            IdleArg::Park => Idle::Park,
        }
    }
}

/// `--transport`: how the counter travels.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Over UDP through a network bridge (to this host or another).
    Udp,
    /// Through shared memory to a process on this host (llbus-ipc).
    Shm,
}

/// `--compat`: a foreign wire format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compat {
    /// The ll-udp-pubsub v0.1 format: a bincode `i64` counter, 16-byte datagrams.
    #[value(name = "ll-udp")]
    LlUdp,
}

/// `--allow`: comma-separated networks.
pub fn parse_allow(text: &str) -> Result<llbus_net::Allowlist, String> {
    text.parse::<llbus_net::Allowlist>()
        .map_err(|e| e.to_string())
}

/// `--psk`: a 32-byte key from 64 hex digits.
pub fn parse_psk(text: &str) -> Result<[u8; 32], String> {
    let bytes = text.as_bytes();
    let wrong = || {
        format!(
            "expected 64 hex digits (32 bytes), got {} characters",
            bytes.len()
        )
    };
    if bytes.len() != 64 {
        return Err(wrong());
    }
    let mut key = [0u8; 32];
    for (k, pair) in key.iter_mut().zip(bytes.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| wrong())?;
        *k = u8::from_str_radix(pair, 16).map_err(|_| format!("{pair:?} is not a hex byte"))?;
    }
    Ok(key)
}

/// A number of seconds (`1.5`) as a duration.
pub fn parse_secs(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{text}: give seconds >= 0"))
}

/// Runs `main`; on error prints `program: error: ...` with every cause, and exits 1.
pub fn report_errors(
    program: &str,
    main: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> std::process::ExitCode {
    match main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut text = format!("{program}: error: {e}");
            let mut cause = e.source();
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("{text}");
            std::process::ExitCode::FAILURE
        }
    }
}
