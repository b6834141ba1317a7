//! The checks that keep the documents true: the contract names a test for each promise, links
//! resolve, and the documented limits are the code's defaults.

/// docs/CONTRACT.md: every test it names exists, every promise names one.
mod contract;
/// The limits and defaults of SECURITY.md, docs/PROTOCOL.md and docs/IPC.md.
mod defaults;
/// Relative links and anchors of the Markdown files; README's snippets as doctests.
mod links;
