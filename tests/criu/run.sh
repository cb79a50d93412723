#!/bin/sh
# run.sh SCRIPT PROGRAM [ARGS...] - run a test program of suite criu with
# CRIU set to the criu that SCRIPT (scripts/criu.sh) finds or builds; exit
# 77 (skipped), with its reason, when there is none.
script=$1
shift
criu=$(sh "$script")
rc=$?
if [ $rc -ne 0 ]; then
	[ $rc -eq 77 ] && echo "criu suite skipped (see the reason above)" >&2
	exit $rc
fi
CRIU=$criu exec "$@"
