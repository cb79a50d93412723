#!/bin/bash
# bench-scaling.sh - the lock and convoy scenarios' scaling, measured on
# this machine and modelled: what `make bench-scaling` runs, so that anyone
# with a big host can check the projections docs/plots/scaling-lock.* and
# scaling-convoy.* show.
#
#   scripts/bench-scaling.sh [BUILD_DIR] [OUT_DIR]   (build, docs/plots)
#
# 1. calibration: `faultd-bench run lock` and `run convoy` at 1 thread
#    bound to one CPU (the service times: CPU per fault, critical
#    sections, the churner, with no wake-up crossing CPUs), and, where
#    perf and tracefs are usable (root), a trace of lock's faultd variant
#    (bench/trace-report: mmap_lock holds, the churner's mmap_lock writes);
#    bench/scaling-model calibrate turns them into scaling-calib.json;
# 2. sweeps of lock (faultd, faultd-global, and same-thread:
#    faultd-sigbus, faultd-sigbus-global) and of convoy over threads
#    1..nproc (every count up to 8, then doubling, and nproc), with
#    --place none, and for lock local, interleave and remote where there
#    are several NUMA nodes; on a machine of at most 4 CPUs also bound to
#    one CPU; with SCALING_LOAD=N also under N busy processes of another
#    session (a measured load from other processes, as this machine's
#    neighbours make it): more points to check the model against;
# 3. the model at every measured point under that point's others' load
#    (scaling-validate.csv, with its error; nothing is fitted), and
#    projected to this host when quiet and to the hosts in
#    `bench/scaling-model hosts` (scaling-project-HOST.csv, both
#    scenarios);
# 4. figures: bench/plot per placed sweep (sweep-lock-PLACE.svg/png) and
#    bench/scaling-plot (scaling-lock.svg/png, scaling-convoy.svg/png),
#    with the load of the machine printed on them.
#
# Environment: SCALING_SECONDS (per round, default 0.5), SCALING_ROUNDS
# (default 5), SCALING_SAMPLES (host draws per projected point, default
# 8), SCALING_HOSTS (default "ivb-2s-48 2s-192"), SCALING_LOAD (busy
# processes for the loaded sweeps, default 0: none), SCALING_CHECK (more
# sweep CSVs to check the model against, such as sweeps made earlier
# under the neighbours' own load). Needs python3 and gnuplot; perf is
# optional.
set -euo pipefail

build=${1:-build}
out=${2:-docs/plots}
secs=${SCALING_SECONDS:-0.5}
rounds=${SCALING_ROUNDS:-5}
samples=${SCALING_SAMPLES:-8}
hosts=${SCALING_HOSTS:-ivb-2s-48 2s-192}
busy=${SCALING_LOAD:-0}
bench=$build/bench/faultd-bench
here=$(cd "$(dirname "$0")/.." && pwd)
model=$here/bench/scaling-model

[ -x "$bench" ] || { echo "bench-scaling: no $bench (make build)" >&2; exit 2; }
mkdir -p "$out"
cpus=$(nproc)
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
[ "$nodes" -ge 1 ] || nodes=1
load=()
note_load() { load+=("$1: $(uptime | sed 's/.*load average/load average/')"); }

# Thread counts: 1..8, then doubling, and nproc.
threads() {
	local n=1 list=""
	while [ $n -le "$1" ]; do
		list+="${list:+,}$n"
		if [ $n -lt 8 ]; then n=$((n + 1)); else n=$((n * 2)); fi
	done
	case ",$list," in *,"$1",*) ;; *) list+=",$1" ;; esac
	echo "$list"
}

echo "bench-scaling: $cpus CPUs, $nodes NUMA node(s); $rounds rounds of $secs s"
# The service times are measured with every thread on one CPU: no wake-up
# crosses CPUs there (what those cost is a parameter of its own), and
# the others' load of the other CPUs does not enter.
cpu=$(awk '/^Cpus_allowed_list/ { split($2, a, /[-,]/); print a[1] }' \
	/proc/self/status)
one=(taskset -c "$cpu")
note_load calibration
"${one[@]}" "$bench" run lock --threads 1 --rounds "$rounds" \
	--seconds "$secs" --json >"$out/scaling-calib-run.json"
"${one[@]}" "$bench" run convoy --threads 1 --rounds "$rounds" \
	--seconds "$secs" --json >"$out/scaling-calib-convoy.json"
