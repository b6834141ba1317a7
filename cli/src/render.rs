//! Turning counters into text: tables, JSON, and the OpenMetrics text format. Pure.

use std::fmt::Write as _;
use std::path::Path;

use llbus::{CountersSnapshot, EdgeCounts};

use crate::select::Found;
use crate::text::{self, clean};

/// How `stat` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Json,
    OpenMetrics,
}

/// Seconds between two UNIX-epoch nanosecond stamps.
fn secs(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e9
}

/// Messages per second on `e`: over the interval since `prev` when given, else since the bus
/// started.
pub(crate) fn rate(
    e: &EdgeCounts,
    snap: &CountersSnapshot,
    prev: Option<&CountersSnapshot>,
) -> f64 {
    let before = prev.and_then(|p| {
        p.edges
            .iter()
            .find(|x| {
                x.topic == e.topic && x.publisher == e.publisher && x.subscriber == e.subscriber
            })
            .map(|x| (x.published, p.heartbeat_unix_ns))
    });
    let (from, since) = before.unwrap_or((0, snap.started_unix_ns));
    let dt = secs(since, snap.heartbeat_unix_ns);
    if dt <= 0.0 {
        0.0
    } else {
        e.published.saturating_sub(from) as f64 / dt
    }
}

/// `llbus list`.
pub(crate) fn list(buses: &[Found], json: bool) -> String {
    if json {
        let rows: Vec<serde_json::Value> = buses
            .iter()
            .map(|f| {
                serde_json::json!({
                    "file": f.path.display().to_string(),
                    "owner": f.owner,
                    "live": f.live,
                    "bus": f.snapshot.as_ref().map(|s| s.bus.clone()),
                    "pid": f.snapshot.as_ref().map(|s| s.pid),
                    "edges": f.snapshot.as_ref().map(|s| s.edges.len()),
                    "actors": f.snapshot.as_ref().map(|s| s.actors.len()),
                    "error": f.error,
                })
            })
            .collect();
        return format!("{}\n", text::json(&serde_json::Value::Array(rows)));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:<10} {:<6} {:>10} {:>6} {:>7}  FILE",
        "BUS", "PID", "OWNER", "STATE", "UPTIME", "EDGES", "ACTORS"
    );
    for f in buses {
        match &f.snapshot {
            Some(s) => {
                let _ = writeln!(
                    out,
                    "{:<20} {:>8} {:<10} {:<6} {:>9.1}s {:>6} {:>7}  {}",
                    clean(&s.bus),
                    s.pid,
                    text::user(f.owner),
                    if f.live { "live" } else { "stale" },
                    secs(s.started_unix_ns, s.heartbeat_unix_ns),
                    s.edges.len(),
                    s.actors.len(),
                    text::path(&f.path)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:<20} {:>8} {:<10} {:<6} {:>10} {:>6} {:>7}  {} ({})",
                    "?",
                    "?",
                    text::user(f.owner),
                    "broken",
                    "",
                    "",
                    "",
                    text::path(&f.path),
                    clean(f.error.as_deref().unwrap_or("unreadable"))
                );
            }
        }
    }
    if buses.is_empty() {
        let _ = writeln!(out, "(no llbus bus on this host)");
    }
    out
}

/// `llbus stat` in `format`; rates over the interval since `prev` if given.
pub(crate) fn stat(
    path: &Path,
    snap: &CountersSnapshot,
    live: bool,
    prev: Option<&CountersSnapshot>,
    format: Format,
) -> String {
    match format {
        Format::Json => json(path, snap, live, prev),
        Format::OpenMetrics => openmetrics(snap),
        Format::Table => table(snap, live, prev),
    }
}

fn json(
    path: &Path,
    snap: &CountersSnapshot,
    live: bool,
    prev: Option<&CountersSnapshot>,
) -> String {
    let mut v = serde_json::to_value(snap).unwrap_or(serde_json::Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("file".into(), path.display().to_string().into());
        obj.insert("live".into(), live.into());
        if let Some(edges) = obj.get_mut("edges").and_then(|e| e.as_array_mut()) {
            for (row, e) in edges.iter_mut().zip(&snap.edges) {
                if let Some(row) = row.as_object_mut() {
                    row.insert("rate_per_s".into(), rate(e, snap, prev).into());
                }
            }
        }
    }
    format!("{}\n", text::json(&v))
}

