//! `llbus top`: a live full-screen view of one bus's busiest edges, refreshed every interval.
//! The terminal is put in raw mode on its alternate screen and restored on every way out
//! (`q`, Esc, Ctrl-C, the bus exiting, an error).

use std::io::{self, Write};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};

use crate::render::rate;
use crate::select;
use crate::text::clean;

/// Restores the terminal when dropped.
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(io::stdout(), cursor::Show, terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

fn quits(key: &KeyEvent) -> bool {
    matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
        || (key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL))
}

/// Runs the view until the user quits or the bus goes.
pub(crate) fn run(bus: Option<&str>, interval: Duration) -> Result<(), String> {
    let found = select::one(bus)?;
    let screen = Screen::enter().map_err(|e| format!("cannot use this terminal: {e}"))?;
    let mut prev = None;
    let outcome = loop {
        let snap = match select::read(&found.path, found.owner) {
            Ok(s) => s,
            Err(e) => break Err(format!("the bus stopped: {e}")),
        };
        // A terminal that does not know its size (a bare pty) says 0: draw a usual one.
        let (cols, rows) = match terminal::size() {
            Ok((c, r)) if c > 0 && r > 0 => (c, r),
            _ => (100, 30),
        };
        let lines = frame(&snap, prev.as_ref(), cols as usize, rows as usize);
        let mut out = io::stdout();
        let drawn = (|| -> io::Result<()> {
            queue!(out, terminal::Clear(terminal::ClearType::All))?;
            for (i, line) in lines.iter().enumerate() {
                queue!(out, cursor::MoveTo(0, i as u16))?;
                out.write_all(line.as_bytes())?;
            }
            out.flush()
        })();
        if let Err(e) = drawn {
            break Err(format!("cannot draw: {e}"));
        }
        prev = Some(snap);
        let until = Instant::now() + interval;
        let mut quit = false;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match event::poll(left) {
                Ok(true) => {
                    if let Ok(Event::Key(key)) = event::read() {
                        if quits(&key) {
                            quit = true;
                            break;
                        }
                    }
                }
                Ok(false) => break,
                Err(e) => return Err(format!("cannot read the keyboard: {e}")),
            }
        }
        if quit {
            break Ok(());
        }
    };
    drop(screen);
    outcome
}

/// One screenful: a title, a header and the edges by rate, busiest first, cut to the screen.
fn frame(
    snap: &llbus::CountersSnapshot,
    prev: Option<&llbus::CountersSnapshot>,
    cols: usize,
    rows: usize,
) -> Vec<String> {
    let mut edges: Vec<(f64, &llbus::EdgeCounts)> = snap
        .edges
        .iter()
        .map(|e| (rate(e, snap, prev), e))
        .collect();
    edges.sort_by(|a, b| b.0.total_cmp(&a.0));
    let up = snap.heartbeat_unix_ns.saturating_sub(snap.started_unix_ns) as f64 / 1e9;
    let mut lines = vec![
        format!(
            "llbus top - bus {} (pid {}, user {}) - up {:.0}s - {} edges, {} actors - q quits",
            clean(&snap.bus),
            snap.pid,
            crate::text::user(snap.owner),
            up,
            snap.edges.len(),
            snap.actors.len()
        ),
        String::new(),
        format!(
            "{:>12} {:<18} {:<28} {:>12} {:>7} {:>9} {:>7}",
            if prev.is_some() { "RATE/S" } else { "AVG/S" },
            "TOPIC",
            "PUBLISHER -> SUBSCRIBER",
            "PUBLISHED",
            "DEPTH",
            "DROPPED",
            "LOST"
        ),
    ];
    for (r, e) in edges.iter().take(rows.saturating_sub(lines.len())) {
        lines.push(format!(
            "{:>12.0} {:<18} {:<28} {:>12} {:>7} {:>9} {:>7}",
            r,
            clean(&e.topic),
            format!("{} -> {}", clean(&e.publisher), clean(&e.subscriber)),
            e.published,
            e.in_flight,
            e.dropped,
            e.lost
        ));
    }
    for l in &mut lines {
        if l.len() > cols {
            let mut end = cols;
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            l.truncate(end);
        }
    }
    lines
}
