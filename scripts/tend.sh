# tend.sh: a POSIX sh library for tend's plain-file protocol. Source it;
# it needs no tend binary, only a watcher running on the root (someone ran
# `tend up`) and the usual tools (cat, sed, mv, sleep).
#
#   . scripts/tend.sh
#   tend_start build 'make -j8' || exit
#   tend_wait build; echo "build exited $?"
#   tend_cancel web; tend_state web
#
# The root is $TEND_ROOT, else ./.tend. Every function returns non-zero on
# failure and says why on stderr, prefixed with "tend.sh:". Waits poll every
# 50 ms (sh has no inotify) and give up after $TEND_SH_TIMEOUT seconds (a
# whole number, default 3600, more than 999999999 taken as that; anything
# else is refused, returning 2);
# tend_wait then returns 124, as tend wait --timeout does.

tend_root() {
	printf '%s\n' "${TEND_ROOT:-./.tend}"
}

# _tend_tag: print a new request tag: random, so that no other user of a
# shared root can tell it before the request is in the spool (and plant a
# file in the way of its claim).
_tend_tag() {
	printf 'sh%s\n' "$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
}

# tend_outcomes: print the directory of this user's answers: outcomes/,
# or in a root of another user's (a shared root) outcomes/<uid>/, which
# only the watcher writes, so that no other user's request is ever
# answered there.
tend_outcomes() {
	_u=$(id -u)
	_o=$(ls -dnL "$(tend_root)" 2>/dev/null | awk '{ print $3 }')
	if [ "$_u" = 0 ] || [ "$_u" = "$_o" ]; then
		printf '%s\n' "$(tend_root)/outcomes"
	else
		printf '%s\n' "$(tend_root)/outcomes/$_u"
	fi
}

# tend_submit NAME BODY: write request NAME (<id>.<verb>) whole under a
# hidden name, then rename it into the spool, so the watcher only ever sees
# it complete. A previous outcome of the same name is removed first; where
# it may not be (a member's outcomes/<uid>/ of a shared root is the
# watcher's), its inode is noted, for tend_outcome to tell it from the
# answer to this request, which replaces it atomically.
tend_submit() {
	_r=$(tend_root)
	[ -d "$_r/spool" ] || { echo "tend.sh: no spool in $_r (is it a tend root?)" >&2; return 1; }
	_tend_old_name=$1
	_tend_old_ino=
	_tend_req_ino=
	rm -f "$(tend_outcomes)/$1" 2>/dev/null ||
		_tend_old_ino=$(_tend_ino "$(tend_outcomes)/$1")
	# The hidden name is made anew, 0600, by mktemp (O_EXCL): in a shared
	# root's spool, which every member may write in, a name one could
	# foretell (the ID and $$) could be another member's link, planted
	# first, through which this user (root, say) would write over any
	# file it may write. Once made it is this user's: the spool is
	# sticky, so nobody else may rename or remove it.
	if ! _t=$(mktemp "$_r/spool/.$1.sh.XXXXXXXXXX" 2>&1); then
		echo "tend.sh: cannot write request $1 in $_r/spool: ${_t##*: }" >&2
		return 1
	fi
	# A write that fails (a full disk) leaves no hidden file behind: no
	# watcher, and no fsck, ever removes one.
	if ! _e=$( { printf '%s\n' "$2" >"$_t"; } 2>&1); then
		rm -f "$_t"
		# dash says "I/O error" whatever the error: a full disk is named.
		[ "$(df -P "$_r/spool" 2>/dev/null | awk 'NR == 2 { print $4 }')" != 0 ] ||
			_e="no space left on its file system"
		echo "tend.sh: cannot write request $1 in $_r/spool: ${_e##*: }" >&2
		return 1
	fi
	# Its inode, which a rename keeps, tells where the watcher moved it
	# (see _tend_aside).
	_tend_req_ino=$(_tend_ino "$_t")
	# Root's requests carry a mark in a shared root, where anyone could
	# move a file of root's into the spool (setfattr is in Debian's attr).
	if [ "$(id -u)" = 0 ] && command -v setfattr >/dev/null; then
		setfattr -n trusted.tend -v request "$_t" 2>/dev/null
		# A request of root's this one replaces (an edit of a queued
		# run, a control request sent again) loses its last name: it is
		# held open across the move (_tend_replace), where the name is a
		# regular file of root's (no other user may rename or remove it
		# in the sticky spool); one the watcher takes first leaves the
		# move to below.
		_d="$_r/spool/$1"
		if [ ! -h "$_d" ] && [ -f "$_d" ] && [ -O "$_d" ]; then
			_tend_replace "$_t" "$_r" "$1" 2>/dev/null
		fi
	fi
	[ ! -e "$_t" ] || _tend_mv "$_t" "$_r/spool/$1" || { rm -f "$_t"; return 1; }
}

