//! `llbus call` and `llbus topics` against a service a bridge of this process serves, the
//! command as a separate process: the reply printed as one line of JSON, fields in declaration
//! order; JSON that departs from the request's type refused before anything is sent, naming
//! where (exit 2); an unknown service and a server that is not there ended in words within the
//! timeout (exit 1); the service listed as one by `llbus topics`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use llbus::{Actor, Bus, Context, Message, Replies, Request, RunningBus, Service, Setup};
use llbus_net::Bridge;
use serde::{Deserialize, Serialize};
use tests::cli::CountersDir;

use crate::llbus;

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
enum Side {
    Buy,
    Sell,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
#[message(topic = "call.quote")]
struct Ask {
    account: u32,
    qty: i64,
    side: Side,
}

#[derive(Message, Serialize, Deserialize, Clone, Debug)]
struct Verdict {
    approved: bool,
    account: u32,
    reason: Option<String>,
}

fn quote_service() -> Service<Ask, Verdict> {
    Service::of()
}

/// Approves what is under 100, for its account.
struct Desk {
    replies: Replies<Verdict>,
}

impl Actor for Desk {
    type In = Request<Ask>;
    fn on_message(&mut self, request: Request<Ask>, ctx: &mut Context<'_>) {
        let (ask, responder) = self.replies.accept(request);
        let approved = ask.qty.abs() < 100;
        let verdict = Verdict {
            approved,
            account: ask.account,
            reason: (!approved).then(|| format!("{:?} of {} is too many", ask.side, ask.qty)),
        };
        ctx.reply(responder, Ok(verdict));
    }
}

/// A bus that serves the quote service on a bridge that announces it; the bridge's address.
fn serve() -> (RunningBus, SocketAddr) {
    let bridge = Bridge::bind("127.0.0.1:0").expect("binds");
    let addr = bridge.local_addr();
    let mut b = Bus::builder();
    b.actor("desk", |s: &mut Setup<'_>| Desk {
        replies: s.replies(&quote_service()),
    })
    .serves(&quote_service());
    b.add(bridge.export_service(&quote_service()).announce());
    (b.start().expect("starts"), addr)
}

fn call(dir: &CountersDir, addr: &str, service: &str, request: &str) -> std::process::Output {
    llbus(
        dir,
        &[
            "call",
            "--publisher",
            addr,
            "--service",
            service,
            "--timeout-s",
            "2",
            request,
        ],
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_call_prints_its_reply_as_json_and_a_bad_request_names_its_field() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-reply");
    let addr = addr.to_string();
    let name = quote_service().name().to_string();

    let out = call(
        &dir,
        &addr,
        &name,
        r#"{"account": 7, "qty": 250, "side": "Sell"}"#,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout, "{\"approved\":false,\"account\":7,\"reason\":\"Sell of 250 is too many\"}\n",
        "{stderr}"
    );

    // --count: one line per call.
    let out = llbus(
        &dir,
        &[
            "call",
            "--publisher",
            &addr,
            "--service",
            &name,
            "--count",
            "3",
            r#"{"account": 1, "qty": 5, "side": "Buy"}"#,
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(
            value,
            serde_json::json!({"approved": true, "account": 1, "reason": null})
        );
    }

    // A field of the wrong type, a missing field, an unknown variant: refused, named.
    for (request, names) in [
        (r#"{"account": -1, "qty": 5, "side": "Buy"}"#, ".account"),
        (r#"{"account": 1, "side": "Buy"}"#, "qty"),
        (r#"{"account": 1, "qty": 5, "side": "Hold"}"#, "Hold"),
        (r#"{"account": 1, "#, "not JSON"),
    ] {
        let out = call(&dir, &addr, &name, request);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{request}: {stderr}");
        assert!(stderr.contains(names), "{request}: names {names}: {stderr}");
        assert!(out.stdout.is_empty(), "{request}");
    }
    bus.stop();
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_unknown_service_and_no_server_end_in_words_within_the_timeout() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-errors");
    let request = r#"{"account": 1, "qty": 5, "side": "Buy"}"#;

    let started = Instant::now();
    let out = call(&dir, &addr.to_string(), "call.nothing", request);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no service 'call.nothing'") && stderr.contains(&addr.to_string()),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at once"
    );
    bus.stop();

    // Nobody at the address: the fetch gives up at the timeout.
    let nowhere = tests::example_bins::free_udp_addr().to_string();
    let started = Instant::now();
    let out = call(&dir, &nowhere, quote_service().name().as_str(), request);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no answer from") && stderr.contains(&nowhere),
        "{stderr}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "within the timeout: {took:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn topics_lists_a_served_service_as_one() {
    let (bus, addr) = serve();
    let dir = CountersDir::new("call-topics");
    let out = llbus(
        &dir,
        &[
            "topics",
            "--no-group",
            "--peer",
            &addr.to_string(),
            "--listen-ms",
            "1500",
            "--json",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let name = quote_service().name().to_string();
    let topics = value["topics"].as_array().expect("topics");
    let service = topics
        .iter()
        .find(|t| t["topic"] == name.as_str())
        .unwrap_or_else(|| panic!("the service is listed: {stdout}"));
    assert_eq!(service["service"], true, "{stdout}");
    let fingerprint = format!("{:#018x}", <Request<Ask> as Message>::FINGERPRINT);
    assert_eq!(service["fingerprints"][0], fingerprint.as_str(), "{stdout}");
    bus.stop();
}
