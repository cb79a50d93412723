#!/bin/bash
# numa-check.sh - run libfaultd on a real two-node NUMA machine and on an
# older kernel: a small KVM guest with two NUMA nodes (one vCPU and 2 GiB
# each) boots the Debian distribution kernel (Debian 12: 6.1) with an
# initramfs that holds busybox, the test programs, faultd-bench and the
# shared libraries they need - no disk image. Inside, it runs
#   1. the NUMA tests (test-numa uses the highest node: node 1 there),
#   2. short sweeps of pf1 and lock with --place local and remote (and
#      --handlers elsewhere), checked here: at one thread, pages on the
#      thread's node for local, on the other node for remote,
#   3. the whole test suite (skip with NUMA_CHECK_SUITE=numa),
# prints everything on the serial console and powers off. This script
# reads the console, prints a summary and exits non-zero when something
# failed (a test, a check, or the guest itself).
#
#   scripts/numa-check.sh [BUILD_DIR]          (default: build)
#
# Environment: KERNEL (default: the newest /boot/vmlinuz-*),
# NUMA_CHECK_SUITE=all|numa, NUMA_CHECK_TIMEOUT (seconds, default 900),
# NUMA_CHECK_LOG (keep the console log there; default BUILD_DIR/
# numa-check.log), NUMA_CHECK_ACCEL=kvm|tcg (default: kvm when the host
# has hardware virtualization, tcg otherwise: see scripts/guest.sh). Under
# TCG the guest's figures are an emulator's: only where things ran counts,
# not how fast.
# Needs: qemu-system-x86, a kernel in /boot (linux-image-amd64),
# busybox-static, cpio; `make numa-check` installs the packages.
set -euo pipefail

build=${1:-build}
suite=${NUMA_CHECK_SUITE:-all}
limit=${NUMA_CHECK_TIMEOUT:-900}
log=${NUMA_CHECK_LOG:-$build/numa-check.log}

die() { echo "numa-check: $*" >&2; exit 2; }

. "$(dirname "$0")/guest.sh"
guest_kernel || die "$guest_why"
kernel=$guest_kernel
[ -x "$build/bench/faultd-bench" ] && [ -x "$build/tests/test-numa" ] ||
	die "$build is not built (ninja -C $build)"
guest_accel "${NUMA_CHECK_ACCEL:-}" || die "NUMA_CHECK_ACCEL: $guest_why"
accel=$guest_accel cpu=$guest_cpu
guest_tools qemu-system-x86_64 busybox cpio || die "$guest_why"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root

# ---------------------------------------------------------------------
# The initramfs
# ---------------------------------------------------------------------

copy_with_libs() {
	guest_copy_with_libs "$1" "$root" t
}

guest_busybox "$root"
mkdir -p "$root/t"
copy_with_libs "$build/bench/faultd-bench"
# glibc dlopen()s libgcc_s for pthread_cancel (the bench's uffd-minimal):
# ldd does not list it.
gcc_s=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ && !n++ { print $NF }')
[ -n "$gcc_s" ] && cp -L --parents "$gcc_s" "$root"
# The suite as meson runs it (names, timeouts, arguments, environment, the
# programs the environment names - the faultd daemon - copied too), its
# Criterion programs only: the "install" suite checks headers, man
# pages and the ABI with the toolchain, nothing that depends on the kernel.
meson introspect "$build" --tests | python3 -c '
import json, os, shlex, sys
for t in json.load(sys.stdin):
    exe = t["cmd"][0]
    if not os.path.basename(exe).startswith("test-"):
        continue
    env = []
    for k, v in sorted(t["env"].items()):
        if os.path.isfile(v) and os.access(v, os.X_OK):
            print(v, file=sys.stderr)  # a program the test runs: FAULTD_DAEMON
            v = "/t/" + os.path.basename(v)
        env.append("%s=%s" % (k, v))
    print("run suite-%s %d env %s ./%s %s" % (t["name"], t["timeout"] or 300,
          " ".join(shlex.quote(e) for e in env), os.path.basename(exe),
          " ".join(shlex.quote(a) for a in t["cmd"][1:])))
    print(exe, file=sys.stderr)
' >"$root/t/suite.sh" 2>"$work/suite-programs"
while read -r t; do
	copy_with_libs "$t"
done <"$work/suite-programs"

