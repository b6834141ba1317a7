//! Finding buses: the counters files on this host, and the one a command names.

use std::path::{Path, PathBuf};

use llbus::CountersSnapshot;

/// One counters file and what it says.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    pub(crate) snapshot: Option<CountersSnapshot>,
    /// Why it could not be read, if it could not.
    pub(crate) error: Option<String>,
    pub(crate) live: bool,
}

/// Reads the file at `path`, with the error as text.
pub(crate) fn read(path: &Path) -> Result<CountersSnapshot, String> {
    llbus::read_counters_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every counters file on this host.
pub(crate) fn all() -> Result<Vec<Found>, String> {
    let files = llbus::counters_files().map_err(|e| {
        format!(
            "cannot list the counters directory {}: {e}",
            llbus::counters_dir().display()
        )
    })?;
    Ok(files
        .into_iter()
        .map(|path| match llbus::read_counters_file(&path) {
            Ok(s) => Found {
                path,
                live: s.is_live(),
                snapshot: Some(s),
                error: None,
            },
            Err(e) => Found {
                path,
                snapshot: None,
                error: Some(e.to_string()),
                live: false,
            },
        })
        .collect())
}

/// The bus `which` names (a counters file, a name or a process id), or the only live bus.
pub(crate) fn one(which: Option<&str>) -> Result<Found, String> {
    if let Some(w) = which {
        let p = Path::new(w);
        if w.contains('/') || p.is_file() {
            let s = read(p)?;
            return Ok(Found {
                path: p.to_path_buf(),
                live: s.is_live(),
                snapshot: Some(s),
                error: None,
            });
        }
    }
    let live: Vec<Found> = all()?.into_iter().filter(|f| f.live).collect();
    let names = |v: &[Found]| -> String {
        v.iter()
            .filter_map(|f| {
                f.snapshot
                    .as_ref()
                    .map(|s| format!("{} (pid {})", s.bus, s.pid))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut matching: Vec<Found> = match which {
        None => live,
        Some(w) => {
            let all_live = names(&live);
            let m: Vec<Found> = live
                .into_iter()
                .filter(|f| {
                    f.snapshot
                        .as_ref()
                        .is_some_and(|s| s.bus == w || s.pid.to_string() == w)
                        || f.path.file_stem().and_then(|s| s.to_str()) == Some(w)
                })
                .collect();
            if m.is_empty() {
                return Err(format!(
                    "no running bus is called '{w}' or has that process id; running: {}",
                    if all_live.is_empty() {
                        "none".to_owned()
                    } else {
                        all_live
                    }
                ));
            }
            m
        }
    };
    match matching.len() {
        0 => Err(format!(
            "no llbus bus is running on this host (no live counters file in {})",
            llbus::counters_dir().display()
        )),
        1 => Ok(matching.remove(0)),
        _ => Err(format!(
            "{} buses match: name one by its process id or counters file: {}",
            matching.len(),
            names(&matching)
        )),
    }
}
