#!/usr/bin/env bash
# Pastes one benchmark run's tables and targets into README.md: each suite's Markdown table and
# `targets` block from the output of
#   cargo run --release -p benches -- all --markdown --plot docs/bench > docs/bench/all.md
# replace what stands between `<!-- bench:SUITE -->` and `<!-- /bench:SUITE -->` in README.md,
# the run's machine and seed replace what stands between `<!-- bench:run -->` and
# `<!-- /bench:run -->`, and every figure quoted in prose, written
# `<!-- cell:SUITE:IMPL:COLUMN -->VALUE<!-- /cell -->`, becomes the median of that cell of that
# suite's table (COLUMN as the table's header names it, before its unit), so the prose and the
# tables always come from one run. Usage: benches/update-readme.sh [OUTPUT] [README]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/bench/all.md}"
readme="${2:-README.md}"
[ -s "$out" ] || { echo "no benchmark output in $out: run the command above first" >&2; exit 1; }

# The block of SUITE in the output: from its table's header to the end of its targets block.
block() {
  awk -v suite="$1" '
    index($0, "== " suite ":") == 1 { in_suite = 1; next }
    in_suite && /^== / { exit }
    in_suite && /^\| impl/ { on = 1 }
    on { print }
    on && /^```$/ { exit }
  ' "$out"
}

run=$(sed -n 's/^llbus benchmarks on \(.*\); seed \([0-9]*\) .*/seed \2, \1/p' "$out" | head -n 1)
[ -n "$run" ] || { echo "$out does not start with the run's machine and seed" >&2; exit 1; }

tmp=$(mktemp)
cp "$readme" "$tmp"
for suite in ring bus udp ipc; do
  text=$(block "$suite")
  [ -n "$text" ] || { echo "no $suite table in $out" >&2; rm -f "$tmp"; exit 1; }
  grep -q "^<!-- bench:$suite -->$" "$tmp" || { echo "$readme has no <!-- bench:$suite --> marker" >&2; rm -f "$tmp"; exit 1; }
  BLOCK="$text" awk -v start="<!-- bench:$suite -->" -v end="<!-- /bench:$suite -->" '
    $0 == start { print; print ENVIRON["BLOCK"]; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }
  ' "$tmp" > "$tmp.new"
  mv "$tmp.new" "$tmp"
done
BLOCK="$run" awk -v start="<!-- bench:run -->" -v end="<!-- /bench:run -->" '
  { line = $0 }
  index(line, start) {
    pre = substr(line, 1, index(line, start) + length(start) - 1)
    post = substr(line, index(line, end))
    print pre ENVIRON["BLOCK"] post
    next
  }
  { print }
' "$tmp" > "$tmp.new"
mv "$tmp.new" "$tmp"
# Every prose figure: the median (the cell's first word) of SUITE's row IMPL, column COLUMN.
cell() {
  block "$1" | awk -F'|' -v impl="$2" -v column="$3" '
    /^\| impl/ {
      for (i = 2; i < NF; i++) { h = $i; gsub(/^ +| +$/, "", h); sub(/ \(.*/, "", h); col[h] = i }
      next
    }
    { name = $2; gsub(/^ +| +$/, "", name) }
    name == impl && (column in col) { split($col[column], w, " "); print w[1]; exit }
  '
}
for marker in $(grep -o '<!-- cell:[^ ]* -->' "$tmp" | sed 's/<!-- cell:\([^ ]*\) -->/\1/' | sort -u); do
  IFS=: read -r suite impl column <<<"$marker"
  value=$(cell "$suite" "$impl" "$column")
  [ -n "$value" ] && [ "$value" != "-" ] || { echo "no $column of $impl in the $suite table of $out" >&2; rm -f "$tmp"; exit 1; }
  MARK="<!-- cell:$marker -->" VALUE="$value" perl -pi -e \
    's/\Q$ENV{MARK}\E.*?<!-- \/cell -->/$ENV{MARK}$ENV{VALUE}<!-- \/cell -->/g' "$tmp"
done
mv "$tmp" "$readme"
echo "README.md: tables, targets, run line and prose figures replaced from $out ($run)"