# _tend_mv TMP DST: rename TMP to DST, never into a directory DST names.
# mv moves a file into the directory its destination is, or links to: a
# member of a shared root who put such a link in the spool under the name
# of root's next request would get root's request, marked, in their own
# directory, to move into the spool and run as root when they chose.
# -T (GNU, BusyBox) renames onto the name itself; where mv has no -T, a
# directory there is refused first (a link planted after that check is
# still followed).
_tend_mv() {
	mv -T "$1" "$2" 2>/dev/null && return
	if [ -d "$2" ]; then
		echo "tend.sh: cannot write request ${2##*/}: $2 is a directory, or a link to one" >&2
		return 1
	fi
	mv "$1" "$2"
}

# _tend_replace TMP ROOT NAME: move TMP over spool/NAME in ROOT, whose
# request of root's is held open across the move, then spend that
# request's mark if a hard link keeps it elsewhere: where
# fs.protected_hardlinks=0, a member who linked it while it waited would
# otherwise hold a single-named marked file of root's, to move into the
# spool and run the old command as root (see docs/protocol.md, "Who may
# do what"). It is spent only once the spool is synced (a power loss
# must not bring it back under NAME spent, refused), and not if the name
# it has is the request's own: its run's, or its claim, which the
# watcher took it to meanwhile.
# The name is opened in a child given 5 seconds, and what it opened is
# used only if the name, unfollowed, is that file, regular and root's:
# root's request seen there a moment before may since have been taken by
# the watcher, and the name made anew by a member (the spool is theirs
# to write in): a FIFO, whose open would block root's shell for ever, or
# a link to another request of root's, whose mark would be spent. The
# move is then left to the caller, as is one that mv -T cannot make.
_tend_replace() {
	timeout 5 sh -c '
		exec 9<"$2/spool/$3" || exit
		[ -f /proc/self/fd/9 ] && [ -O /proc/self/fd/9 ] || exit 0
		[ "$(stat -c %d:%i "$2/spool/$3")" = "$(stat -L -c %d:%i /proc/self/fd/9)" ] || exit 0
		mv -T "$1" "$2/spool/$3" || exit
		set -- "$2" "$3" $(stat -L -c "%h %i" /proc/self/fd/9)
		[ "${3:-0}" -gt 0 ] || exit 0
		[ "$(stat -c %i "$1/runs/${2%.start}/request" 2>/dev/null)" != "$4" ] || exit 0
		[ "$(stat -c %i "$1/claims/0:$2" 2>/dev/null)" != "$4" ] || exit 0
		[ "$(getfattr -n trusted.tend --only-values /proc/self/fd/9)" = request ] || exit 0
		sync "$1/claims" 2>/dev/null # a claim removed meanwhile, if any
		sync "$1/spool" && setfattr -n trusted.tend -v spent /proc/self/fd/9
	' _tend_replace "$@"
}

# _tend_json TEXT: print TEXT as a JSON string. Backslashes, quotes, tabs
# and newlines are escaped; another control character makes the request
# one the watcher rejects, with the reason.
_tend_json() {
	printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' |
		awk 'BEGIN { printf "\"" } NR > 1 { printf "\\n" } { printf "%s", $0 } END { printf "\"" }'
}