/// The edges, actors and named metrics as tables.
pub(crate) fn table(
    snap: &CountersSnapshot,
    live: bool,
    prev: Option<&CountersSnapshot>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bus {} (pid {}, user {}, {}, up {:.1}s)",
        clean(&snap.bus),
        snap.pid,
        text::user(snap.owner),
        if live {
            "live"
        } else {
            "STALE: its process is gone"
        },
        secs(snap.started_unix_ns, snap.heartbeat_unix_ns)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<18} {:<28} {:<10} {:>10} {:>10} {:>10} {:>6} {:>6} {:>8} {:>9} {:>6} {:>8} {:>8}",
        "TOPIC",
        "PUBLISHER -> SUBSCRIBER",
        "POLICY",
        "PUBLISHED",
        if prev.is_some() { "RATE/S" } else { "AVG/S" },
        "HANDLED",
        "DEPTH",
        "MAX",
        "DROPPED",
        "CONFLATED",
        "LOST",
        "WAITED",
        "PANICKED"
    );
    for e in &snap.edges {
        let _ = writeln!(
            out,
            "{:<18} {:<28} {:<10} {:>10} {:>10.0} {:>10} {:>6} {:>6} {:>8} {:>9} {:>6} {:>8} {:>8}",
            clean(&e.topic),
            format!("{} -> {}", clean(&e.publisher), clean(&e.subscriber)),
            clean(&e.policy),
            e.published,
            rate(e, snap, prev),
            e.handled,
            e.in_flight,
            e.max_depth,
            e.dropped,
            e.conflated,
            e.lost,
            e.waited,
            e.panicked
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<18} {:<14} {:>10} {:>12} {:>8} {:>8} {:>6}",
        "ACTOR", "THREAD", "HANDLED", "IDLE_ROUNDS", "TICKS", "RESTARTS", "PANICS"
    );
    for a in &snap.actors {
        let _ = writeln!(
            out,
            "{:<18} {:<14} {:>10} {:>12} {:>8} {:>8} {:>6}",
            clean(&a.name),
            clean(&a.thread),
            a.handled,
            a.idle_rounds,
            a.ticks,
            a.restarts,
            a.panics
        );
    }
    if snap.actors.iter().any(|a| !a.metrics.is_empty()) {
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<18} {:<32} {:>14}", "ACTOR", "METRIC", "VALUE");
        for a in &snap.actors {
            for (name, v) in &a.metrics {
                let _ = writeln!(out, "{:<18} {:<32} {:>14}", clean(&a.name), clean(name), v);
            }
        }
    }
    out
}

/// A label value escaped for the OpenMetrics text format, which has escapes for `\\`, `"` and
/// newline only: any other character that could act on a terminal (a control character, a
/// bidirectional override) is replaced by U+FFFD.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c if text::unsafe_char(c) => s.push('\u{fffd}'),
            c => s.push(c),
        }
    }
    s
}

