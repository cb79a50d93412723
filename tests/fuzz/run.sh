#!/bin/sh
# run.sh BUILD_DIR SECONDS - build the fuzz targets with clang in BUILD_DIR
# (configured here if it is not yet), replay each one's seed corpus and
# regression inputs, then fuzz each for SECONDS (0: replay only), one
# after the other, one process each. The fuzzers work on copies of the
# corpora in a temporary directory, never in the tree. Exits non-zero on
# the first crash, naming its input: once the bug is fixed, copy that to
# tests/fuzz/regressions/TARGET/. A directory configured here treats
# warnings as errors, as the sanitizer builds do.
set -eu

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR SECONDS" >&2
	exit 2
fi
build=$1
secs=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
targets="proto image fc_json"

if [ ! -f "$build/build.ninja" ]; then
	CC=clang meson setup "$build" "$src" -Dwerror=true -Dfuzz=true \
		-Dtests=false -Dexamples=false -Dbench=false
elif ! meson introspect --buildoptions "$build" |
	grep -q '"name": "fuzz", "value": true'; then
	meson configure "$build" -Dfuzz=true
fi
meson compile -C "$build" $(for t in $targets; do echo "$t-fuzz"; done)

for t in $targets; do
	echo "== $t: replaying the corpus and the regression inputs"
	"$here/replay.sh" "$build/tests/fuzz/$t-fuzz" "$here/corpus/$t" \
		"$here/regressions/$t" >"$build/$t-replay.log" 2>&1 || {
		cat "$build/$t-replay.log" >&2
		echo "$t: a corpus or regression input fails" >&2
		exit 1
	}
done
[ "$secs" -gt 0 ] || exit 0

# Inputs a little longer than the longest any target accepts.
max_len() {
	case $1 in
	image) echo 262144 ;;
	fc_json) echo 65600 ;;
	*) echo 65536 ;;
	esac
}

work=$(mktemp -d "${TMPDIR:-/tmp}/faultd-fuzz-XXXXXX")
# image-fuzz writes each input to files: in memory, where there is some.
scratch=$(mktemp -d /dev/shm/faultd-fuzz-XXXXXX 2>/dev/null ||
	mktemp -d "$work/scratch-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
	mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
	cp "$here/corpus/$t"/* "$work/$t/corpus/"
	cp "$here/regressions/$t"/* "$work/$t/corpus/" 2>/dev/null || true
	echo "== $t: fuzzing for $secs s"
	if ! TMPDIR="$scratch" "$build/tests/fuzz/$t-fuzz" \
		-max_total_time="$secs" -print_final_stats=1 \
		-max_len="$(max_len "$t")" \
		-artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" \
		>"$work/$t/log" 2>&1; then
		tail -n 60 "$work/$t/log" >&2
		echo "$t: CRASH; input(s):" >&2
		ls -d "$work/$t/artifacts/"* >&2
		exit 1
	fi
	grep -E '^#[0-9]+.*(DONE|pulse|NEW)' "$work/$t/log" | tail -n 1
	grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' \
		"$work/$t/log"
done
rm -rf "$work"
