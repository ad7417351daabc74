#!/bin/sh
# bench-memory.sh TEND [N]: what supervision costs in memory per live run.
#
# Starts a watcher (keeper + watcher) on a scratch root and measures the
# PSS of both with N, then 2N, long runs running. The growth per run is
# tend's own cost (the runs' processes are not counted). It is printed against the budget (64 KiB) and against a
# baseline measured in the same run: the PSS of one idle `sleep`, the
# cheapest process a per-run monitor could possibly be.
set -eu
tend=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
n=${2:-200}
work=$(mktemp -d)
root=$work/.tend
export TEND_NO_START=1

cleanup() {
	"$tend" --root "$root" down >/dev/null 2>&1 || :
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# pss PID...: the sum of their proportional set sizes, in KiB.
pss() {
	total=0
	for p in "$@"; do
		kb=$(sed -n 's/^Pss: *\([0-9]*\) kB/\1/p' "/proc/$p/smaps_rollup")
		total=$((total + kb))
	done
	echo "$total"
}

# submit ID BODY: drop a start request the safe way.
submit() {
	printf '%s\n' "$2" >"$root/spool/.$1.tmp"
	mv "$root/spool/.$1.tmp" "$root/spool/$1.start"
}

# count STATE: how many runs are in STATE.
count() {
	grep -l "\"state\": \"$1\"" "$root"/runs/*/state.json 2>/dev/null | wc -l
}

wait_count() {
	tries=0
	until [ "$(count "$1")" -ge "$2" ]; do
		tries=$((tries + 1))
		[ "$tries" -lt 6000 ] || { echo "bench-memory: timed out waiting for $2 runs $1" >&2; exit 1; }
		sleep 0.05
	done
}

"$tend" --root "$root" up >/dev/null
watcher=$(cat "$root/watcher.pid")
keeper=$(cat "$root/keeper.pid")

# The first N live runs warm the Go heaps up to their working size; the
# cost per run is the growth from N to 2N live runs, so garbage left from
# earlier work does not count either way.
i=0
while [ $i -lt "$n" ]; do submit "a$i" 'exec sleep 600'; i=$((i + 1)); done
wait_count running "$n"
sleep 1
half=$(pss "$keeper" "$watcher")

i=0
while [ $i -lt "$n" ]; do submit "b$i" 'exec sleep 600'; i=$((i + 1)); done
wait_count running $((2 * n))
sleep 1
full=$(pss "$keeper" "$watcher")
one=$(pss "$(sed -n 's/^  "pid": \([0-9]*\).*/\1/p' "$root/runs/a0/state.json")")

per=$(( (full - half) * 1000 / n ))  # in thousandths of a KiB
printf 'memory: keeper + watcher with %d live runs: %d KiB PSS; with %d: %d KiB\n' "$n" "$half" $((2 * n)) "$full"
printf 'memory: per live run: %s KiB PSS = %s of the 64 KiB budget = %s x one idle sleep process (%d KiB)\n' \
	"$(awk "BEGIN{printf \"%.1f\", $per/1000}")" \
	"$(awk "BEGIN{printf \"%.3f\", $per/1000/64}")" \
	"$(awk "BEGIN{printf \"%.3f\", $per/1000/$one}")" "$one"
