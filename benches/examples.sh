#!/usr/bin/env bash
# The user's setting: the `publisher` and `subscriber` examples as two processes on this host,
# at a fixed rate, for every idle strategy, with each process's bridge and actor on one thread
# (the examples' default) and split on two (`--split`). Rounds alternate the configurations so
# that a noisy neighbour hits them all alike; the table shows the median of the rounds' one-way
# p50 and p99 (as the subscriber reports them).
#
#   benches/examples.sh [ROUNDS] [RATE] [COUNT]      (defaults 3, 5000, 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
rate=${2:-5000}
count=${3:-20000}
cargo build --release -q -p examples --example publisher --example subscriber
bin=target/release/examples
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=7400
configs=("spin" "backoff" "park" "spin --split" "backoff --split" "park --split")
for ((r = 1; r <= rounds; r++)); do
    for c in "${configs[@]}"; do
        read -r idle split <<<"$c"
        port=$((port + 2))
        # shellcheck disable=SC2086
        "$bin/publisher" --bind "127.0.0.1:$port" --rate "$rate" --idle "$idle" $split \
            --wait-subscriber >/dev/null 2>&1 &
        pub=$!
        sleep 0.3
        # shellcheck disable=SC2086
        line=$("$bin/subscriber" --bind "127.0.0.1:$((port + 1))" --publisher "127.0.0.1:$port" \
            --count "$count" --timeout-s 60 --idle "$idle" $split | grep '^RESULT' || true)
        kill -INT "$pub" 2>/dev/null || true
        wait "$pub" 2>/dev/null || true
        p50=$(grep -o 'p50_us=[0-9a-z]*' <<<"$line" | cut -d= -f2)
        p99=$(grep -o 'p99_us=[0-9a-z]*' <<<"$line" | cut -d= -f2)
        echo "$p50 $p99" >>"$out/${idle}${split:+-split}"
    done
done
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "na"; else print a[int((NR + 1) / 2)]}'; }
echo "| idle | one thread per process (default): p50 / p99 µs | split (--split): p50 / p99 µs |"
echo "|---|---:|---:|"
for idle in spin backoff park; do
    cell() { echo "$(cut -d' ' -f1 "$out/$1" | median) / $(cut -d' ' -f2 "$out/$1" | median)"; }
    echo "| \`$idle\` | $(cell "$idle") | $(cell "$idle-split") |"
done
echo
echo "($rounds alternating rounds, $count messages at $rate/s each, $(nproc) CPUs; medians)"
