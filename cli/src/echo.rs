//! `llbus echo`: every message of a remote topic as one line of JSON, decoded without the
//! topic's Rust type from the shape its publisher serves (`remote`), by
//! `llbus::schema::decode`, which refuses bytes that do not fit the shape.

use std::io::Write;
use std::time::Instant;

use llbus::schema::{decode, Shape};
use llbus_net::{DropReason, Event, Sink};

use crate::remote::{Opened, Subscription};

/// What `llbus echo` is asked.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The topic's name.
    #[arg(long)]
    topic: String,
    /// Stops after this many messages.
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    subscription: Subscription,
}

/// A message's bytes as one line of JSON, fields in declaration order, safe to print
/// (`text::json_text`).
pub(crate) fn json_line(payload: &[u8], shape: &Shape) -> Result<String, String> {
    let value = decode(payload, shape).map_err(|e| e.to_string())?;
    let raw = serde_json::to_string(&value).map_err(|e| e.to_string())?;
    Ok(crate::text::json_text(raw))
}

/// Prints what the subscription delivers.
struct Printer<W> {
    shape: Shape,
    out: W,
    /// Printed so far; nothing more once `count` is reached.
    printed: u64,
    count: Option<u64>,
    undecodable: u64,
    /// Set when stdout is gone (a closed pipe): stop.
    closed: bool,
}

impl<W: Write> Sink for Printer<W> {
    fn deliver(&mut self, _import: usize, payload: &[u8]) -> Result<(), DropReason> {
        if self.closed || self.count.is_some_and(|c| self.printed >= c) {
            return Ok(());
        }
        match json_line(payload, &self.shape) {
            Ok(line) => {
                if writeln!(self.out, "{line}").is_err() {
                    self.closed = true;
                }
                self.printed += 1;
                Ok(())
            }
            Err(e) => {
                if self.undecodable == 0 {
                    eprintln!("llbus echo: a message does not fit the served schema: {e}");
                }
                self.undecodable += 1;
                Err(DropReason::PayloadDecode)
            }
        }
    }
}

/// Runs `llbus echo`.
pub(crate) fn run(args: &Args) -> Result<(), String> {
    let Opened {
        mut link,
        until,
        setup_timeout,
    } = args.subscription.open()?;
    let topics = link.schemas(std::slice::from_ref(&args.topic), setup_timeout)?;
    let Some(topic) = topics.first() else {
        return Err("no schema".to_owned());
    };
    let mut endpoint = link.subscribe(&topics)?;
    let mut printer = Printer {
        shape: topic.shape.clone(),
        out: std::io::stdout().lock(),
        printed: 0,
        count: args.count,
        undecodable: 0,
        closed: false,
    };
    let setup_deadline = Instant::now() + setup_timeout;
    let mut established = false;
    loop {
        if printer.closed
            || args.count.is_some_and(|c| printer.printed >= c)
            || until.is_some_and(|u| Instant::now() >= u)
        {
            break;
        }
        if !established && Instant::now() >= setup_deadline {
            return Err(format!(
                "no subscription to topic '{}' at {} within {:?}: does the publisher's \
                 allowlist admit this host?",
                crate::text::clean(&args.topic),
                link.publisher(),
                setup_timeout
            ));
        }
        link.drive(&mut endpoint, &mut printer)?;
        while let Some(event) = endpoint.poll_event() {
            match event {
                Event::Established { .. } => established = true,
                Event::Refused { refusal, .. } => {
                    return Err(format!(
                        "topic '{}' at {}: {refusal}",
                        crate::text::clean(&args.topic),
                        link.publisher()
                    ));
                }
                _ => {}
            }
        }
    }
    let _ = printer.out.flush();
    link.close(&mut endpoint);
    if printer.undecodable > 0 {
        eprintln!(
            "llbus echo: {} messages did not fit the served schema",
            printer.undecodable
        );
    }
    Ok(())
}