trace=-
if [ "$(id -u)" = 0 ] && command -v perf >/dev/null; then
	data=$(mktemp /tmp/bench-scaling-XXXXXX.data)
	if "$here/bench/trace-report" record "$data" -- "${one[@]}" \
		"$bench" sweep lock \
		--threads 1 --variants faultd --seconds "$secs" --rounds 1 \
		>/dev/null 2>&1 &&
	   "$here/bench/trace-report" report "$data" --json \
		>"$out/scaling-trace.json"; then
		trace=$out/scaling-trace.json
		"$here/bench/trace-report" report "$data" >"$out/scaling-trace.txt"
	else
		echo "bench-scaling: no trace (perf record failed): kernel-side" \
		     "figures are the model's defaults" >&2
	fi
	rm -f "$data"
fi
"$model" calibrate "$out/scaling-calib-run.json" "$trace" "$cpus" \
	"$out/scaling-calib-convoy.json" >"$out/scaling-calib.json"

sweeps=()
sweep() { # NAME ARGS...
	local name=$1
	shift
	note_load "$name"
	"$@" --csv --seconds "$secs" --rounds "$rounds" \
		>"$out/$name.csv"
	sweeps+=("$out/$name.csv")
}
places=none
[ "$nodes" -gt 1 ] && places="none local interleave remote"
for p in $places; do
	name=scaling-lock
	[ "$p" = none ] || name=scaling-lock-$p
	sweep "$name" "$bench" sweep lock --threads "$(threads "$cpus")" \
		--place "$p"
done
sweep scaling-convoy "$bench" sweep convoy --threads "$(threads "$cpus")"
checked=("$out/scaling-lock.csv" "$out/scaling-convoy.csv")
if [ "$cpus" -le 4 ]; then
	for s in lock convoy; do
		sweep scaling-$s-1cpu "${one[@]}" "$bench" sweep $s \
			--threads 1,2
		checked+=("$out/scaling-$s-1cpu.csv")
	done
fi
# Under load from other processes: busy loops in a session of their own
# (autogroup), as a neighbour's job; the sweeps measure what they got.
if [ "$busy" -gt 0 ]; then
	pids=()
	for _ in $(seq "$busy"); do
		setsid sh -c 'while :; do :; done' &
		pids+=($!)
	done
	for s in lock convoy; do
		sweep scaling-$s-loaded "$bench" sweep $s \
			--threads "$(threads "$cpus")"
		checked+=("$out/scaling-$s-loaded.csv")
	done
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || true
fi
[ "$nodes" -gt 1 ] || echo "bench-scaling: one NUMA node: no local," \
	"interleave or remote sweeps (they would only repeat place none)"

for f in ${SCALING_CHECK:-}; do
	checked+=("$f")
	sweeps+=("$f")
done
note_load model
"$model" validate "$out/scaling-calib.json" "${checked[@]}" \
	--out "$out/scaling-validate.csv"
projs=()
project() { # HOST OUT ARGS...
	local h=$1 f=$2
	shift 2
	for s in lock convoy; do
		"$model" project "$out/scaling-calib.json" --scenario $s \
			--host "$h" "$@" --out "$f.$s"
	done
	{ cat "$f.lock"; tail -n +2 "$f.convoy"; } >"$f"
	rm -f "$f.lock" "$f.convoy"
}
project this "$out/scaling-project-this.csv" --threads "$(threads "$cpus")" \
	--samples 3
for h in $hosts; do
	project "$h" "$out/scaling-project-$h.csv" --samples "$samples"
	projs+=(--project "$out/scaling-project-$h.csv")
done
grep '^#' "$out/scaling-validate.csv" || true

# Per placement, the sweep's own figure (sweep-lock-PLACE.*); place none
# is in scaling-lock.*, and `make bench` owns sweep-lock.*.
placed=()
for s in "${sweeps[@]}"; do
	case $s in *-local.csv | *-interleave.csv | *-remote.csv) placed+=("$s") ;; esac
done
[ ${#placed[@]} -eq 0 ] || "$here/bench/plot" -o "$out" "${placed[@]}"
text=$(IFS=';'; echo "${load[*]}")
for s in lock convoy; do
	"$here/bench/scaling-plot" -o "$out" --scenario $s \
		--calib "$out/scaling-calib.json" \
		--validate "$out/scaling-validate.csv" \
		$(printf -- '--sweep %s ' "${sweeps[@]}") "${projs[@]}" \
		--load "this machine while measuring: $text"
done
