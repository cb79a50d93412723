#!/bin/sh
# replay.sh FUZZER DIR... - run FUZZER once over every file in the DIRs
# (the seed corpus, the regression inputs), without fuzzing: libFuzzer
# given files runs each and exits, non-zero if one crashes. What the
# target writes goes to a temporary directory, removed even then.
set -u
fuzzer=$1
shift
files=$(find "$@" -type f ! -name '.*' 2>/dev/null | sort)
[ -n "$files" ] || exit 0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/faultd-replay-XXXXXX") || exit 1
# shellcheck disable=SC2086 # one argument per file: names have no spaces
TMPDIR=$tmp "$fuzzer" $files
rc=$?
rm -rf "$tmp"
exit $rc