cat >"$root/init" <<'GUEST'
#!/bin/sh
# The guest: run the checks, print them between @@ markers, power off.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm /dev/hugepages /var/tmp
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
mount -t tmpfs vartmp /var/tmp
mount -t hugetlbfs hugetlbfs /dev/hugepages
suite=$(sed -n 's/.*numa_check=\([a-z]*\).*/\1/p' /proc/cmdline)
# As meson test runs them (tests/meson.build).
export FAULTD_LOCK_MODE= ASAN_OPTIONS=handle_sigbus=0

echo "@@ KERNEL $(uname -r)"
for n in /sys/devices/system/node/node[0-9]*; do
	echo "@@ NODE ${n##*node} cpus $(cat $n/cpulist)" \
	     "$(grep MemTotal $n/meminfo | awk '{ print $4 " kB" }')"
done
cd /t

# run NAME SECONDS COMMAND...: the output between markers, and the status.
run() {
	name=$1 secs=$2
	shift 2
	echo "@@ BEGIN $name"
	start=$(date +%s)
	timeout "$secs" "$@" 2>&1
	rc=$?
	echo "@@ END $name rc=$rc time=$(( $(date +%s) - start ))s"
}

run test-numa 120 ./test-numa --jobs 1 --verbose
# Short: the point is where things run (and under TCG, speed means little).
for place in local remote; do
	run sweep-pf1-$place 120 ./faultd-bench sweep pf1 --json \
		--seconds 0.2 --rounds 1 --size 4 --place $place \
		--variants kernel,uffd-minimal,faultd,faultd-global
	run sweep-lock-$place-elsewhere 120 ./faultd-bench sweep lock --json \
		--seconds 0.2 --rounds 1 --size 4 --place $place \
		--handlers elsewhere
done
[ "$suite" = all ] && . ./suite.sh
echo "@@ DONE"
sync
poweroff -f
GUEST
chmod +x "$root/init"
guest_initrd "$root" "$work/initrd"

# ---------------------------------------------------------------------
# The guest
# ---------------------------------------------------------------------

echo "numa-check: booting $(basename "$kernel") with 2 NUMA nodes" \
     "(initramfs $(du -h "$work/initrd" | cut -f1), ${accel%%,*})," \
     "suite: $suite"
start=$(date +%s)
set +e
timeout "$limit" qemu-system-x86_64 \
	-machine q35 -accel "$accel" -cpu $cpu -smp 2,sockets=2 -m 4G \
	-object memory-backend-ram,id=m0,size=2G \
	-object memory-backend-ram,id=m1,size=2G \
	-numa node,nodeid=0,cpus=0,memdev=m0 \
	-numa node,nodeid=1,cpus=1,memdev=m1 \
	-kernel "$kernel" -initrd "$work/initrd" \
	-append "console=ttyS0 quiet panic=-1 numa_check=$suite" \
	-display none -monitor none -serial stdio -no-reboot </dev/null |
	guest_console | tee "$log" |
	grep --line-buffered '^@@ \(BEGIN\|END\)'
qemu_rc=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))

# ---------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------

failed=0
fail() { echo "FAIL: $*"; failed=1; }

echo
echo "numa-check: guest ran ${elapsed}s under ${accel%%,*} (qemu exit" \
     "$qemu_rc); console: $log"
grep '^@@ \(KERNEL\|NODE\)' "$log" | sed 's/^@@ /  /'
grep -q '^@@ DONE' "$log" ||
	fail "the guest did not finish (timeout ${limit}s or crash); see $log"
if grep -q -E 'Kernel panic|BUG:|WARNING:|Oops' "$log"; then
	fail "kernel errors on the console:"
	grep -E 'Kernel panic|BUG:|WARNING:|Oops' "$log" | head -5 | sed 's/^/  /' || true
fi
[ "$(grep -c '^@@ NODE' "$log")" -ge 2 ] || fail "the guest has no 2 NUMA nodes"

# The lines of block @1.
block() {
	awk -v b="$1" '$0 == "@@ BEGIN " b { on = 1; next }
		       on && /^@@ END / { exit } on' "$log"
}

block_rc() {
	sed -n "s/^@@ END $1 rc=\([0-9]*\).*/\1/p" "$log"
}