# _tend_polls: print how many polls, 50 ms apart, $TEND_SH_TIMEOUT
# seconds (default 3600; at most 999999999) make; return 2, saying why, if it is not a whole
# number of seconds: shell arithmetic on "10s" or "1.5" would end the
# caller's script, not the wait.
_tend_polls() {
	_s=${TEND_SH_TIMEOUT:-3600}
	case $_s in
	*[!0-9]*) echo "tend.sh: TEND_SH_TIMEOUT=$_s is not a whole number of seconds (such as 600)" >&2; return 2 ;;
	esac
	_s=${_s#"${_s%%[!0]*}"} # no leading zero: it would be octal
	# More than 9 digits (over 31 years) is for ever: 20 times as many
	# would overflow the shell's arithmetic, to a wait that ends at once.
	case $_s in ??????????*) _s=999999999 ;; esac
	echo $((${_s:-0} * 20))
}

# _tend_ino FILE: print FILE's inode number (nothing if it is not there).
_tend_ino() {
	ls -di "$1" 2>/dev/null | awk '{ print $1 }'
}

# _tend_answered NAME: return 0 if request NAME's answer is there, and is
# not the earlier one tend_submit could not remove, nor, for a start
# still in the spool, the answer to another's request that made its run
# (two clients starting one ID at once share its answer's name).
_tend_answered() {
	test -s "$(tend_outcomes)/$1" || return 1
	[ "$1" != "${_tend_old_name:-}" ] || [ -z "${_tend_old_ino:-}" ] ||
		[ "$(_tend_ino "$(tend_outcomes)/$1")" != "$_tend_old_ino" ] || return 1
	case $1 in *.start) ;; *) return 0 ;; esac
	[ "$1" = "${_tend_old_name:-}" ] && [ -n "${_tend_req_ino:-}" ] || return 0
	[ "$(_tend_ino "$(tend_root)/spool/$1")" = "$_tend_req_ino" ] || return 0
	_tend_run_ino=$(_tend_ino "$(tend_root)/runs/${1%.start}/request")
	[ -z "$_tend_run_ino" ] || [ "$_tend_run_ino" = "$_tend_req_ino" ]
}

# _tend_aside NAME: print the answer to start request NAME, the file
# tend_submit wrote, if the watcher moved it into rejected/: "rejected: "
# and its reason there. The watcher leaves the answer to the name as it
# is for a second start written over it, which may be another client's
# accepted written after this one removed it: its own request says.
# Only a file of this user's there is its own: once its file is gone
# (its run deleted), its inode is soon another file's, and a member of a
# shared root could have theirs rejected under NAME, to answer root with
# their request's reason.
_tend_aside() {
	case $1 in *.start) ;; *) return 1 ;; esac
	[ "$1" = "${_tend_old_name:-}" ] && [ -n "${_tend_req_ino:-}" ] || return 1
	[ "$(_tend_ino "$(tend_root)/spool/$1")" != "$_tend_req_ino" ] || return 1
	_tend_as=$1
	_tend_n=0
	while [ -e "$(tend_root)/rejected/$_tend_as" ] || [ -e "$(tend_root)/rejected/$_tend_as.error" ]; do
		if [ "$(_tend_ino "$(tend_root)/rejected/$_tend_as")" = "$_tend_req_ino" ] &&
			[ "$(stat -c %u "$(tend_root)/rejected/$_tend_as")" = "$(id -u)" ]; then
			_tend_why=$(head -n 1 "$(tend_root)/rejected/$_tend_as.error" 2>/dev/null)
			printf 'rejected: %s\n' "${_tend_why#"$1: "}"
			return 0
		fi
		_tend_n=$((_tend_n + 1))
		_tend_as=$1.$_tend_n
	done
	return 1
}

# tend_outcome NAME: wait for request NAME's outcome, and print it.
tend_outcome() {
	_i=0
	_max=$(_tend_polls) || return 2
	until _tend_answered "$1" || _tend_aside "$1" >/dev/null; do
		_i=$((_i + 1))
		[ "$_i" -lt "$_max" ] || { echo "tend.sh: timed out waiting for the answer to $1 ($(tend_outcomes)/$1) after ${TEND_SH_TIMEOUT:-3600}s" >&2; return 1; }
		sleep 0.05
	done
	_tend_aside "$1" || cat "$(tend_outcomes)/$1"
}

