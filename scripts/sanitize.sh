#!/bin/sh
# sanitize.sh - build the tree with clang's sanitizers and run the test
# suites under them; CI runs it after the plain suites (make test).
#
# usage: sh scripts/sanitize.sh asan|tsan|all
#
# asan  build-asan: ASan + UBSan, every UB finding fatal, fault injection
#       compiled in, -Dwerror=true, every target built. Suites unit, uffd,
#       stress, hugetlb, daemon, engine, load, inject, examples,
#       firecracker, criu and nbd (the NBD source against nbdkit, and end
#       to end). Not "install":
#       it checks the exported ABI, the man pages, the headers and a
#       DESTDIR install built by a plain compiler; no library code runs
#       there that the other suites do not run.
# tsan  build-tsan: TSan, only the programs the run needs. The suites uffd,
#       stress, hugetlb, daemon, engine, examples, criu and nbd, and of
#       suite unit the program test-unit: test-clear is single-threaded
#       byte checking, which TSan slows to two minutes, its timeout. Not
#       "load": it counts the threads and mappings of the process, and
#       TSan adds its own. Criterion cannot start under TSan, so the test
#       programs are built on tests/tsan/criterion/criterion.h (which says
#       why); TSAN_OPTIONS take tests/tsan.supp.
#
# Any sanitizer report fails the run, from whatever process it comes: each
# one goes to a file under BUILD/sanitizer-logs (log_path), which covers the
# test's own children, the faultd daemon and Criterion's workers, whose
# exit status after a passed test Criterion does not look at (a leak found
# at exit would go unnoticed). The directory is writable by all (sticky):
# the processes the tests run as other users report there too. The files
# are printed at the end.
#
# FAULTD_STRESS_SECONDS (default 1 here), FAULTD_LOAD_SECONDS (default 2)
# and FAULTD_LOAD_REGIONS (default 1000) shorten the suites that run for a
# set time or size; MESON_TESTTHREADS is meson's.
set -u
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)

: "${FAULTD_STRESS_SECONDS:=1}"
: "${FAULTD_LOAD_SECONDS:=2}"
: "${FAULTD_LOAD_REGIONS:=1000}"
export FAULTD_STRESS_SECONDS FAULTD_LOAD_SECONDS FAULTD_LOAD_REGIONS

# Configure @1 with clang and the options that follow; a directory set up
# by another compiler is set up again from scratch.
configure() {
	dir=$1
	shift
	if [ -f "$dir/build.ninja" ] &&
	   grep -q '"command": "clang ' "$dir/compile_commands.json" 2>/dev/null
	then
		meson configure "$dir" "$@" >/dev/null
	elif [ -d "$dir/meson-private" ]; then
		CC=clang meson setup --wipe "$dir" "$@" >/dev/null
	else
		CC=clang meson setup "$dir" "$@" >/dev/null
	fi
}

# The targets that the tests named, or the suites given as "suite:NAME",
# run in build directory @1: their programs, the programs they are given
# as arguments and those named in their environment (FAULTD_DAEMON).
test_targets() {
	python3 - "$@" <<'EOF'
import json, os, subprocess, sys
d, want = sys.argv[1], sys.argv[2:]
def intro(what):
    return json.loads(subprocess.check_output(['meson', 'introspect', d, what]))
files = {}
for t in intro('--targets'):
    for f in t['filename']:
        files[t['id']] = files[os.path.realpath(f)] = os.path.relpath(
            os.path.realpath(f), os.path.realpath(d))
out = set()
for t in intro('--tests'):
    if t['name'] not in want and \
       'suite:' + t['suite'][0].split(':')[-1] not in want:
        continue
    for a in t['depends'] + t['cmd'] + list(t['env'].values()):
        key = a if a in files else os.path.realpath(os.path.join(d, a))
        if key in files:
            out.add(files[key])
print('\n'.join(sorted(out)))
EOF
}

