#!/bin/sh
# fc-smoke.sh BENCH MEMGEN CLIENT MIB 4k|2m [CLIENT ARGS...] - a restore
# of a memory file of MIB MiB by Firecracker's example handler (BENCH
# fc-example) and fc-client, checked end to end: the client finds every
# byte, the balloon's zeros and nothing changed on its second pass; the
# handler served every fault and saw the balloon's REMOVE; both exit 0.
# With 2m the memory is hugetlb: the test reserves the 2 MiB pages it
# needs (under the lock file the hugetlb tests take) and gives them back,
# or exits 77 (skipped) when it cannot.
# The client's own test: with FC_SMOKE_HANDLER_ARGS (--ignore-remove,
# --skew) the handler is broken on purpose, and the test passes only when
# the client exits 1 with a message that has FC_SMOKE_MISMATCH in it.
# Exit status: 0 passed, 77 skipped, anything else failed, with the
# reason on stderr.
set -u
if [ $# -lt 5 ]; then
	echo "usage: $0 BENCH MEMGEN CLIENT MIB 4k|2m [CLIENT ARGS...]" >&2
	exit 2
fi
bench=$1 memgen=$2 client=$3 mib=$4 page=$5
shift 5
. "$(dirname "$0")/handler.sh"
pool=/sys/kernel/mm/hugepages/hugepages-2048kB
dir=$(mktemp -d /tmp/faultd-fc-XXXXXX) || exit 2
handler=
before=
cleanup() {
	[ -n "$handler" ] && kill "$handler" 2>/dev/null && wait "$handler"
	[ -n "$before" ] && echo "$before" >"$pool/nr_hugepages"
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "fc-smoke: $*" >&2
	exit 1
}

chunk=4k
if [ "$page" = 2m ]; then
	chunk=2M
	exec 9>/tmp/faultd-hugetlb-tests.lock
	flock 9 || { echo "fc-smoke: cannot lock the huge page pool" >&2; exit 77; }
	need=$((mib / 2))
	before=$(cat "$pool/nr_hugepages" 2>/dev/null) ||
		{ echo "fc-smoke: no 2 MiB huge pages here; skipped" >&2; exit 77; }
	echo $((before + need)) >"$pool/nr_hugepages" 2>/dev/null
	if [ "$(cat "$pool/free_hugepages")" -lt "$need" ]; then
		echo "fc-smoke: cannot reserve $need 2 MiB huge pages; skipped" >&2
		exit 77
	fi
fi

"$memgen" "$dir/mem" "${mib}M" --seed 7 --chunk "$chunk" >"$dir/memgen.out" ||
	fail "fc-memgen failed"
# shellcheck disable=SC2086 # the handler's flags, one word each
fc_example_start "$bench" "$dir" "$dir/mem" ${FC_SMOKE_HANDLER_ARGS:-} ||
	exit 1

"$client" --socket "$dir/sock" --mem-file "$dir/mem" --page "$page" \
	--timeout 120 "$@" >"$dir/client.out" 2>"$dir/client.err"
rc=$?
cat "$dir/client.out" "$dir/client.err"
if [ $rc -eq 4 ] && [ -n "$handler" ]; then
	# A time-out: say where the handler is before it is killed.
	echo "fc-smoke: the handler after the time-out:" >&2
	grep -E '^(State|Threads)' "/proc/$handler/status" >&2
	echo "wchan: $(cat "/proc/$handler/wchan" 2>/dev/null)" >&2
	cat "/proc/$handler/stack" "$dir/handler.err" >&2 2>/dev/null
fi
[ $rc -eq 77 ] && exit 77
if [ -n "${FC_SMOKE_MISMATCH:-}" ]; then
	[ $rc -eq 1 ] || fail "fc-client exited $rc, not 1 (a mismatch)"
	grep -q "$FC_SMOKE_MISMATCH" "$dir/client.err" ||
		fail "fc-client did not say \"$FC_SMOKE_MISMATCH\""
	fc_example_wait || exit 1
	exit 0
fi
[ $rc -eq 0 ] || fail "fc-client exited $rc; handler: $(cat "$dir/handler.err")"
# The client's exit closed the connection: the handler ends by itself.
fc_example_wait || exit 1
stats=$handler_stats
field() {
	echo "$2" | sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"
}
out=$(cat "$dir/client.out")
pages=$(field pass2_pages "$out")
ps=$(field page_size "$out")
balloon=$(($(field balloon_bytes "$out") / ps))
copies=$(field copies "$stats")
removes=$(field removes "$stats")
[ -n "$pages" ] && [ -n "$copies" ] || fail "no counts: $stats"
# Every page came from the handler once, but for those of the balloon
# not touched before it: unregistered, they are the kernel's zero pages.
[ "$copies" -le "$pages" ] && [ "$copies" -ge $((pages - balloon)) ] ||
	fail "the handler installed $copies pages; the guest has $pages," \
		"$balloon of them in the balloon"
if [ "$balloon" -gt 0 ]; then
	[ "$removes" -ge 1 ] || fail "the balloon made no REMOVE event"
fi
exit 0
