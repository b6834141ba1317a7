//! `llbus echo`: every message of a remote topic as one line of JSON, decoded without the
//! topic's Rust type from the shape its publisher serves (`remote`), by
//! `llbus::schema::decode`, which refuses bytes that do not fit the shape.
//!
//! With a pattern (`--topic 'md.quote.*'`, `pattern`), every topic of the publisher that
//! matches, found once at start, each decoded with its own shape; each line then names its
//! topic: `{"topic":"md.quote.nyse","message":{...}}`. A plain name prints the message alone,
//! as it always did.

use std::io::Write;
use std::time::Instant;

use llbus::schema::{decode, Shape};
use llbus_net::{DropReason, Event, Sink};

use crate::pattern::{parse_topic, TopicArg};
use crate::remote::{Opened, Subscription};

/// What `llbus echo` is asked.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::pattern::PATTERN_HELP)]
pub(crate) struct Args {
    /// The topic's name, or a pattern of names (`md.quote.*`): every topic of the publisher
    /// that matches, found once at start (topics it adds later are not followed). With a
    /// pattern each line names its topic: `{"topic":"md.quote.nyse","message":{...}}`.
    #[arg(long, value_parser = parse_topic, value_name = "NAME|PATTERN")]
    topic: TopicArg,
    /// Stops after this many messages (over all topics).
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

/// A message's bytes as one line of JSON that names its topic,
/// `{"topic":"NAME","message":MESSAGE}`, safe to print (`text::json_text`).
pub(crate) fn tagged_line(topic: &str, payload: &[u8], shape: &Shape) -> Result<String, String> {
    let value = decode(payload, shape).map_err(|e| e.to_string())?;
    let raw = format!(
        "{{\"topic\":{},\"message\":{}}}",
        serde_json::to_string(topic).map_err(|e| e.to_string())?,
        serde_json::to_string(&value).map_err(|e| e.to_string())?
    );
    Ok(crate::text::json_text(raw))
}

/// Prints what the subscriptions deliver.
struct Printer<W> {
    /// Per import: its topic's name and shape.
    topics: Vec<(std::sync::Arc<str>, Shape)>,
    /// Whether each line names its topic (a pattern was given).
    tagged: bool,
    out: W,
    /// Printed so far; nothing more once `count` is reached.
    printed: u64,
    count: Option<u64>,
    undecodable: u64,
    /// Set when stdout is gone (a closed pipe): stop.
    closed: bool,
}

impl<W: Write> Sink for Printer<W> {
    fn deliver(&mut self, import: usize, payload: &[u8]) -> Result<(), DropReason> {
        if self.closed || self.count.is_some_and(|c| self.printed >= c) {
            return Ok(());
        }
        let Some((topic, shape)) = self.topics.get(import) else {
            return Err(DropReason::UnknownTopic);
        };
        let line = if self.tagged {
            tagged_line(topic, payload, shape)
        } else {
            json_line(payload, shape)
        };
        match line {
            Ok(line) => {
                if writeln!(self.out, "{line}").is_err() {
                    self.closed = true;
                }
                self.printed += 1;
                Ok(())
            }
            Err(e) => {
                if self.undecodable == 0 && self.tagged {
                    eprintln!(
                        "llbus echo: a message of '{}' does not fit the served schema: {}",
                        crate::text::clean(topic),
                        crate::text::clean(&e)
                    );
                } else if self.undecodable == 0 {
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
    let wanted = std::slice::from_ref(&args.topic);
    let Opened {
        mut link,
        until,
        setup_timeout,
        ..
    } = args.subscription.open(wanted)?;
    let resolved = crate::pattern::resolve(wanted, &mut link, setup_timeout, false)?;
    let topics = link.schemas(&resolved.names, setup_timeout)?;
    if topics.is_empty() {
        return Err("no schema".to_owned());
    }
    let mut endpoint = link.subscribe(&topics)?;
    let mut printer = Printer {
        topics: topics
            .iter()
            .map(|t| (t.name.clone(), t.shape.clone()))
            .collect(),
        tagged: args.topic.is_pattern(),
        out: std::io::stdout().lock(),
        printed: 0,
        count: args.count,
        undecodable: 0,
        closed: false,
    };
    let setup_deadline = Instant::now() + setup_timeout;
    let mut established = vec![false; topics.len()];
    loop {
        if printer.closed
            || args.count.is_some_and(|c| printer.printed >= c)
            || until.is_some_and(|u| Instant::now() >= u)
        {
            break;
        }
        if Instant::now() >= setup_deadline {
            if let Some(i) = established.iter().position(|e| !e) {
                let waiting = established.iter().filter(|e| !**e).count();
                return Err(format!(
                    "no subscription to topic '{}'{} at {} within {:?}: does the publisher's \
                     allowlist admit this host?",
                    crate::text::clean(&topics[i].name),
                    if waiting > 1 {
                        format!(" (and {} more)", waiting - 1)
                    } else {
                        String::new()
                    },
                    link.publisher(),
                    setup_timeout
                ));
            }
        }
        link.drive(&mut endpoint, &mut printer)?;
        while let Some(event) = endpoint.poll_event() {
            match event {
                Event::Established { import, .. } => {
                    if let Some(e) = established.get_mut(import) {
                        *e = true;
                    }
                }
                Event::Refused { import, refusal } => {
                    let name = topics.get(import).map_or("?", |t| &*t.name);
                    return Err(format!(
                        "topic '{}' at {}: {refusal}",
                        crate::text::clean(name),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A bincode string: its `u64` length, then its bytes.
    fn string(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out
    }

    #[test]
    fn a_tagged_line_names_its_topic_first_and_escapes_both() {
        let payload = string("a\u{9b}b");
        let line = tagged_line("md.\u{1b}[2J", &payload, &Shape::Str).unwrap();
        assert!(line.starts_with("{\"topic\":"), "{line}");
        assert!(!line.chars().any(crate::text::unsafe_char), "{line:?}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"topic": "md.\u{1b}[2J", "message": "a\u{9b}b"})
        );
        // Untagged: the message alone, as before.
        assert_eq!(json_line(&payload, &Shape::Str).unwrap(), "\"a\\u009bb\"");
        assert!(tagged_line("t", &payload[..4], &Shape::Str).is_err());
    }
}
