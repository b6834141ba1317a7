//! `llbus call`: calls a service a remote bridge serves (`Bridge::export_service`) without its
//! Rust types, with a request written as JSON, and prints the reply as one line of JSON.
//!
//! 1. Fetches the service's shape from the server's bridge (the schema frames, `remote`): a
//!    service shape (`llbus::schema::Shape::service`), whose fields are the request's and the
//!    reply's shapes, accepted only if it hashes to the fingerprint the bridge states.
//! 2. Encodes the JSON by the request's shape (`llbus::schema::encode_json`); JSON that departs
//!    from it is refused, naming where, before anything is sent (exit 2).
//! 3. Calls through a typeless endpoint (`Endpoint::with_services`, `Endpoint::call`) with the
//!    fingerprints derived from the shapes (`llbus::request_fingerprint`,
//!    `llbus::reply_fingerprint`): the server's handshake refuses a request fingerprint other
//!    than its own, and a reply is taken only with the reply fingerprint. The call is resent on
//!    the protocol's backoff until its reply or `--timeout-s`.
//! 4. Decodes the reply by the reply's shape (`llbus::schema::decode`) and prints it; a call
//!    that ends without one says why in words on stderr (exit 1).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use llbus::schema::{encode_json, Shape};
use llbus_net::{CallStatus, DropReason, Event, SchemaFailure, ServiceImportSpec, Sink};

use crate::remote::{read_psk, FetchError, Link};
use crate::text::clean;

/// How much sooner than `--timeout-s` a timeout still counts as this side's own.
const SLACK: Duration = Duration::from_millis(5);

/// What `llbus call` is asked.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 every call answered, 1 a call ended without its \
                        reply (no server, unknown service, refused, timeout, a server error), \
                        2 a request that does not fit the service's request type, or bad \
                        arguments."
)]
pub(crate) struct Args {
    /// The service's name.
    #[arg(long)]
    service: String,
    /// The request, as JSON in the shape `llbus echo` prints (a struct is an object of every
    /// field, an enum `"Variant"` or `{"Variant": ...}`, an `Option` the value or null).
    request: String,
    /// The server's bridge address (the `service` example's default).
    #[arg(long, default_value = "127.0.0.1:7100")]
    publisher: SocketAddr,
    /// The server's pre-shared key: a file of 64 hex digits (or 32 bytes).
    #[arg(long)]
    psk_file: Option<std::path::PathBuf>,
    /// How long each step may take: fetching the service's shape, then each call.
    #[arg(long, default_value_t = 5.0)]
    timeout_s: f64,
    /// Calls this many times, one after the other, printing each reply.
    #[arg(long, default_value_t = 1)]
    count: u64,
}

/// Why `llbus call` stops.
enum Failure {
    /// The arguments, or a request that does not fit the service's request type: exit 2.
    Request(String),
    /// A call that ended without its reply: exit 1.
    Call(String),
}

/// Runs `llbus call`; its exit status.
pub(crate) fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Request(e)) => {
            eprintln!("llbus call: {}", clean(&e));
            ExitCode::from(2)
        }
        Err(Failure::Call(e)) => {
            eprintln!("llbus call: {}", clean(&e));
            ExitCode::FAILURE
        }
    }
}

/// A service's request and reply shapes, and the fingerprints its frames carry.
struct Served {
    request: Shape,
    reply: Shape,
    request_fingerprint: u64,
    reply_fingerprint: u64,
}

impl Served {
    /// The service of a shape the server served for `name`.
    fn of(name: &str, publisher: SocketAddr, shape: &Shape) -> Result<Served, String> {
        let Some((request, reply)) = shape.as_service() else {
            return Err(format!(
                "'{name}' at {publisher} is a topic, not a service: `llbus echo --topic {name}` \
                 shows its messages"
            ));
        };
        Ok(Served {
            request_fingerprint: llbus::request_fingerprint(request.fingerprint()),
            reply_fingerprint: llbus::reply_fingerprint(reply.fingerprint()),
            request: request.clone(),
            reply: reply.clone(),
        })
    }
}

/// The calls' ends, as the endpoint hands them over.
#[derive(Default)]
struct Ends {
    ended: Vec<(u64, Result<Vec<u8>, CallStatus>)>,
}

impl Sink for Ends {
    fn deliver(&mut self, _import: usize, _payload: &[u8]) -> Result<(), DropReason> {
        Err(DropReason::UnknownTopic)
    }

    fn reply(&mut self, _service: usize, key: u64, result: Result<&[u8], CallStatus>) {
        self.ended.push((key, result.map(<[u8]>::to_vec)));
    }
}

