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

# wait_log PATTERN: wait until the watcher has logged a line matching PATTERN.
wait_log() {
	i=0
	until grep -q "$1" "$work/watcher.log"; do
		i=$((i + 1))
		[ "$i" -lt 1200 ] || fail "timed out waiting for the watcher to log: $1"
		sleep 0.05
	done
}

# The client library under test: every request below goes through it.
. "$(dirname "$0")/tend.sh"
TEND_ROOT=$root
TEND_SH_TIMEOUT=60
export TEND_ROOT

cd "$work"
"$tend" --root "$root" watch 2>"$work/watcher.log" &
wpid=$!
wait_until -f "$root/watcher.pid"

# 1. Start, wait, read the outcome, the exit code and the output.
[ "$(tend_start a 'echo hi; exit 3')" = accepted ] || fail "a.start: outcome $(cat "$root/outcomes/a.start")"
rc=0; tend_wait a || rc=$?
[ "$rc" = 3 ] || fail "tend_wait a returned $rc, want 3"
[ "$(tend_state a)" = failed ] || fail "run a: $(tend_state a)"
[ "$(tend_field a exit_code)" = 3 ] || fail "run a: exit code '$(tend_field a exit_code)'"
# An array or an object comes whole, as JSON on one line.
[ "$(tend_field a command)" = '["/bin/sh","-c","echo hi; exit 3"]' ] || fail "run a: command '$(tend_field a command)'"
tend_control a label 'k=v' >/dev/null || fail "label a"
[ "$(tend_field a labels)" = '{"k":"v"}' ] || fail "run a: labels '$(tend_field a labels)'"
[ "$(tend_field a id)" = a ] || fail "run a: id '$(tend_field a id)'"
# A string comes as its text, JSON's escapes undone (a held run's reason
# quotes its request); one of a character beyond ASCII stays.
mkdir -p "$work/fake/runs/x"
printf '{\n  "reason": "(\\"grace\\": \\"5 s\\") a \\u0026\\u0026 b\\\\u0026\\tc \\u2028"\n}\n' > "$work/fake/runs/x/state.json"
want=$(printf '("grace": "5 s") a && b\\u0026\tc \\u2028')
[ "$(TEND_ROOT=$work/fake tend_field x reason)" = "$want" ] || fail "tend_field x reason: '$(TEND_ROOT=$work/fake tend_field x reason)', want '$want'"
[ "$(cat "$root/runs/a/stdout")" = hi ] || fail "run a: stdout"

# 2. Cancel: the run and its background child end; cancel again is safe,
# and a plain (untagged) request name works as well.
tend_start b 'sleep 100 & echo $! > kid; wait' >/dev/null || fail "b.start"
wait_until -s kid
[ "$(tend_cancel b 2s)" = canceled ] || fail "tend_cancel b"
[ "$(tend_state b)" = canceled ] || fail "run b: $(tend_state b)"
rc=0; tend_wait b || rc=$?
[ "$rc" = 143 ] || fail "tend_wait b returned $rc, want 143 (SIGTERM)"
kill -0 "$(cat kid)" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$(cat kid)/stat")" != Z ] && fail "b's child survived"
rc=0; tend_cancel b >/dev/null || rc=$?
[ "$rc" = 5 ] || fail "second tend_cancel b returned $rc, want 5"
tend_submit b.cancel ''
case $(tend_outcome b.cancel) in already_finished*) ;; *) fail "b.cancel: $(cat "$root/outcomes/b.cancel")" ;; esac

# A run canceled or timed out is never 0, whatever its process exited
# with (it caught the SIGTERM): tend_wait x && deploy must not go on, as
# with tend wait. One canceled before it ran is 127; one killed by a
# signal beyond the common ones, 128+N.
tend_start tr 'trap "exit 0" TERM; echo $$ > tr.pid; sleep 100 & wait' >/dev/null || fail "tr.start"
wait_until -s tr.pid
[ "$(tend_cancel tr 5s)" = canceled ] || fail "tend_cancel tr"
rc=0; tend_wait tr || rc=$?
[ "$rc" = 1 ] || fail "tend_wait tr (canceled, exited 0) returned $rc, want 1"
TEND_SH_NOT_BEFORE=1h tend_start qd 'echo x' >/dev/null || fail "qd.start"
[ "$(tend_cancel qd)" = canceled ] || fail "tend_cancel qd"
rc=0; tend_wait qd || rc=$?
[ "$rc" = 127 ] || fail "tend_wait qd (canceled before it ran) returned $rc, want 127"
tend_start sy 'kill -SYS $$' >/dev/null || fail "sy.start"
rc=0; tend_wait sy || rc=$?
[ "$rc" = 159 ] || fail "tend_wait sy (SIGSYS) returned $rc, want 159"
# An ID tend refuses is said so at once, with 2: no answer would come.
for id in 'bad id' café .x "$(printf '%065d' 0)"; do
	rc=0; (TEND_SH_TIMEOUT=30; tend_start "$id" true) 2>/dev/null || rc=$?
	[ "$rc" = 2 ] || fail "tend_start '$id' returned $rc, want 2"
	rc=0; (TEND_SH_TIMEOUT=30; tend_cancel "$id") 2>/dev/null || rc=$?
	[ "$rc" = 2 ] || fail "tend_cancel '$id' returned $rc, want 2"
done
[ -z "$(ls "$root/spool")" ] || fail "requests with bad IDs were sent: $(ls "$root/spool")"
(tend_start "$(printf '%064d' 0)" true >/dev/null) || fail "a 64-byte ID was refused"

