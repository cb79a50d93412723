#!/bin/sh
# with-daemon.sh - run a program against a faultd daemon of its own:
# start FAULTD on a temporary socket, wait until it listens, run
# PROGRAM ARGS... --socket SOCKET, stop the daemon and exit with the
# program's status (77, "skipped", passes through).
#
# usage: with-daemon.sh FAULTD PROGRAM [ARGS...]
set -u
faultd=$1
shift
dir=$(mktemp -d /tmp/faultd-test-XXXXXX) || exit 2
sock=$dir/faultd.sock
"$faultd" --socket "$sock" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon; rm -rf "$dir"' EXIT
# The daemon creates the socket when it listens; give it 5 s.
tries=0
while [ ! -S "$sock" ]; do
	tries=$((tries + 1))
	if [ $tries -gt 500 ] || ! kill -0 $daemon 2>/dev/null; then
		echo "with-daemon.sh: faultd did not start" >&2
		exit 2
	fi
	sleep 0.01
done
"$@" --socket "$sock"
