//! Making untrusted text safe to print: bus, topic, actor and metric names and file paths come
//! from counters files that any process of the bus's user wrote, and are shown on a terminal.

use std::borrow::Cow;

/// Whether `c` could change what a terminal shows beyond itself: a control character (C0,
/// DEL, C1: escape sequences start with ESC or CSI) or a bidirectional override or isolate
/// (which reorders what follows).
pub(crate) fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character that could act on a terminal written as an escape (`\x1b`,
/// `\u{202e}`), and backslashes doubled so that an escape cannot be faked. Borrowed when there
/// is nothing to escape.
pub(crate) fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| unsafe_char(c) || c == '\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if unsafe_char(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `value` as one line of JSON, made safe to print: serde_json escapes only C0 controls, so
/// every other character that could act on a terminal (DEL, C1, bidirectional overrides) is
/// written as a `\uXXXX` escape too. Those can only occur inside strings (JSON's own syntax is
/// printable ASCII), where the escape stands for the same character: the value is unchanged.
pub(crate) fn json(value: &serde_json::Value) -> String {
    json_text(value.to_string())
}

/// JSON text (`raw`, from serde_json) made safe to print, as [`json`] does.
pub(crate) fn json_text(raw: String) -> String {
    if !raw.chars().any(unsafe_char) {
        return raw;
    }
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        if unsafe_char(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A path, made safe to print.
pub(crate) fn path(p: &std::path::Path) -> String {
    clean(&p.display().to_string()).into_owned()
}

/// A user's name from `/etc/passwd`, else the number.
pub(crate) fn user(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let _ = f.next()?;
                (f.next()? == uid.to_string()).then(|| clean(name).into_owned())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped_and_nothing_else() {
        assert_eq!(clean("md.quote"), "md.quote");
        assert!(matches!(clean("é ü"), Cow::Borrowed(_)));
        assert_eq!(clean("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(clean("\u{9b}31m"), "\\x9b31m");
        assert_eq!(clean("x\u{202e}y\u{2066}"), "x\\u{202e}y\\u{2066}");
        assert_eq!(clean("tab\there\nnl\x7f"), "tab\\x09here\\x0anl\\x7f");
        // A literal backslash cannot pass for an escape.
        assert_eq!(clean("\\x1b"), "\\\\x1b");
    }

    #[test]
    fn json_escapes_every_terminal_control_and_keeps_the_value() {
        let hostile = "b\u{9b}2J\u{202e}\x7f\x1b\u{2066}\\ é";
        let value = serde_json::json!({ "bus": hostile, "n": 1 });
        let printed = json(&value);
        assert!(!printed.chars().any(unsafe_char), "{printed:?}");
        assert!(
            printed.contains("\\u009b") && printed.contains("\\u202e"),
            "{printed}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&printed).ok(),
            Some(value)
        );
        // Nothing to escape: serde_json's own text.
        let plain = serde_json::json!(["md.quote", "é"]);
        assert_eq!(json(&plain), plain.to_string());
    }
}