/// A call's end without its reply, in words.
fn status_words(status: CallStatus) -> String {
    match status {
        CallStatus::Ok => "ended without a reply".to_owned(),
        CallStatus::Timeout => "the server's own call of the service timed out".to_owned(),
        CallStatus::ServerPanicked => "the server panicked holding the call".to_owned(),
        CallStatus::Dropped => "the server dropped the call without answering".to_owned(),
        CallStatus::Stopped => "the server's bus stopped before answering".to_owned(),
        CallStatus::QueueFull => "the server has too many calls in progress; try again".to_owned(),
        CallStatus::OverBudget => {
            "the reply was over this host's reply budget at the server; try again later".to_owned()
        }
        CallStatus::TooLarge => "the request or the reply does not fit in one datagram".to_owned(),
        CallStatus::Refused => "the server refused the call".to_owned(),
        other => format!("the server ended the call with status {other:?}"),
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let json: serde_json::Value = serde_json::from_str(&args.request)
        .map_err(|e| Failure::Request(format!("the request is not JSON: {e}")))?;
    let timeout = crate::seconds(args.timeout_s, "--timeout-s").map_err(Failure::Request)?;
    let psk = (args.psk_file.as_deref().map(read_psk).transpose()).map_err(Failure::Request)?;
    let name = args.service.as_str();
    let mut link = Link::bind(args.publisher, psk).map_err(Failure::Call)?;
    let publisher = link.publisher();
    let topic = link.schema(name, timeout).map_err(|e| match e {
        FetchError::Failed {
            reason: SchemaFailure::NotServed,
            ..
        } => Failure::Call(format!(
            "no service '{name}' at {publisher}: its bridge serves nothing of that name (check \
             the name, and that the server's bridge exports the service)"
        )),
        FetchError::NoAnswer { .. } => Failure::Call(format!(
            "no answer from {publisher} within {timeout:?}: is the server's bridge running \
             there, does its allowlist admit this host, and is the key right?"
        )),
        other => Failure::Call(other.to_string()),
    })?;
    let served = Served::of(name, publisher, &topic.shape).map_err(Failure::Call)?;
    let body = encode_json(&served.request, &json).map_err(|e| {
        Failure::Request(format!(
            "the request does not fit service '{name}''s request type: {e}"
        ))
    })?;
    let mut endpoint = link
        .caller(ServiceImportSpec {
            service: name.into(),
            topic_id: topic.topic_id,
            request_fingerprint: served.request_fingerprint,
            reply_fingerprint: served.reply_fingerprint,
            server: publisher,
        })
        .map_err(Failure::Call)?;
    let mut out = std::io::stdout().lock();
    for key in 0..args.count {
        let reply = call_once(&mut link, &mut endpoint, key, &body, timeout, name)?;
        let line = crate::echo::json_line(&reply, &served.reply).map_err(|e| {
            Failure::Call(format!(
                "the reply does not fit service '{name}''s reply type: {e}"
            ))
        })?;
        if writeln!(out, "{line}").is_err() {
            break; // stdout is gone (a closed pipe).
        }
    }
    let _ = out.flush();
    link.close(&mut endpoint);
    Ok(())
}

/// Makes call `key` and waits for its end: the reply's bytes, or why there is none.
fn call_once(
    link: &mut Link,
    endpoint: &mut llbus_net::Endpoint,
    key: u64,
    body: &[u8],
    timeout: Duration,
    name: &str,
) -> Result<Vec<u8>, Failure> {
    let publisher = link.publisher();
    let refused = |why: String| {
        Failure::Call(format!(
            "service '{name}' at {publisher}: refused ({why}); check that the server exports \
             it with these types and lets this host call it"
        ))
    };
    let mut ends = Ends::default();
    let started = Instant::now();
    link.call(endpoint, key, body, timeout)
        .map_err(|status| match status {
            CallStatus::Refused => refused("its bridge refused the subscription".to_owned()),
            CallStatus::TooLarge => {
                Failure::Request("the request does not fit in one datagram".to_owned())
            }
            other => Failure::Call(status_words(other)),
        })?;
    // The endpoint ends the call by its deadline; this bound only guards against a clock that
    // stalls.
    let give_up = Instant::now() + timeout + Duration::from_secs(1);
    let mut refusal = None;
    loop {
        link.drive(endpoint, &mut ends).map_err(Failure::Call)?;
        while let Some(event) = endpoint.poll_event() {
            if let Event::Refused { refusal: r, .. } = event {
                refusal = Some(r);
            }
        }
        if let Some(i) = ends.ended.iter().position(|(k, _)| *k == key) {
            let (_, result) = ends.ended.swap_remove(i);
            return result.map_err(|status| match (status, refusal) {
                (CallStatus::Refused, Some(r)) => refused(r.to_string()),
                (CallStatus::Refused, None) => refused("by its bridge".to_owned()),
                // Ended at this side's deadline (a server's own timeout comes sooner).
                (CallStatus::Timeout, _) if started.elapsed() + SLACK >= timeout => Failure::Call(
                    format!("service '{name}' at {publisher}: no reply within {timeout:?}"),
                ),
                (other, _) => Failure::Call(format!(
                    "service '{name}' at {publisher}: {}",
                    status_words(other)
                )),
            });
        }
        if Instant::now() >= give_up {
            return Err(Failure::Call(format!(
                "service '{name}' at {publisher}: no reply within {timeout:?}"
            )));
        }
    }
}
