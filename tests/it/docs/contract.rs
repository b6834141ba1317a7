//! docs/CONTRACT.md lists every promise the docs make with the tests that keep it. This checks
//! that the list cannot rot: every test it names exists where it says, and every promise names
//! at least one test.

use std::path::{Path, PathBuf};

/// The workspace root (this package lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package has a parent directory")
        .to_path_buf()
}

/// Every `path::function` reference in backticks in `text`. The function may follow a module
/// path (`path.rs::module::function`, checked as `function` in `path.rs`) and may end in `()`.
fn references(text: &str) -> Vec<(String, String)> {
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let (path, rest) = span.split_once(".rs::")?;
            let rest = rest.strip_suffix("()").unwrap_or(rest);
            let ok = !path.is_empty() && rest.split("::").all(ident);
            let function = rest.rsplit("::").next()?;
            ok.then(|| (format!("{path}.rs"), function.to_owned()))
        })
        .collect()
}

/// The promises of `text`: each bullet ("- " at the start of a line) with the lines that continue
/// it.
fn promises(text: &str) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            all.extend(current.take());
            current = Some(rest.to_owned());
        } else if line.starts_with("  ") {
            if let Some(c) = current.as_mut() {
                c.push(' ');
                c.push_str(line.trim());
            }
        } else {
            all.extend(current.take());
        }
    }
    all.extend(current);
    all
}

#[test]
fn every_test_the_contract_names_exists_and_every_promise_names_one() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/CONTRACT.md")).expect("docs/CONTRACT.md");
    let refs = references(&text);
    assert!(refs.len() > 50, "only {} tests named", refs.len());
    let mut missing = Vec::new();
    for (path, function) in &refs {
        let source = match std::fs::read_to_string(root.join(path)) {
            Ok(source) => source,
            Err(e) => {
                missing.push(format!("{path}::{function} ({path}: {e})"));
                continue;
            }
        };
        let defined = [format!("fn {function}("), format!("fn {function}<")]
            .iter()
            .any(|d| source.contains(d.as_str()));
        if !defined {
            missing.push(format!("{path}::{function}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/CONTRACT.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
    let untested: Vec<String> = promises(&text)
        .into_iter()
        .filter(|p| references(p).is_empty())
        .collect();
    assert!(
        untested.is_empty(),
        "promises in docs/CONTRACT.md that name no test:\n{}",
        untested.join("\n")
    );
}

#[test]
fn the_checker_sees_a_missing_test_and_an_untested_promise() {
    let text = "- kept by `tests/bus_stop.rs::no_such_test_here`\n  and more\n- no test at all\n";
    assert_eq!(
        references(text),
        [(
            "tests/bus_stop.rs".to_owned(),
            "no_such_test_here".to_owned()
        )]
    );
    // A module path and a call's parentheses name the same test.
    for span in ["`a/b.rs::m::n::t`", "`a/b.rs::t()`"] {
        assert_eq!(
            references(span),
            [("a/b.rs".to_owned(), "t".to_owned())],
            "{span}"
        );
    }
    let p = promises(text);
    assert_eq!(p.len(), 2);
    assert!(references(&p[1]).is_empty());
}

/// Every backticked span of docs/CONTRACT.md that names a test (`path.rs::...`) is one the
/// checker above reads as a reference, so that none is skipped unchecked: a span such as
/// `tests/gone.rs::module::test` or `path.rs::test()` names a test as surely as the plain form.
#[test]
fn every_span_that_names_a_test_is_one_the_checker_reads() {
    let text = std::fs::read_to_string(root().join("docs/CONTRACT.md")).expect("docs/CONTRACT.md");
    let skipped: Vec<&str> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.contains(".rs::") && references(&format!("`{span}`")).is_empty())
        .collect();
    assert!(
        skipped.is_empty(),
        "docs/CONTRACT.md names tests the checker skips unchecked:\n{}",
        skipped.join("\n")
    );
}
