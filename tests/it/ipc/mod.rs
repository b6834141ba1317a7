//! llbus-ipc as a user meets it, across crates: the examples with `--transport shm` run as
//! processes, and the `llbus` command against counters files other local processes plant.

mod counters;
mod examples;
