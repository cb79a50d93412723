# A thin wrapper over meson for the two-command quick start:
#   make demo   install what is missing, build, run the demo
#   make test   the same, then the whole test suite
BUILD ?= build
MESON_OPTS ?=
MINUTES ?= 10

.PHONY: all deps build demo test bench stress clean

all: build

deps:
	@sh scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps
	@$(MAKE) --no-print-directory $(BUILD)/build.ninja
	ninja -C $(BUILD)

demo: build
	./$(BUILD)/examples/regions

test: build
	meson test -C $(BUILD) --print-errorlogs

bench: build
	./$(BUILD)/bench/faultd-bench run all

clean:
	rm -rf $(BUILD)