# 3. Unknown IDs and bad names get answers too.
rc=0; tend_cancel nobody >/dev/null || rc=$?
[ "$rc" = 3 ] || fail "tend_cancel nobody returned $rc, want 3"
printf 'true\n' >"$root/spool/c.strat"
wait_until -f "$root/rejected/c.strat.error"
grep -q 'unknown verb "strat"' "$root/rejected/c.strat.error" || fail "c.strat.error: $(cat "$root/rejected/c.strat.error")"

# 4. Other control verbs through the library.
tend_start d 'echo $$ > d.pid; while :; do sleep 0.05; done' >/dev/null || fail "d.start"
wait_until -s d.pid
[ "$(tend_control d pause)" = paused ] || fail "pause d"
[ "$(tend_state d)" = paused ] || fail "run d: $(tend_state d)"
[ "$(tend_control d resume)" = resumed ] || fail "resume d"
[ "$(tend_control d label 'owner=sh')" = "updated: rev 5" ] || fail "label d: $(tend_field d rev)"
[ "$(tend_cancel d 1s)" = canceled ] || fail "cancel d"
# Outcomes that carried nothing out return the CLI's codes; a verb that
# is none is refused at once.
rc=0; tend_control d pause >/dev/null || rc=$?
[ "$rc" = 4 ] || fail "pause of ended d returned $rc, want 4 (not_running)"
rc=0; tend_control d bogus 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "tend_control d bogus returned $rc, want 2"

# With $TEND_SESSION, as the CLI, the run is that session's.
(TEND_SESSION=sh-7 tend_start sess 'true' >/dev/null) || fail "tend_start sess"
tend_wait sess || fail "tend_wait sess"
[ "$(tend_field sess session)" = sh-7 ] || fail "run sess is in session '$(tend_field sess session)', want sh-7"

# tend_wait of a run that is not there says so at once, as tend wait does.
rc=0; (TEND_SH_TIMEOUT=30; tend_wait no-such-run) 2>/dev/null || rc=$?
[ "$rc" = 3 ] || fail "tend_wait no-such-run returned $rc, want 3"

# 5. tend_wait gives up after $TEND_SH_TIMEOUT seconds with 124, as tend
# wait --timeout does, and the run goes on.
tend_start e 'until [ -e go-e ]; do sleep 0.05; done' >/dev/null || fail "e.start"
rc=0; (TEND_SH_TIMEOUT=1; tend_wait e) 2>/dev/null || rc=$?
[ "$rc" = 124 ] || fail "tend_wait e returned $rc after its timeout, want 124"
[ "$(tend_state e)" = running ] || fail "run e after the timeout: $(tend_state e)"
touch go-e
rc=0; tend_wait e || rc=$?
[ "$rc" = 0 ] || fail "tend_wait e returned $rc, want 0"

# 6. A queued run's request submitted again is an edit of it: accepted,
# and what runs.
printf '{"max_running": 1}\n' >"$root/config.json"
wait_log 'config: max_running 1,'
tend_start f 'until [ -e go-f ]; do sleep 0.05; done' >/dev/null || fail "f.start"
tend_start g 'echo old > g.out' >/dev/null || fail "g.start"
[ "$(tend_state g)" = queued ] || fail "run g: $(tend_state g), want queued"
o=$(tend_start g 'echo new > g.out') || fail "g.start again: $o"
[ "$o" = "accepted: edited while queued (rev 2)" ] || fail "g.start again: $o"
touch go-f
tend_wait g || fail "tend_wait g"
[ "$(cat g.out)" = new ] || fail "run g wrote $(cat g.out), want new"

# 7. Runs that wait for others: TEND_SH_AFTER names them, and the command
# goes through JSON whole, quotes and all.
tend_start h 'until [ -e go-h ]; do sleep 0.05; done; exit 2' >/dev/null || fail "h.start"
TEND_SH_AFTER="h:ended" tend_start i 'printf "%s\n" "it \"ran\"" > i.out' >/dev/null || fail "i.start"
[ "$(tend_state i)" = queued ] || fail "run i: $(tend_state i), want queued"
TEND_SH_AFTER="h" tend_start j 'echo j > j.out' >/dev/null || fail "j.start"
touch go-h
tend_wait i || fail "tend_wait i"
[ "$(cat i.out)" = 'it "ran"' ] || fail "run i wrote $(cat i.out)"
rc=0; tend_wait j || rc=$?
[ "$(tend_state j)" = canceled ] || fail "run j: $(tend_state j), want canceled (h failed)"
[ ! -e j.out ] || fail "run j ran"

# 8. One request cancels many: by label, then all that are left.
printf '{"max_running": 4}\n' >"$root/config.json"
wait_log 'config: max_running 4,'
tend_submit k1.start '{"command": "exec sleep 1000", "labels": {"team": "x"}}'
tend_submit k2.start '{"command": "exec sleep 1000", "labels": {"team": "x"}}'
tend_start k3 'exec sleep 1000' >/dev/null || fail "k3.start"
wait_until "$(tend_state k1)$(tend_state k2)$(tend_state k3)" = runningrunningrunning
out=$(tend_cancel_all team=x) || fail "tend_cancel_all team=x: $out"
[ "$out" = "$(printf 'selected: 2\nk1: canceled\nk2: canceled')" ] || fail "tend_cancel_all team=x printed: $out"
[ "$(tend_state k3)" = running ] || fail "run k3: $(tend_state k3), want running"
out=$(tend_cancel_all) || fail "tend_cancel_all: $out"
printf '%s\n' "$out" | grep -qx 'k3: canceled' || fail "tend_cancel_all printed: $out"
out=$(tend_select cancel '') && fail "an empty selector request was carried out: $out"
case $out in "rejected: "*) ;; *) fail "an empty selector request: $out" ;; esac

echo "e2e.sh: 8 passed, 0 failed"
