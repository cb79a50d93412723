# handler.sh - sourced by the fc tests: fc_example_start BENCH DIR MEM
# [ARGS...] starts Firecracker's example handler (faultd-bench fc-example)
# on DIR/sock serving MEM, returns once it listens, with its pid in
# $handler and the rest of its output readable on descriptor 3; or fails
# with what it said. fc_example_wait waits for it to end by itself (its
# peer gone) and leaves its last line in $handler_stats.

fc_example_start() {
	_bench=$1 _dir=$2 _mem=$3
	shift 3
	mkfifo "$_dir/handler.out" || return 1
	"$_bench" fc-example "$_dir/sock" "$_mem" "$@" >"$_dir/handler.out" \
		2>"$_dir/handler.err" &
	handler=$!
	# Opening the FIFO waits for the handler to open it; its first
	# line says it listens. No line: it died first.
	exec 3<"$_dir/handler.out"
	read -r _line <&3 || _line=
	case $_line in
	*'"listening"'*) return 0 ;;
	esac
	echo "the handler did not start: $(cat "$_dir/handler.err")" >&2
	return 1
}

fc_example_wait() {
	wait "$handler"
	_rc=$?
	handler=
	handler_stats=$(cat <&3)
	echo "$handler_stats"
	[ $_rc -eq 0 ] && return 0
	echo "fc-example exited $_rc: $(cat "$_dir/handler.err")" >&2
	return 1
}
