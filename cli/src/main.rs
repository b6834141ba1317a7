//! `llbus`: the command that reaches running llbus buses on this host.
//!
//! It reads the live counters files that every running bus publishes in shared memory (their
//! layout is defined once, in `llbus`: see `llbus::read_counters_file`), so it never slows a
//! bus down and needs no connection to it.
//!
//! - `llbus list`: the buses on this host, live or stale (`--prune` removes the stale files).
//! - `llbus stat [BUS] [--watch] [--json] [--openmetrics]`: every edge, actor and named
//!   metric (bridge metrics among them) of one bus.
//! - `llbus top [BUS]`: a live full-screen view of the busiest edges (`q` quits).
#![deny(missing_docs)]

mod render;
mod select;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Reach and watch running llbus buses on this host.
#[derive(Debug, Parser)]
#[command(name = "llbus", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The buses on this host (live and stale counters files).
    List {
        /// Prints JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Removes the files of buses whose process is gone.
        #[arg(long)]
        prune: bool,
    },
    /// The counters of one bus: edges, actors and their named metrics.
    Stat {
        /// The bus: its name, its process id, or its counters file. Needed when more than
        /// one bus runs.
        bus: Option<String>,
        /// Prints again every interval, with rates over the interval.
        #[arg(long)]
        watch: bool,
        /// The interval of `--watch`, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// With `--watch`: stops after this many prints.
        #[arg(long)]
        count: Option<u64>,
        /// Prints JSON.
        #[arg(long, conflicts_with = "openmetrics")]
        json: bool,
        /// Prints the OpenMetrics text format, for Prometheus.
        #[arg(long)]
        openmetrics: bool,
    },
    /// A live full-screen view of a bus's busiest edges; `q` or Ctrl-C quits.
    Top {
        /// The bus (as for `stat`).
        bus: Option<String>,
        /// How often the view refreshes, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::List { json, prune } => list(json, prune),
        Command::Stat {
            bus,
            watch,
            interval_ms,
            count,
            json,
            openmetrics,
        } => stat(
            bus.as_deref(),
            watch,
            Duration::from_millis(interval_ms.max(10)),
            count,
            if json {
                render::Format::Json
            } else if openmetrics {
                render::Format::OpenMetrics
            } else {
                render::Format::Table
            },
        ),
        Command::Top { bus, interval_ms } => {
            top::run(bus.as_deref(), Duration::from_millis(interval_ms.max(50)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llbus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn list(json: bool, prune: bool) -> Result<(), String> {
    let buses = select::all()?;
    if prune {
        for b in buses.iter().filter(|b| !b.live) {
            match std::fs::remove_file(&b.path) {
                Ok(()) => eprintln!("removed stale {}", b.path.display()),
                Err(e) => eprintln!("cannot remove {}: {e}", b.path.display()),
            }
        }
    }
    print!("{}", render::list(&buses, json));
    Ok(())
}

fn stat(
    bus: Option<&str>,
    watch: bool,
    interval: Duration,
    count: Option<u64>,
    format: render::Format,
) -> Result<(), String> {
    let found = select::one(bus)?;
    let mut prev = None;
    let mut printed = 0u64;
    loop {
        let snap = match select::read(&found.path) {
            Ok(s) => s,
            // Gone while watching: the bus stopped.
            Err(e) if printed > 0 => {
                eprintln!("llbus: the bus stopped ({e})");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let live = snap.is_live();
        print!(
            "{}",
            render::stat(&found.path, &snap, live, prev.as_ref(), format)
        );
        printed += 1;
        if !watch || count.is_some_and(|c| printed >= c) {
            return Ok(());
        }
        prev = Some(snap);
        std::thread::sleep(interval);
    }
}
