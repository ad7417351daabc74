#!/bin/sh
# End-to-end test of tend's plain-file protocol from POSIX sh. The tend
# binary only runs the watcher: requests are submitted with printf and mv,
# outcomes and states are read with cat and sed, as any shell client would.
#
# usage: sh scripts/e2e.sh PATH-TO-TEND     (make test runs it under dash and bash)
set -eu

tend=${1:?usage: e2e.sh PATH-TO-TEND}
case $tend in /*) ;; *) tend=$PWD/$tend ;; esac
work=$(mktemp -d)
root=$work/.tend
wpid=

cleanup() {
	if [ -n "$wpid" ]; then kill -INT "$wpid" 2>/dev/null || :; wait "$wpid" || :; fi
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "e2e.sh: FAIL: $*" >&2
	echo "--- watcher log:" >&2
	cat "$work/watcher.log" >&2 || :
	exit 1
}

# wait_until TEST-ARGS...: poll test(1) until it holds; fail after 60 s.
wait_until() {
	i=0
	until test "$@"; do
		i=$((i + 1))
		[ "$i" -lt 1200 ] || fail "timed out waiting for: test $*"
		sleep 0.05
	done
}

# submit NAME BODY: write a request whole under a hidden name, then rename
# it into the spool, so the watcher only ever sees it complete.
submit() {
	rm -f "$root/outcomes/$1"
	printf '%s\n' "$2" >"$root/spool/.$1.tmp"
	mv "$root/spool/.$1.tmp" "$root/spool/$1"
}

# outcome NAME: wait for the request's outcome and print it.
outcome() {
	wait_until -s "$root/outcomes/$1"
	cat "$root/outcomes/$1"
}

# field ID NAME: print a top-level field of a run's state.json. The state
# file has one top-level field a line, so sed is enough.
field() {
	sed -n "s/^  \"$2\": //p" "$root/runs/$1/state.json" | sed 's/,$//; s/^"//; s/"$//'
}

# wait_final ID: wait until the run has a final state; print it.
wait_final() {
	while :; do
		state=$(field "$1" state 2>/dev/null || :)
		case $state in completed | failed | canceled | timed_out) echo "$state"; return ;; esac
		i=${i:-0}; i=$((i + 1))
		[ "$i" -lt 1200 ] || fail "run $1 never finished (state: $state)"
		sleep 0.05
	done
}

cd "$work"
"$tend" --root "$root" watch 2>"$work/watcher.log" &
wpid=$!
wait_until -f "$root/watcher.pid"

# 1. Start, wait, read the outcome, the exit code and the output.
submit a.start 'echo hi; exit 3'
[ "$(outcome a.start)" = accepted ] || fail "a.start: outcome $(cat "$root/outcomes/a.start")"
i=0
[ "$(wait_final a)" = failed ] || fail "run a: $(field a state)"
[ "$(field a exit_code)" = 3 ] || fail "run a: exit code '$(field a exit_code)'"
[ "$(cat "$root/runs/a/stdout")" = hi ] || fail "run a: stdout"

# 2. Cancel: the run and its background child end; cancel again is safe.
submit b.start 'sleep 100 & echo $! > kid; wait'
i=0
until [ "$(field b state 2>/dev/null || :)" = running ] && [ -s kid ]; do
	i=$((i + 1)); [ "$i" -lt 1200 ] || fail "run b never ran"; sleep 0.05
done
submit b.cancel ''
[ "$(outcome b.cancel)" = canceled ] || fail "b.cancel: $(cat "$root/outcomes/b.cancel")"
[ "$(field b state)" = canceled ] || fail "run b: $(field b state)"
kill -0 "$(cat kid)" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$(cat kid)/stat")" != Z ] && fail "b's child survived"
submit b.cancel ''
case $(outcome b.cancel) in already_finished*) ;; *) fail "second b.cancel: $(cat "$root/outcomes/b.cancel")" ;; esac

# 3. Unknown IDs and bad names get answers too.
submit nobody.cancel ''
case $(outcome nobody.cancel) in not_found*) ;; *) fail "nobody.cancel" ;; esac
printf 'true\n' >"$root/spool/c.strat"
wait_until -f "$root/rejected/c.strat.error"
grep -q 'unknown verb "strat"' "$root/rejected/c.strat.error" || fail "c.strat.error: $(cat "$root/rejected/c.strat.error")"

echo "e2e.sh: 4 passed, 0 failed"