# tend_field ID FIELD: print a top-level field of run ID's state.json: a
# string as its text, without its quotes or JSON's escapes (a reason says
# "timeout", not \"timeout\"; a command's && is not \u0026\u0026),
# but for a \u escape of a character beyond ASCII (\u2028, \u2029 and
# \ufffd, for bytes that were not UTF-8: Go writes every other one as
# it is), which stays as it is; a number as it is; an array or an object
# as compact JSON on one line (["/bin/sh","-c","make"], {"k":"v","z":"w"}).
# state.json has each top-level field at two spaces' indent, and a
# composite one's closing bracket too, so awk is enough.
tend_field() {
	awk -v key="  \"$2\": " '
	function unjson(s,   out, i, c, n, h) {
		out = ""
		while ((i = index(s, "\\")) > 0) {
			out = out substr(s, 1, i - 1)
			c = substr(s, i + 1, 1)
			s = substr(s, i + 2)
			if (c == "n") c = "\n"
			else if (c == "t") c = "\t"
			else if (c == "r") c = "\r"
			else if (c == "b") c = "\b"
			else if (c == "f") c = "\f"
			else if (c == "u") {
				n = 0
				for (i = 1; i <= 4; i++) {
					h = index("0123456789abcdef", tolower(substr(s, i, 1)))
					if (h == 0) { n = -1; break }
					n = n * 16 + h - 1
				}
				if (n < 1 || n > 127) c = "\\u"
				else { c = sprintf("%c", n); s = substr(s, 5) }
			}
			out = out c
		}
		return out s
	}
	index($0, key) == 1 {
		v = substr($0, length(key) + 1)
		if (v == "[" || v == "{") { out = v; deep = 1; next }
		sub(/,$/, "", v)
		if (v ~ /^".*"$/) v = unjson(substr(v, 2, length(v) - 2))
		print v
		exit
	}
	deep {
		line = $0
		sub(/^ +/, "", line)
		# A member "key": value loses the space after its colon: the
		# first that ends the key, a JSON string (one may hold ": ").
		if (match(line, /^"([^"\\]|\\.)*": /)) line = substr(line, 1, RLENGTH - 1) substr(line, RLENGTH + 1)
		if ($0 ~ /^  []}],?$/) { sub(/,$/, "", line); print out line; exit }
		out = out line
	}' "$(tend_root)/runs/$1/state.json" 2>/dev/null
}

# tend_state ID: print run ID's state (empty if it has none yet).
tend_state() {
	tend_field "$1" state
}

# tend_start ID COMMAND: start COMMAND (run by /bin/sh -c) as run ID, and
# wait until the watcher has taken it. Prints the outcome; returns 0 if it
# was accepted (also as an edit of ID while it is queued: "accepted:
# edited while queued (rev N)"); 2, sending nothing, for a
# $TEND_SH_TIMEOUT that is not a whole number of seconds. With $TEND_SH_AFTER (run IDs, each with an
# optional :ended or :ready, separated by spaces) or $TEND_SH_NOT_BEFORE
# (an RFC 3339 time, or a duration such as 10m), the run waits for those
# runs, or that time, queued. With $TEND_SESSION (as the tend CLI reads
# it), the run is that session's. Returns 2 at once, sending nothing, for
# an ID tend refuses.
tend_start() {
	_tend_id "$1" || return 2
	_tend_polls >/dev/null || return 2 # before anything is sent
	_b=$2
	if [ -n "${TEND_SH_AFTER:-}${TEND_SH_NOT_BEFORE:-}${TEND_SESSION:-}" ]; then
		_b="{\"command\": $(_tend_json "$2")"
		[ -z "${TEND_SESSION:-}" ] || _b="$_b, \"session\": $(_tend_json "$TEND_SESSION")"
		if [ -n "${TEND_SH_AFTER:-}" ]; then
			_sep=
			_b="$_b, \"after\": ["
			for _d in $TEND_SH_AFTER; do
				_b="$_b$_sep$(_tend_json "$_d")"
				_sep=", "
			done
			_b="$_b]"
		fi
		[ -z "${TEND_SH_NOT_BEFORE:-}" ] || _b="$_b, \"not_before\": $(_tend_json "$TEND_SH_NOT_BEFORE")"
		_b="$_b}"
	fi
	tend_submit "$1.start" "$_b" || return 1
	_o=$(tend_outcome "$1.start") || return 1
	printf '%s\n' "$_o"
	case $_o in accepted | "accepted: "*) ;; *) return 1 ;; esac
}

