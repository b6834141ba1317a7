//! Output: the table (plain or Markdown), JSON lines, and what goes to stderr.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use super::*;

/// One figure as a JSON object on one line, e.g.
/// `{"suite":"ring","case":"rtt_p50","impl":"rtrb","value":123.0,"unit":"ns"}`;
/// `None` for a skipped figure, which is not printed.
pub fn json_line(f: &Figure) -> Option<String> {
    let value = f.value.filter(|v| v.is_finite())?;
    let mut s = String::with_capacity(96);
    s.push_str("{\"suite\":");
    push_json_str(&mut s, f.suite);
    s.push_str(",\"case\":");
    push_json_str(&mut s, f.case);
    s.push_str(",\"impl\":");
    push_json_str(&mut s, f.implementation);
    let _ = write!(s, ",\"value\":{value:.1}");
    for (key, v) in [("min", f.min), ("max", f.max)] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let _ = write!(s, ",\"{key}\":{v:.1}");
        }
    }
    let _ = write!(s, ",\"rounds\":{},\"unit\":", f.rounds);
    push_json_str(&mut s, f.unit);
    s.push('}');
    Some(s)
}

pub(super) fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Formats a value for the table: ns as whole numbers, msgs/s in millions, percentages and
/// averages with decimals.
pub(super) fn table_cell(value: f64, unit: &str) -> String {
    match unit {
        "msgs/s" => format!("{:.2}", value / 1e6),
        "%" => format!("{value:.2}"),
        "msgs" => format!("{value:.1}"),
        "dgrams/msg" => format!("{value:.3}"),
        _ => format!("{value:.0}"),
    }
}

pub(super) fn table_unit(unit: &str) -> &str {
    match unit {
        "msgs/s" => "M msgs/s",
        u => u,
    }
}

/// Renders `figures` as a table: one row per implementation, one column per case, each cell
/// the median over rounds followed by the smallest and largest round's value in parentheses
/// (`median (min..max)`), then one footnote per skipped or incomplete cell. `markdown` makes
/// it a Markdown table with the footnotes as a list.
pub fn render_table(figures: &[Figure], markdown: bool) -> String {
    let mut impls: Vec<&str> = Vec::new();
    let mut cases: Vec<(&str, &str)> = Vec::new();
    for f in figures {
        if !impls.contains(&f.implementation) {
            impls.push(f.implementation);
        }
        if !cases.iter().any(|(c, _)| *c == f.case) {
            cases.push((f.case, f.unit));
        }
    }
    let header: Vec<String> = cases
        .iter()
        .map(|(c, u)| format!("{c} ({})", table_unit(u)))
        .collect();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    for imp in &impls {
        let mut row = vec![imp.to_string()];
        for (case, _) in &cases {
            let f = figures
                .iter()
                .find(|f| f.implementation == *imp && f.case == *case);
            let mut cell = match f.and_then(|f| f.value.map(|v| (v, f))) {
                Some((v, f)) => match (f.min, f.max) {
                    (Some(lo), Some(hi)) if f.rounds > 1 => format!(
                        "{} ({}..{})",
                        table_cell(v, f.unit),
                        table_cell(lo, f.unit),
                        table_cell(hi, f.unit)
                    ),
                    _ => table_cell(v, f.unit),
                },
                None => "-".into(),
            };
            if let Some(note) = f.and_then(|f| f.note.as_ref()) {
                notes.push(format!("{imp} {case}: {note}"));
                cell.push_str(&format!(" [{}]", notes.len()));
            }
            row.push(cell);
        }
        rows.push(row);
    }
    let mut widths: Vec<usize> = std::iter::once("impl".len())
        .chain(header.iter().map(String::len))
        .collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let head: Vec<&str> = std::iter::once("impl")
        .chain(header.iter().map(String::as_str))
        .collect();
    let push = |out: &mut String, cells: &[&str]| push_row(out, cells, &widths, markdown);
    push(&mut out, &head);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, w)| match (markdown, i) {
            (false, _) => "-".repeat(*w),
            (true, 0) => format!("{:-<w$}", ":"),
            (true, _) => format!("{:->w$}", ":"),
        })
        .collect();
    push(
        &mut out,
        &rule.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for row in &rows {
        push(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    if markdown && !notes.is_empty() {
        out.push('\n');
    }
    for (i, note) in notes.iter().enumerate() {
        let bullet = if markdown { "- " } else { "" };
        let _ = writeln!(out, "{bullet}[{}] {note}", i + 1);
    }
    out
}

pub(super) fn push_row(out: &mut String, cells: &[&str], widths: &[usize], markdown: bool) {
    let sep = if markdown { " | " } else { "  " };
    if markdown {
        out.push_str("| ");
    }
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        if i == 0 {
            let _ = write!(out, "{cell:<w$}");
        } else {
            let _ = write!(out, "{sep}{cell:>w$}");
        }
    }
    if markdown {
        out.push_str(" |");
    }
    out.push('\n');
}

/// Where the human-readable output goes: stdout normally, stderr under `--json` so that
/// stdout holds nothing but JSON lines.
pub fn human(args: &Args, text: &str) {
    if args.json {
        eprint!("{text}");
    } else {
        print!("{text}");
        // Keep the order with the progress lines on stderr.
        let _ = std::io::stdout().flush();
    }
}

/// Prints `figures`: as JSON lines on stdout under `--json`, and as a table (on stderr under
/// `--json`, stdout otherwise).
pub fn print_figures(args: &Args, figures: &[Figure]) {
    if args.json {
        for line in figures.iter().filter_map(json_line) {
            println!("{line}");
        }
    }
    human(args, &render_table(figures, args.markdown));
}

/// Prints the targets checked against `figures` ([`render_targets`]), in a code block under
/// `--markdown`.
pub fn print_targets(args: &Args, targets: &[Target], figures: &[Figure], out: &Collector) {
    let text = render_targets(targets, figures, out);
    if args.markdown {
        human(args, &format!("\n```text\n{text}```\n\n"));
    } else {
        human(args, &text);
    }
}

/// A short duration, for the plan lines: `50ms`, `1.5s`.
pub fn short(d: Duration) -> String {
    format!("{d:?}")
}

/// A duration in seconds, for progress messages.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
