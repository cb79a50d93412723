# A thin wrapper over meson for the two-command quick start:
#   make demo   install what is missing, build, run the demo (a lazy
#               restore through the faultd daemon)
#   make test   the same, then the whole test suite, the fault injection
#               suite, the suites under sanitizers and the fuzzers (CI)
#   make bench  the benchmarks, and thread sweeps plotted into $(PLOTS)
#   make bench-scaling  the lock and convoy scenarios over threads
#               1..nproc (and NUMA placements), a model checked against
#               every point and projected to big hosts, CSV and figures
#               into $(PLOTS) (scripts/)
#   make stress MINUTES=n  a long run of the stress and load suites
#   make numa-check  the tests and placement on a two-node NUMA guest
#               running the Debian 12 kernel (6.1), see scripts/
#   make systemd-check  faultd's units and fd store under a real systemd
#               (PID 1 of a guest): socket activation, kill -9, stop,
#               restart, the start limit, the journal (scripts/)
#
# Every build directory this file sets up treats a warning as an error
# (WERROR=false for a compiler newer than the one CI uses), as do the
# sanitizer and fuzz builds (scripts/sanitize.sh, tests/fuzz/run.sh). A
# directory set up before keeps its own setting: CI starts from a clean
# checkout.
BUILD ?= build
WERROR ?= true
MESON_OPTS ?=
MINUTES ?= 10
PLOTS ?= docs/plots
SWEEP_OPTS ?= --seconds 0.5 --rounds 3
FI_BUILD ?= build-fi
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30

.PHONY: all deps build demo test check-inject check-sanitize check-fuzz \
	bench bench-scaling numa-check systemd-check stress clean

all: build

deps:
	@sh scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) -Dwerror=$(WERROR) $(MESON_OPTS)

build: deps
	@$(MAKE) --no-print-directory $(BUILD)/build.ninja
	ninja -C $(BUILD)

# The main job: a faultd daemon on a temporary socket, a 256 MiB region
# checkpointed and restored lazily through it in a fresh process, every
# byte checked; then the daemon is stopped.
demo: build
	@sock=$$(mktemp -u /tmp/faultd-demo-XXXXXX.sock); \
	./$(BUILD)/daemon/faultd --socket $$sock & daemon=$$!; \
	./$(BUILD)/examples/checkpoint_restore --socket $$sock; rc=$$?; \
	kill $$daemon; wait $$daemon; exit $$rc

# The plain suites, then what CI runs besides: the failure points (a build
# with -Dfault-injection=true and the lock assertions of -Ddebug-checks),
# the suites under ASan+UBSan and TSan
# (scripts/sanitize.sh), and each fuzzer for FUZZ_SECONDS.
test: build
	meson test -C $(BUILD) --print-errorlogs
	@$(MAKE) --no-print-directory check-inject check-sanitize check-fuzz

check-inject: build
	@[ -f $(FI_BUILD)/build.ninja ] || meson setup $(FI_BUILD) \
		-Dwerror=$(WERROR) -Dfault-injection=true -Ddebug-checks=true \
		-Dexamples=false -Dbench=false
	ninja -C $(FI_BUILD) tests/test-inject daemon/faultd
	meson test -C $(FI_BUILD) --no-rebuild --suite inject --print-errorlogs

check-sanitize: deps
	sh scripts/sanitize.sh all

check-fuzz: deps
	sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The stress and load suites for about MINUTES minutes (scripts/stress.sh).
stress: build
	sh scripts/stress.sh $(BUILD) $(MINUTES)

# Every scenario with short rounds, then short sweeps of pf1 and lock over
# the thread counts this machine has, as CSV and figures (bench/plot).
bench: build
	@FAULTD_EXTRA_PKGS=gnuplot-nox sh scripts/deps.sh
	./$(BUILD)/bench/faultd-bench run all
	@mkdir -p $(PLOTS)
	./$(BUILD)/bench/faultd-bench sweep pf1 --csv $(SWEEP_OPTS) \
		--variants kernel,uffd-minimal,faultd,faultd-global \
		>$(PLOTS)/sweep-pf1.csv
	./$(BUILD)/bench/faultd-bench sweep lock --csv $(SWEEP_OPTS) \
		>$(PLOTS)/sweep-lock.csv
	bench/plot -o $(PLOTS) $(PLOTS)/sweep-pf1.csv $(PLOTS)/sweep-lock.csv

# Threads 1..nproc, placements where there are NUMA nodes, the model
# checked against every point and projected (scripts/bench-scaling.sh).
bench-scaling: build
	@FAULTD_EXTRA_PKGS="gnuplot-nox python3" sh scripts/deps.sh
	bash scripts/bench-scaling.sh $(BUILD) $(PLOTS)

# A KVM (or TCG) guest with two NUMA nodes and the Debian 12 kernel: the
# NUMA tests, placement sweeps and the whole suite (scripts/numa-check.sh).
numa-check: build
	@FAULTD_EXTRA_PKGS="qemu-system-x86 linux-image-amd64 busybox-static \
		cpio" sh scripts/deps.sh
	bash scripts/numa-check.sh $(BUILD)

# A guest with systemd as PID 1 and a minimal Debian root (made once with
# mmdebstrap, cached in /var/cache/faultd): the build installed under its
# prefix, faultd.socket enabled, a restore through it with the daemon
# killed, stopped, restarted and its start limit hit (scripts/
# systemd-check.sh; exit 77: skipped, with the reason).
systemd-check: build
	@FAULTD_EXTRA_PKGS="qemu-system-x86 linux-image-amd64 busybox-static \
		cpio mmdebstrap e2fsprogs kmod" sh scripts/deps.sh
	bash scripts/systemd-check.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(FI_BUILD) $(FUZZ_BUILD) build-asan build-tsan
