//! The command line: which suite, how many rounds, which outputs (parsed by clap).

use std::path::PathBuf;

/// What `--help` prints after the options: what each suite measures, and its targets.
const SUITES: &str = "\
SUITES:
    ring    SPSC queues between two pinned threads: round-trip latency
            (p50/p99/p99.9/max) and one-way throughput (single item and batch)
            for the llbus ring, rtrb, crossbeam, std mpsc, disruptor and the
            cache-line floor
    bus     the bus against its bare ring and what a user would pick instead
            (impls llbus-bus, llbus-ring, disruptor, crossbeam-channel): round
            trip between two actors on two pinned busy-spinning threads
            (rtt_p50, rtt_p99, rtt_p999, rtt_max), and messages/s per
            subscriber of one publisher fanning out to 1 and to 3 subscribers
            (throughput_fanout1, throughput_fanout3; the disruptor broadcasts
            to 3 consumers, crossbeam-channel is a pipeline), one message per
            publish and in bursts (throughput_fanout1_batch,
            throughput_fanout3_batch); the ring's fan-out is a plain stream,
            for reference. Targets: rtt p50 llbus-bus / llbus-ring <= 1.10;
            fan-out 1 bus / ring >= 0.5; fan-out 3 / fan-out 1 >= 0.5; fan-out
            3 bus / disruptor >= 1
    udp     UDP over loopback (impls llbus, raw-spin, raw-blocking,
            llbus-mac, the same with the pre-shared-key MAC on, and
            llbus-park, both hosts Idle::Park, sleeping in epoll):
            round trip of 32-byte messages (rtt_p50, rtt_p99, rtt_p999,
            rtt_max) through two bridges on two buses, against raw
            non-blocking (spinning) and blocking UDP sockets; and llbus
            messages/s delivered from bridge A to bridge B with batching
            (throughput_batch) and with one message per datagram
            (throughput_single), each with the loss in % (loss_batch,
            loss_single) and the messages per datagram sent
            (msgs_per_datagram_batch, msgs_per_datagram_single); and fan-out
            of one publisher to 1 and 8 subscribers (each a host of its own:
            network namespaces on a forwarding wire, where the process may
            make them; else loopback), llbus (unicast) against
            llbus-multicast (a group): the publisher thread's CPU ns per
            message (publisher_ns_per_msg_1, _8), datagrams per message
            (datagrams_per_msg_1, _8) and one-way p50 at 1 (oneway_p50).
            Targets: rtt p50 llbus - raw-spin <= +1000 ns; llbus / raw-spin
            <= 1.25; llbus-park / raw-blocking <= 1.25; batch / single >= 5;
            multicast publisher cost 8 / 1 <= 1.5; oneway p50 multicast /
            llbus <= 1.1
    ipc     llbus-ipc's shared-memory ring (impls shm-threads: both ends in
            this process; shm-process: echo in a second process) against the
            in-process ring and udp-loopback: round trip (rtt_p50, rtt_p99,
            rtt_p999) and values/s one at a time and in batches of 64
            (throughput_single, throughput_batch). Targets: rtt p50
            shm-process / ring <= 1.3; batch shm-process / ring >= 0.5
    record  the in-process MCAP recorder (llbus-record): messages/s of
            64-byte messages recorded with zstd chunks (recorded_64b, and
            dropped_64b when its writer is behind) against the same bytes
            written to a plain file (raw-file), and at zstd level 3
            (llbus-record-z3) beside the default 1; and the ping-pong round
            trip without (rtt-plain) and with (rtt-recorded) a recorder of
            both topics. Targets: recorded >= 1 M msgs/s; rtt p50 recorded /
            plain <= 1.10
    zenoh   llbus through two llbus-zenoh gateways (llbus-zenoh: llbus ->
            gateway -> zenoh -> gateway -> llbus) against plain zenoh
            (zenoh: a zenoh publisher to a zenoh subscriber), two peer
            sessions on loopback TCP: one-way latency at 5000 msgs/s
            (oneway_p50, oneway_p99) and messages/s taken flat out
            (throughput). Target: oneway p50 llbus-zenoh / zenoh <= 1.20
    all     every suite above, in turn (the default)

Run on an otherwise idle machine with at least two cores: threads spin.";

/// Which suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    /// SPSC ring comparison.
    Ring,
    /// Bus round trip against the bare ring.
    Bus,
    /// UDP loopback round trip.
    Udp,
    /// Shared-memory IPC (llbus-ipc) against the in-process ring and UDP.
    Ipc,
    /// The in-process MCAP recorder (llbus-record) against a plain file, and its cost to a
    /// publisher's round trip.
    Record,
    /// The zenoh gateway (llbus-zenoh) against plain zenoh.
    Zenoh,
    /// Every suite.
    All,
}

impl Suite {
    /// Whether running `self` includes `other`.
    pub fn includes(self, other: Suite) -> bool {
        self == Suite::All || self == other
    }
}

/// llbus comparison benchmarks: `cargo run --release -p benches -- [SUITE] [OPTIONS]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Parser)]
#[command(name = "benches", after_long_help = SUITES)]
pub struct Args {
    /// The suite to run (see --help for what each measures).
    #[arg(value_enum, default_value_t = Suite::All)]
    pub suite: Suite,
    /// Print one JSON object per figure on its own line on stdout; the table and progress go
    /// to stderr.
    #[arg(long)]
    pub json: bool,
    /// Print the tables as Markdown tables and the targets in a code block, ready to paste
    /// into README.md.
    #[arg(long)]
    pub markdown: bool,
    /// Number of rounds (each runs every implementation once per measurement, in a fresh
    /// random order); figures are medians over rounds, with their min and max [default: 15,
    /// and no new round starts after the suite's time budget, so `all` stays under 4 minutes].
    #[arg(long, value_name = "N", value_parser = parse_rounds)]
    pub rounds: Option<usize>,
    /// Short windows and few rounds: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Print every round's figures on stderr as they come.
    #[arg(short, long)]
    pub verbose: bool,
    /// Seed of the rounds' random order [default: from the clock]; printed in the output, so
    /// a run's order can be repeated.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Also write pictures into DIR, per suite: a round-trip latency percentile plot
    /// (SUITE-latency) and a throughput bar chart (SUITE-throughput), each as .svg and .png.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// A round count of at least 1.
fn parse_rounds(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("takes a whole number of at least 1, not `{value}`")),
    }
}