# tend_wait ID: wait until run ID has ended; return as tend wait does, as
# a shell would for it: its exit code, 128+N if signal N killed it, 127 if
# it never ran (it could not start, or was canceled first), and never 0
# for a run that did not complete (one canceled or timed out whose process
# exited 0 all the same returns 1), so that `tend_wait build && deploy`
# does not go on; 124 if it has not ended within $TEND_SH_TIMEOUT seconds
# (it goes on); 3 at once if there is no such run, nor a start request of
# it in the spool (a typo, a request rejected); 4 if the run is another
# user's, whose record this user may not read (a shared root); 2 for an
# ID tend refuses.
tend_wait() {
	_tend_id "$1" || return 2
	_i=0
	_shut=0
	_max=$(_tend_polls) || return 2
	while :; do
		_state=$(tend_state "$1")
		case $_state in
		completed | failed | canceled | timed_out) break ;;
		"") # its directory is made before its request leaves the spool
			_d="$(tend_root)/runs/$1"
			[ -e "$_d" ] || [ -e "$(tend_root)/spool/$1.start" ] ||
				{ echo "tend.sh: no run $1" >&2; return 3; }
			# One this user may not enter is another's: at once if that
			# is a user's; the watcher's (root's) only for a moment
			# before it hands a run's directory over to its owner.
			if [ -e "$_d" ] && ! [ -x "$_d" ]; then
				_shut=$((_shut + 1))
				_u=$(ls -dn "$_d" | awk '{ print $3 }')
				if [ "$_u" != 0 ] || [ "$_shut" -ge 40 ]; then
					echo "tend.sh: run $1 is not this user's: its record, in $_d (uid $_u), is not readable" >&2
					return 4
				fi
			fi ;;
		esac
		_i=$((_i + 1))
		[ "$_i" -lt "$_max" ] || { echo "tend.sh: run $1 has not ended after ${TEND_SH_TIMEOUT:-3600}s; it goes on" >&2; return 124; }
		sleep 0.05
	done
	_code=$(tend_field "$1" exit_code)
	if [ -n "$_code" ]; then
		[ "$_code" = 0 ] && [ "$_state" != completed ] && return 1
		return "$_code"
	fi
	_sig=$(tend_field "$1" signal)
	if [ -n "$_sig" ]; then
		_n=$(_tend_signum "$_sig")
		[ "$_n" -gt 0 ] && return $((128 + _n))
		return 1
	fi
	case $(tend_field "$1" pid) in "" | 0) return 127 ;; esac
	return 1
}

# _tend_signum SIGNAME: the number of a signal (Linux numbering on x86
# and arm, which tend runs on; shells' kill -l does not map names to
# numbers everywhere), 0 if it is none of these.
_tend_signum() {
	case ${1#SIG} in
	HUP) echo 1 ;; INT) echo 2 ;; QUIT) echo 3 ;; ILL) echo 4 ;; TRAP) echo 5 ;;
	ABRT | IOT) echo 6 ;; BUS) echo 7 ;; FPE) echo 8 ;; KILL) echo 9 ;; USR1) echo 10 ;;
	SEGV) echo 11 ;; USR2) echo 12 ;; PIPE) echo 13 ;; ALRM) echo 14 ;; TERM) echo 15 ;;
	STKFLT) echo 16 ;; CHLD) echo 17 ;; CONT) echo 18 ;; STOP) echo 19 ;; TSTP) echo 20 ;;
	TTIN) echo 21 ;; TTOU) echo 22 ;; URG) echo 23 ;; XCPU) echo 24 ;; XFSZ) echo 25 ;;
	VTALRM) echo 26 ;; PROF) echo 27 ;; WINCH) echo 28 ;; IO | POLL) echo 29 ;; PWR) echo 30 ;;
	SYS) echo 31 ;; *) echo 0 ;;
	esac
}

