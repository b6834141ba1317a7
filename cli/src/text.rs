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
}