/// The counters in the OpenMetrics text format (one family after another, `# EOF` last).
pub(crate) fn openmetrics(snap: &CountersSnapshot) -> String {
    let mut out = String::new();
    let bus = escape(&snap.bus);
    type EdgeField = fn(&EdgeCounts) -> u64;
    let edge_families: [(&str, &str, &str, EdgeField); 9] = [
        (
            "published",
            "counter",
            "Messages published on the edge.",
            |e| e.published,
        ),
        (
            "handled",
            "counter",
            "Messages whose handler returned.",
            |e| e.handled,
        ),
        (
            "panicked",
            "counter",
            "Messages whose handler panicked.",
            |e| e.panicked,
        ),
        (
            "dropped",
            "counter",
            "Messages refused by a full ring.",
            |e| e.dropped,
        ),
        (
            "conflated",
            "counter",
            "Values overwritten before they were read.",
            |e| e.conflated,
        ),
        (
            "waited",
            "counter",
            "Publishes that waited for room.",
            |e| e.waited,
        ),
        ("lost", "counter", "Messages lost.", |e| e.lost),
        ("in_flight", "gauge", "Messages queued now.", |e| {
            e.in_flight
        }),
        ("max_depth", "gauge", "The highest queue depth seen.", |e| {
            e.max_depth
        }),
    ];
    for (name, kind, help, get) in edge_families {
        let family = format!("llbus_edge_{name}");
        let _ = writeln!(out, "# TYPE {family} {kind}");
        let _ = writeln!(out, "# HELP {family} {help}");
        let suffix = if kind == "counter" { "_total" } else { "" };
        for e in &snap.edges {
            let _ = writeln!(
                out,
                "{family}{suffix}{{bus=\"{bus}\",topic=\"{}\",publisher=\"{}\",subscriber=\"{}\",policy=\"{}\"}} {}",
                escape(&e.topic),
                escape(&e.publisher),
                escape(&e.subscriber),
                escape(&e.policy),
                get(e)
            );
        }
    }
    type ActorField = fn(&llbus::ActorCounts) -> u64;
    let actor_families: [(&str, &str, ActorField); 5] = [
        ("handled", "Messages handled.", |a| a.handled),
        ("ticks", "Ticks run.", |a| a.ticks),
        ("idle_rounds", "Turns that found nothing to do.", |a| {
            a.idle_rounds
        }),
        ("restarts", "Restarts.", |a| a.restarts),
        ("panics", "Panics caught.", |a| a.panics),
    ];
    for (name, help, get) in actor_families {
        let family = format!("llbus_actor_{name}");
        let _ = writeln!(out, "# TYPE {family} counter");
        let _ = writeln!(out, "# HELP {family} {help}");
        for a in &snap.actors {
            let _ = writeln!(
                out,
                "{family}_total{{bus=\"{bus}\",actor=\"{}\",thread=\"{}\"}} {}",
                escape(&a.name),
                escape(&a.thread),
                get(a)
            );
        }
    }
    // Named metrics may be counters or gauges; the file does not say which.
    let _ = writeln!(out, "# TYPE llbus_actor_metric unknown");
    let _ = writeln!(
        out,
        "# HELP llbus_actor_metric An actor's own named metric (bridge metrics among them)."
    );
    for a in &snap.actors {
        for (name, v) in &a.metrics {
            let _ = writeln!(
                out,
                "llbus_actor_metric{{bus=\"{bus}\",actor=\"{}\",metric=\"{}\"}} {v}",
                escape(&a.name),
                escape(name)
            );
        }
    }
    let _ = writeln!(out, "# EOF");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap() -> CountersSnapshot {
        CountersSnapshot {
            bus: "b\"x".to_owned(),
            pid: 1,
            owner: 0,
            started_unix_ns: 0,
            heartbeat_unix_ns: 2_000_000_000,
            interval_ns: 1,
            generation: 2,
            edges: vec![EdgeCounts {
                topic: "md.quote".to_owned(),
                publisher: "feed".to_owned(),
                subscriber: "strat".to_owned(),
                policy: "Block".to_owned(),
                published: 10,
                handled: 9,
                in_flight: 1,
                ..EdgeCounts::default()
            }],
            actors: vec![llbus::ActorCounts {
                name: "bridge".to_owned(),
                thread: "io".to_owned(),
                handled: 3,
                metrics: vec![("datagrams_sent".to_owned(), 7)],
                ..llbus::ActorCounts::default()
            }],
        }
    }

    #[test]
    fn openmetrics_groups_families_escapes_labels_and_ends_with_eof() {
        let text = openmetrics(&snap());
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains(
            "llbus_edge_published_total{bus=\"b\\\"x\",topic=\"md.quote\",publisher=\"feed\",subscriber=\"strat\",policy=\"Block\"} 10\n"
        ));
        assert!(text.contains("# TYPE llbus_edge_in_flight gauge\n"));
        assert!(text.contains("llbus_edge_in_flight{bus=\"b\\\"x\",topic=\"md.quote\""));
        assert!(text.contains(
            "llbus_actor_metric{bus=\"b\\\"x\",actor=\"bridge\",metric=\"datagrams_sent\"} 7\n"
        ));
        // Every sample line belongs to the family declared last before it.
        let mut family = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap_or_default().to_owned();
            } else if !line.starts_with('#') {
                assert!(line.starts_with(&family), "{line} outside {family}");
            }
        }
    }

    #[test]
    fn rates_are_per_second_since_start_or_since_the_last_sample() {
        let now = snap();
        assert_eq!(rate(&now.edges[0], &now, None), 5.0);
        let mut before = snap();
        before.edges[0].published = 8;
        before.heartbeat_unix_ns = 1_500_000_000;
        assert_eq!(rate(&now.edges[0], &now, Some(&before)), 4.0);
    }

    #[test]
    fn the_table_shows_every_edge_actor_and_metric() {
        let t = table(&snap(), true, None);
        assert!(t.contains("feed -> strat"), "{t}");
        assert!(t.contains("datagrams_sent"), "{t}");
        assert!(t.contains("AVG/S"), "{t}");
    }

    #[test]
    fn control_characters_in_names_never_reach_the_terminal() {
        let mut s = snap();
        s.bus = "evil\x1b]0;owned\x07".to_owned();
        s.edges[0].topic = "t\x1b[2J\u{202e}".to_owned();
        s.edges[0].publisher = "p\u{9b}1m".to_owned();
        s.actors[0].name = "a\rb".to_owned();
        s.actors[0].metrics[0].0 = "m\x1b".to_owned();
        let found = Found {
            path: "/x/llbus-\x1b[31m.cnc".into(),
            owner: 0,
            snapshot: Some(s.clone()),
            error: None,
            live: true,
        };
        for out in [
            table(&s, true, None),
            openmetrics(&s),
            list(std::slice::from_ref(&found), false),
            list(std::slice::from_ref(&found), true),
        ] {
            assert!(
                !out.chars()
                    .any(|c| c != '\n' && crate::text::unsafe_char(c)),
                "{out:?}"
            );
        }
        assert!(table(&s, true, None).contains("t\\x1b[2J\\u{202e}"));
    }
}
