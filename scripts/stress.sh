#!/bin/sh
# stress.sh - the long run of the stress and load suites (make stress):
# for about MINUTES minutes, the nine uffd-stress configurations of
# tests/stress.c, the nine races of tests/window.c, the budget's race of
# tests/file.c and the load suite's churn, each configuration or race
# given a nineteenth of four fifths of the time and the churn a tenth,
# repeated until the time is up; each pass also runs the race tests of the
# dirty, faults and firecracker suites (discards against writers, aborts
# counted per region, faults against a balloon's discards) for as long as
# a configuration. A configuration runs at most 480 s at a time (its
# Criterion timeout is 600 s), so long runs are made of passes. Then the
# criu suite once with transparent huge pages "always": a machine-wide
# setting, held through tests/setting-hold (shared with any other run on
# the machine, put back by the last holder, a dead holder's change undone
# by the next) for that run only. Stops at the first failure.
#
# usage: sh scripts/stress.sh BUILD_DIR MINUTES
set -u
build=$1
minutes=$2
end=$(( $(date +%s) + minutes * 60 ))
secs=$(( minutes * 60 * 4 / 5 / 19 ))
churn=$(( minutes * 60 / 10 ))
clamp() { [ "$1" -lt 1 ] && echo 1 || { [ "$1" -gt 480 ] && echo 480 || echo "$1"; }; }
secs=$(clamp $secs)
churn=$(clamp $churn)
pass=0
while :; do
	pass=$((pass + 1))
	echo "stress: pass $pass: $secs s per configuration, $churn s of churn"
	FAULTD_STRESS_SECONDS=$secs FAULTD_LOAD_SECONDS=$churn \
		meson test -C "$build" --suite stress --suite load \
		--timeout-multiplier 0 --print-errorlogs || {
		echo "stress: pass $pass FAILED (log: $build/meson-logs/testlog.txt)"
		exit 1
	}
	# The race tests of other suites, each for as long as a configuration.
	for race in dirty:'dirty/discard_races_writers_*' \
		faults:'faults/aborts_and_misses_counted_in_their_region' \
		firecracker:'balloon/remove_race*'; do
		FAULTD_STRESS_SECONDS=$secs "$build/tests/test-${race%%:*}" \
			--filter "${race#*:}" || {
			echo "stress: pass $pass FAILED (${race#*:})"
			exit 1
		}
	done
	[ "$(date +%s)" -lt "$end" ] || break
done
# The dump tests must not depend on the machine's THP mode.
thp=/sys/kernel/mm/transparent_hugepage/enabled
echo "stress: the criu suite with THP always"
"$build/tests/setting-hold" --word always $thp /tmp/faultd-thp-enabled -- \
	sh -c "grep -q '\\[always\\]' $thp || {
		echo 'stress: cannot set THP to always (not root?)'; exit 1; }
		meson test -C '$build' --suite criu --print-errorlogs" || {
	echo "stress: the criu suite with THP always FAILED (log: $build/meson-logs/testlog.txt)"
	exit 1
}
echo "stress: $pass passes in $(( (minutes * 60 - end + $(date +%s)) / 60 )) min, all passed"
