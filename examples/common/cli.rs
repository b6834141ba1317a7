//! Command-line pieces shared by the network examples: the idle strategy as a flag, the
//! allowlist, the pre-shared key, seconds as a duration, the zenoh flags, and an error report
//! that names what failed in words.

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
    /// Through zenoh, by the llbus-zenoh gateway (build with `--features zenoh`).
    Zenoh,
}

/// The zenoh flags (`--transport zenoh`). Zenoh's own JSON5 file (`--zenoh-config`) says
/// everything zenoh can be told; the endpoint flags add to it, and without a file the session
/// is a peer with scouting off (it reaches only the endpoints given).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ZenohArgs {
    /// Listen on this zenoh endpoint, e.g. tcp/127.0.0.1:7447 (repeatable).
    #[arg(long = "zenoh-listen", value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// Connect to this zenoh endpoint, e.g. tcp/127.0.0.1:7447 (repeatable).
    #[arg(long = "zenoh-connect", value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// A zenoh configuration file (JSON5: mode, endpoints, scouting, TLS, access control).
    #[arg(long = "zenoh-config", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The payload encoding: bincode between llbus processes, json for any zenoh client (the
    /// JSON Schema is then served on `llbus/<topic>/@schema`). An import reads either.
    #[arg(long = "zenoh-encoding", value_enum, default_value_t = ZenohEncoding::Bincode)]
    pub encoding: ZenohEncoding,
}

/// `--zenoh-encoding`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZenohEncoding {
    /// llbus's bincode.
    #[default]
    Bincode,
    /// JSON.
    Json,
}

/// Why `--transport zenoh` cannot run in a build without the gateway.
#[cfg(not(feature = "zenoh"))]
pub const NO_ZENOH: &str = "--transport zenoh needs the zenoh gateway, which this build left \
     out: run the example with `cargo run --release --features zenoh --example ...`";

#[cfg(feature = "zenoh")]
impl ZenohArgs {
    /// The zenoh configuration: the file, or a peer with scouting off; then the endpoints.
    pub fn zenoh_config(&self) -> Result<llbus_zenoh::zenoh::Config, Box<dyn std::error::Error>> {
        let mut config = match &self.config {
            Some(path) => llbus_zenoh::zenoh::Config::from_file(path)
                .map_err(|e| format!("cannot read zenoh config {}: {e}", path.display()))?,
            None => llbus_zenoh::zenoh::Config::from_json5(
                r#"{ mode: "peer", scouting: { multicast: { enabled: false }, gossip: { enabled: false } } }"#,
            )
            .map_err(|e| e.to_string())?,
        };
        let list = |v: &[String]| serde_json_list(v);
        if !self.listen.is_empty() {
            config
                .insert_json5("listen/endpoints", &list(&self.listen))
                .map_err(|e| format!("--zenoh-listen: {e}"))?;
        }
        if !self.connect.is_empty() {
            config
                .insert_json5("connect/endpoints", &list(&self.connect))
                .map_err(|e| format!("--zenoh-connect: {e}"))?;
        }
        Ok(config)
    }

    /// The gateway's payload encoding.
    pub fn payload_encoding(&self) -> llbus_zenoh::PayloadEncoding {
        match self.encoding {
            ZenohEncoding::Bincode => llbus_zenoh::PayloadEncoding::Bincode,
            ZenohEncoding::Json => llbus_zenoh::PayloadEncoding::Json,
        }
    }
}

/// A JSON5 list of strings.
#[cfg(feature = "zenoh")]
fn serde_json_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
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

/// `--topic`: a topic name, checked as the bus checks it.
pub fn parse_topic(text: &str) -> Result<llbus::TopicName, String> {
    llbus::TopicName::new(text).map_err(|e| e.to_string())
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