# A Criterion run: its counts, skips with reasons, failures.
criterion_summary() {
	local name=$1 rc out synth count

	rc=$(block_rc "$name")
	out=$(block "$name")
	synth=$(echo "$out" | sed -n 's/.*Synthesis: //p' | tail -1)
	count() { echo "$out" | grep -c "^\[$1\]" || true; }
	printf '  %-14s pass %2s  fail %s  skip %s  (exit %s%s)\n' \
	       "${name#suite-}" "$(count PASS)" "$(count FAIL)" \
	       "$(count SKIP)" "${rc:-none}" \
	       "$([ -n "$synth" ] || echo "; no Criterion synthesis: it did not finish")"
	echo "$out" | grep -E '^\[SKIP\]' | sed 's/^/      /' || true
	if [ "${rc:-x}" != 0 ] || [ -z "$synth" ]; then
		fail "$name:"
		echo "$out" | grep -E '\[FAIL\]|\[----\].*(Assertion|crash|signal|Timed out)|CRASH|Timeout' |
			head -20 | sed 's/^/      /' || true
	fi
}

# At one thread, the nodes a variant's pages were on against the thread's.
check_sweep() {
	local name=$1 want=$2 out

	out=$(block "$name")
	if [ "$(block_rc "$name")" != 0 ]; then
		fail "$name exited $(block_rc "$name")"
		echo "$out" | tail -5 | sed 's/^/      /'
		return
	fi
	echo "$out" | awk -v want="$want" -v name="$name" '
	function field(k,   m) {
		if (match($0, "\"" k "\":\"[^\"]*\""))
			return substr($0, RSTART + length(k) + 4,
				      RLENGTH - length(k) - 5)
		if (match($0, "\"" k "\":[^,}]*"))
			return substr($0, RSTART + length(k) + 3,
				      RLENGTH - length(k) - 3)
		return ""
	}
	/"variant"/ {
		v = field("variant"); n = field("threads")
		printf "      %-14s %2s thr %9s/s per thread, scal %-6s app node %s, handlers %s, %s, pages %s\n",
			v, n, field("per_thread"), field("scalability"),
			field("app_nodes"), field("handler_nodes"),
			field("mem_policy"), field("page_nodes")
		if (n != 1)
			next
		app = field("app_nodes"); pages = field("page_nodes")
		hnd = field("handler_nodes")
		ok = want == "local" ? pages == app : pages != app && pages != "-"
		if (!ok)
			printf "BAD %s %s: pages on %s, thread on %s\n", name, v, pages, app
		if (name ~ /elsewhere/ && hnd != "-" && hnd == pages)
			printf "BAD %s %s: handlers on the region node %s\n", name, v, pages
		if (name !~ /elsewhere/ && hnd != "-" && hnd != pages)
			printf "BAD %s %s: handlers on %s, region on %s\n", name, v, hnd, pages
		seen = 1
	}
	END { if (!seen) print "BAD " name ": no result lines" }' >"$work/check"
	echo "  $name:"
	grep -v '^BAD' "$work/check" || true
	if grep -q '^BAD' "$work/check"; then
		fail "$name: placement not as asked"
		grep '^BAD' "$work/check" | sed 's/^/      /'
	fi
}

echo "NUMA tests (node 1 of 2):"
criterion_summary test-numa
echo "Sweeps (at 1 thread: local = pages on the thread's node," \
     "remote = on the other; elsewhere = handlers off the region's node):"
[ "${accel%%,*}" = tcg ] &&
	echo "  (under TCG the rates are an emulator's: only the placement counts)"
for place in local remote; do
	check_sweep sweep-pf1-$place $place
	check_sweep sweep-lock-$place-elsewhere $place
done
if [ "$suite" = all ]; then
	echo "Whole suite on $(sed -n 's/^@@ KERNEL //p' "$log" | head -1):"
	for t in $(sed -n 's/^@@ BEGIN \(suite-.*\)/\1/p' "$log"); do
		criterion_summary "$t"
	done
	grep -q '^@@ BEGIN suite-' "$log" || fail "no test of the suite ran"
	echo "  (the \"install\" suite - ABI, headers, man pages - does not" \
	     "depend on the kernel and is not run in the guest)"
fi
echo
if [ $failed = 0 ]; then
	echo "numa-check: OK (${elapsed}s)"
else
	echo "numa-check: FAILED (${elapsed}s)"
fi
exit $failed
