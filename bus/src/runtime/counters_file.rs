//! The bus's side of its live counters file (the file itself is `crate::counters`): the
//! builder's options, and the source that reads the running bus's counters where they are.

use std::path::Path;

use super::builder::BusBuilder;
pub(super) use crate::counters::CountersFile;
use crate::counters::{
    call_values, edge_values, policy_name, Source, Visitor, RECORD_ACTOR, RECORD_CALL, RECORD_EDGE,
    RECORD_METRIC,
};

impl BusBuilder {
    /// Names the bus (default: the program's file name), for its counters file and the
    /// `llbus` command.
    pub fn name(&mut self, name: &str) -> &mut Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Whether the running bus publishes its counters in a file for other processes (default
    /// yes): see [`counters_dir`](crate::counters_dir). If the file cannot be made the bus runs all the same, and a
    /// warning is logged.
    pub fn counters_file(&mut self, enabled: bool) -> &mut Self {
        self.counters_file = Some(enabled);
        self
    }
}

/// The default name of a bus: the program's file name.
pub(super) fn default_bus_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "bus".to_owned())
}

/// The live counters of a running bus: read where they are, with no allocation (the named
/// metrics under the lock they are registered with, which no message path takes).
pub(crate) struct Live {
    pub(crate) edges: Vec<super::start::EdgeInfo>,
    pub(crate) actors: Vec<super::start::ActorInfo>,
    pub(crate) calls: Vec<super::start::CallInfo>,
}

impl Source for Live {
    fn visit(&self, rec: &mut Visitor<'_>) {
        for e in &self.edges {
            let snap = e.counters.snapshot();
            let report = super::running::edge_report_of(e, &snap, String::new(), String::new());
            let label = [
                e.topic.as_str(),
                &e.publisher,
                &e.subscriber,
                policy_name(e.policy),
            ];
            rec(RECORD_EDGE, &edge_values(&report), &label);
        }
        for a in &self.actors {
            let c = &a.counters;
            let values = [
                c.handled.get(),
                c.ticks.get(),
                c.idle_rounds.get(),
                c.restarts.get(),
                c.panics.get(),
            ];
            rec(RECORD_ACTOR, &values, &[&a.name, &a.thread]);
            let named = c
                .named
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (name, m) in named.iter() {
                rec(RECORD_METRIC, &[m.get()], &[&a.name, name]);
            }
            drop(named);
            for c in self.calls.iter().filter(|c| c.caller == a.name) {
                let report = super::running::call_report_of(c, false);
                let label = [c.caller.as_str(), c.service.as_str(), &c.server];
                rec(RECORD_CALL, &call_values(&report), &label);
            }
        }
    }
}
