#!/usr/bin/env bash
# Runs every cargo-fuzz target of llbus-net (every one `cargo fuzz list` prints) for SECONDS
# each (default 30) and fails on the first crash, leak or timeout, and on a target that ran
# no input at all (libFuzzer's final `stat::number_of_executed_units` 0 or missing: a target
# that exits at once, or a run that never started, is not a pass). Usage: fuzz/run.sh [SECONDS]
#
# Needs the nightly toolchain and cargo-fuzz; installs both if missing. Each target starts from
# the committed seeds (fuzz/seeds/TARGET: the golden vectors of docs/PROTOCOL.md) plus the
# corpus earlier runs left in fuzz/corpus/TARGET (not committed). A crash leaves its input in
# fuzz/artifacts/TARGET/; turn it into a regression test in bus-net before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
each="${1:-30}"
case "$each" in
  '' | *[!0-9]*) echo "usage: fuzz/run.sh [SECONDS per target]" >&2; exit 2 ;;
esac

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

targets=$(cargo +nightly fuzz list)
if [ -z "$targets" ]; then
  echo "cargo fuzz list printed no target: nothing would be fuzzed" >&2
  exit 1
fi
cargo +nightly fuzz build

summary=()
for target in $targets; do
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  log="fuzz/artifacts/$target.log"
  mkdir -p fuzz/artifacts
  echo "=== fuzz $target for ${each}s"
  if ! cargo +nightly fuzz run "$target" "$corpus" "fuzz/seeds/$target" -- \
      -max_total_time="$each" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz target $target crashed: input in fuzz/artifacts/$target/, log in $log" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || true)
  if [ -z "$runs" ] || [ "$runs" -eq 0 ]; then
    tail -n 60 "$log" >&2
    echo "fuzz target $target ran ${runs:-no} inputs (no stat::number_of_executed_units > 0 in $log): failing" >&2
    exit 1
  fi
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || echo '?')
  summary+=("$target: $runs executions, coverage $cov, no crash")
done

echo "=== fuzz summary (${each}s per target)"
printf '%s\n' "${summary[@]}"
