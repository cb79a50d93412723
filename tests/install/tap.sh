# tap.sh - helpers for the scripts of the "install" test suite, sourced by
# them. Each check is one TAP line (meson test protocol 'tap'), so that a
# failure names the check; diagnostics follow it as "# " lines.

tap_n=0
tap_failed=0

ok() {
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $*"
}

not_ok() {
	tap_n=$((tap_n + 1))
	tap_failed=$((tap_failed + 1))
	echo "not ok $tap_n - $*"
}

# skip DESCRIPTION REASON
skip() {
	tap_n=$((tap_n + 1))
	echo "ok $tap_n - $1 # SKIP $2"
}

# diag TEXT...: each line of TEXT as a TAP comment.
diag() {
	printf '%s\n' "$@" | sed 's/^/# /'
}

# check DESCRIPTION COMMAND...: one test point, passed when COMMAND
# succeeds; its output is shown only when it fails.
check() {
	tap_desc=$1
	shift
	if tap_out=$("$@" 2>&1); then
		ok "$tap_desc"
	else
		not_ok "$tap_desc"
		[ -z "$tap_out" ] || diag "$tap_out"
	fi
}

# bail REASON: stop the whole script (a missing tool, a broken setup).
bail() {
	echo "Bail out! $*"
	exit 1
}

# tap_end: the plan, and the exit status.
tap_end() {
	echo "1..$tap_n"
	[ "$tap_failed" -eq 0 ]
}
