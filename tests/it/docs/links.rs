//! Every relative link in README.md, CHANGELOG.md, SECURITY.md and docs/*.md points at a file of
//! the repository, and every `#anchor` at a heading of its target, so that the links work from a
//! fresh clone and cannot rot.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The workspace root (this package lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package has a parent directory")
        .to_path_buf()
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The link targets of `text`: `[label](target)` and `src="target"`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        for (open, close) in [("](", ')'), ("src=\"", '"')] {
            let mut rest = line;
            while let Some(at) = rest.find(open) {
                rest = &rest[at + open.len()..];
                if let Some(end) = rest.find(close) {
                    out.push(rest[..end].to_owned());
                    rest = &rest[end..];
                }
            }
        }
    }
    out
}

/// The anchors GitHub gives the headings of `text`: lower case, punctuation other than `-` and
/// `_` removed, spaces made `-`, and `-1`, `-2`, ... after a repeated one.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// What is wrong with the relative links of the Markdown file `file`, one line each.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut broken = Vec::new();
    for link in links(&text) {
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match link.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (link.as_str(), None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !target.exists() {
            broken.push(format!("{}: {link}: no such file", file.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let heads = anchors(&std::fs::read_to_string(&target).unwrap_or_default());
            if !heads.contains(anchor) {
                broken.push(format!("{}: {link}: no such heading", file.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_docs_points_at_a_file_and_heading_that_exist() {
    let root = root();
    let mut files: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "SECURITY.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/ is readable");
    files.extend(
        docs.filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in &files {
        assert!(file.exists(), "{} is missing", file.display());
        checked += links(&std::fs::read_to_string(file).unwrap_or_default()).len();
        broken.extend(broken_links(file));
    }
    assert!(
        checked >= 10,
        "only {checked} links found: is the parser still right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_checker_sees_a_missing_file_and_a_missing_heading() {
    let dir = std::env::temp_dir().join(format!("llbus-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("a.md");
    let text = "# A title\n## Two words, and more!\n[ok](#two-words-and-more) [ok](a.md#a-title)\n\
                [bad](#no-such) [bad](missing.md) <img src=\"gone.png\">\n```\n[in code](nowhere.md)\n```\n";
    std::fs::write(&file, text).expect("write a.md");
    let broken = broken_links(&file);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].ends_with("#no-such: no such heading"),
        "{broken:#?}"
    );
    assert!(
        broken[1].ends_with("missing.md: no such file"),
        "{broken:#?}"
    );
    assert!(broken[2].ends_with("gone.png: no such file"), "{broken:#?}");
}

#[test]
fn every_rust_snippet_of_the_readme_runs_as_a_doctest() {
    let root = root();
    let lib = std::fs::read_to_string(root.join("tests/src/lib.rs")).expect("tests/src/lib.rs");
    assert!(
        lib.contains("#[doc = include_str!(\"../../README.md\")]"),
        "the tests crate no longer includes README.md as doctests"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let fences: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("```"))
        .step_by(2)
        .collect();
    // rustdoc tests a block whose tags are empty or are all Rust's (`rust`, `ignore`, ...).
    let rust_tag = |t: &str| {
        let t = t.trim();
        t.is_empty()
            || t.starts_with("edition")
            || ["rust", "ignore", "no_run", "should_panic", "compile_fail"].contains(&t)
    };
    let rust: Vec<&&str> = fences
        .iter()
        .filter(|f| f.split(',').all(rust_tag))
        .collect();
    assert!(rust.len() >= 5, "only {} Rust snippets", rust.len());
    for fence in rust {
        assert!(
            !["ignore", "no_run", "compile_fail"]
                .iter()
                .any(|a| fence.contains(a)),
            "a README snippet that does not run: ```{fence}"
        );
    }
}