# _tend_id ID: return 0 if ID is one tend takes (1 to 64 bytes of ASCII
# letters, digits, '.', '_' and '-', not starting with '.' or '-'), else
# say why and return 2: the watcher answers no request whose name is not
# valid, so a wait for its answer would last until $TEND_SH_TIMEOUT.
_tend_id() {
	case $1 in
	"" | .* | -* | *[!A-Za-z0-9._-]*) ;;
	*) [ "${#1}" -le 64 ] && return 0 ;;
	esac
	echo "tend.sh: \"$1\" is not a run ID: IDs are 1 to 64 ASCII letters, digits, '.', '_' and '-', not starting with '.' or '-'" >&2
	return 2
}

# tend_control ID VERB [BODY]: send a control request (cancel, delete,
# signal, restart, pause, resume, label, note) under a name of its own
# (<id>@<tag>.<verb>), wait for its outcome, print it, and remove it.
# Returns 0 if it was carried out, else the tend CLI's exit code for the
# outcome: 5 already_finished, 3 not_found, 7 conflict, 4 any other
# (rejected, not_permitted, not_running, still_active, ...); 2 for a verb
# that is none of these, or an ID tend refuses, sent nowhere.
tend_control() {
	_tend_id "$1" || return 2
	case ${2:-} in
	cancel | delete | signal | restart | pause | resume | label | note) ;;
	*) echo "tend.sh: tend_control: no verb \"${2:-}\": want cancel, delete, signal, restart, pause, resume, label or note" >&2; return 2 ;;
	esac
	_tend_polls >/dev/null || return 2 # before anything is sent
	_name="$1@$(_tend_tag).$2"
	tend_submit "$_name" "${3:-}" || return 1
	_o=$(tend_outcome "$_name") || return 1
	rm -f "$(tend_outcomes)/$_name" 2>/dev/null # a member's stays, swept in an hour
	printf '%s\n' "$_o"
	case $_o in
	canceled | deleted | signaled* | restarted* | paused* | resumed* | updated*) return 0 ;;
	already_finished*) return 5 ;;
	not_found*) return 3 ;;
	conflict*) return 7 ;;
	esac
	return 4
}

# tend_select VERB BODY: send a selector request (*@<tag>.cancel or
# *@<tag>.signal) whose JSON BODY names the runs: {"all": true},
# {"labels": {"k": "v"}} or {"ids": ["a", "b"]}, with "grace" or "signal".
# Prints its outcome ("selected: N", then "ID: outcome" a line); returns 0
# if it was carried out, 4 if it was refused.
tend_select() {
	_tend_polls >/dev/null || return 2 # before anything is sent
	_name="*@$(_tend_tag).$1"
	tend_submit "$_name" "$2" || return 1
	_o=$(tend_outcome "$_name") || return 1
	rm -f "$(tend_outcomes)/$_name" 2>/dev/null # a member's stays, swept in an hour
	printf '%s\n' "$_o"
	case $_o in selected:*) return 0 ;; esac
	return 4
}

# tend_cancel_all [K=V]: cancel every run this user may (with K=V, only
# those labeled so), with one request; waits until each has ended.
tend_cancel_all() {
	case ${1:-} in
	"") tend_select cancel '{"all": true}' ;;
	*=*) tend_select cancel "{\"labels\": {$(_tend_json "${1%%=*}"): $(_tend_json "${1#*=}")}}" ;;
	*) echo "tend.sh: tend_cancel_all: want K=V, not $1" >&2; return 1 ;;
	esac
}

# tend_cancel ID [GRACE]: cancel run ID (SIGTERM, then SIGKILL after GRACE,
# e.g. 5s); waits until it has ended. Prints the outcome; returns 0 if
# canceled, 5 if it had already finished, 3 if there is no such run, 4 if
# refused: the tend CLI's exit codes.
tend_cancel() {
	_body=
	[ -n "${2:-}" ] && _body="{\"grace\": \"$2\"}"
	tend_control "$1" cancel "$_body"
}