# Print the sanitizer reports under @1; fail if there is one.
# LeakSanitizer's own trouble, no finding: a thread that ended while it
# stopped the process for the leak check (that process goes unchecked).
LSAN_NOISE='^==[0-9]*==Unable to get registers from thread [0-9]*\.*$'

reports() {
	found=
	for f in $(find "$1" -type f -size +0 | sort); do
		if ! grep -qv "$LSAN_NOISE" "$f"; then
			echo "sanitize: $f: $(cat "$f") (not a finding)" >&2
			continue
		fi
		found="$found $f"
	done
	[ -z "$found" ] && return 0
	for f in $found; do
		echo "==== $f"
		cat "$f"
	done
	echo "sanitize: $(echo $found | wc -w) process(es) reported" \
	     "findings (above)" >&2
	return 1
}

run_asan() {
	dir=build-asan
	logs=$root/$dir/sanitizer-logs
	configure "$dir" -Db_sanitize=address,undefined -Db_lundef=false \
		-Dwerror=true -Dfault-injection=true -Dtests=true \
		-Dexamples=true -Dbench=true \
		"-Dc_args=-fno-sanitize-recover=undefined -fno-omit-frame-pointer -fsanitize-ignorelist=$root/tests/ubsan.ignorelist" \
		-Dc_link_args=-fno-sanitize-recover=undefined || return 1
	ninja -C "$dir" || return 1
	rm -rf "$logs" && mkdir -p "$logs" && chmod 1777 "$logs"
	# handle_sigbus=0 is added by tests/meson.build: tests that expect
	# death by SIGBUS check for it.
	ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1" \
	UBSAN_OPTIONS="log_path=$logs/asan:halt_on_error=1:print_stacktrace=1" \
		meson test -C "$dir" --no-rebuild --print-errorlogs \
		--timeout-multiplier 3 \
		--suite unit --suite pure --suite uffd --suite stress \
		--suite hugetlb --suite daemon --suite engine --suite load \
		--suite inject --suite examples --suite firecracker --suite criu \
		--suite nbd
	ret=$?
	reports "$logs" || ret=1
	return $ret
}

run_tsan() {
	dir=build-tsan
	logs=$root/$dir/sanitizer-logs
	configure "$dir" -Db_sanitize=thread -Db_lundef=false -Dwerror=true \
		-Dtests=true -Dexamples=true -Dbench=false \
		-Dc_args=-fno-omit-frame-pointer || return 1
	targets=$(test_targets "$dir" unit suite:uffd suite:stress \
		suite:hugetlb suite:daemon suite:engine suite:examples \
		suite:criu suite:nbd) || return 1
	# shellcheck disable=SC2086 # one target a word
	ninja -C "$dir" $targets || return 1
	rm -rf "$logs" && mkdir -p "$logs" && chmod 1777 "$logs"
	# handle_sigbus=0: as for ASan. die_after_fork=0: tests fork from
	# processes that have handler threads, and the children start
	# threads (glibc allows it; TSan refuses by default).
	TSAN_OPTIONS="log_path=$logs/tsan:handle_sigbus=0:die_after_fork=0:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
	export TSAN_OPTIONS
	meson test -C "$dir" --no-rebuild --print-errorlogs \
		--timeout-multiplier 3 \
		--suite uffd --suite stress --suite hugetlb --suite daemon \
		--suite engine --suite examples --suite criu --suite nbd
	ret=$?
	meson test -C "$dir" --no-rebuild --print-errorlogs \
		--timeout-multiplier 3 unit || ret=1
	reports "$logs" || ret=1
	return $ret
}

case ${1:-} in
asan|tsan|all) ;;
*)
	echo "usage: sh scripts/sanitize.sh asan|tsan|all" >&2
	exit 2
	;;
esac
FAULTD_EXTRA_PKGS="clang libclang-rt-dev" sh scripts/deps.sh || exit 1

status=0
case $1 in
asan) run_asan || status=1 ;;
tsan) run_tsan || status=1 ;;
all)
	run_asan || status=1
	run_tsan || status=1
	;;
esac
[ $status = 0 ] && echo "sanitize: $1: no findings"
exit $status
