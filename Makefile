# The two commands of the README: `make demo` and `make test`.
# Each first runs the idempotent set-up (apt-get installs what is missing).
#
# ARCH=arm64 on an x86-64 machine cross-builds for arm64 into build-arm64
# (Debian's cross toolchain, cmake/aarch64-linux-gnu.cmake; set up by
# scripts/setup-arm64.sh), and `make ARCH=arm64 test-unit` runs the unit
# tests under qemu-user (docs/arm64.md). Unset, or the machine's own
# processor: a native build.
ARCH ?=
HOST_ARCH := $(shell uname -m)
ifneq ($(filter $(ARCH),arm64 aarch64),)
ifneq ($(HOST_ARCH),aarch64)
CROSS := arm64
endif
else ifneq ($(filter-out x86_64 amd64 $(HOST_ARCH),$(ARCH)),)
$(error ARCH=$(ARCH): eacgm builds natively or, from x86-64, for ARCH=arm64)
endif
ifeq ($(CROSS),arm64)
BUILD ?= build-arm64
CMAKE_ARGS = -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/aarch64-linux-gnu.cmake
endif
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup build test test-unit test-gpu deb demo pictures bench eval fuzz format clean
all: build

setup:
	@scripts/setup.sh
ifeq ($(CROSS),arm64)
	@scripts/setup-arm64.sh
endif

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

ifeq ($(CROSS),arm64)
# Built for arm64, only the unit tests run here (under qemu-user); the bpf
# and e2e tests need an arm64 kernel: `make test` on an arm64 machine.
test: test-unit
	@echo "make ARCH=arm64 test: ran the unit tests under qemu-user; the bpf and e2e tests need an arm64 machine (docs/arm64.md)"

test-unit: build
	scripts/test-arm64.sh $(BUILD)
else
test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -LE gpu

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -L unit
endif

# On a machine with an NVIDIA GPU and driver: the gpu layer against the real NVML.
test-gpu: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -L gpu

# The Debian package, eacgm_VERSION_ARCH.deb in $(BUILD) (docs/install.md):
# the install rules of cmake/package.cmake through CPack, its dependencies
# from the binaries' shared libraries.
deb: build
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/eacgm_*.deb

demo: build
	@scripts/demo.sh $(BUILD)

# Redraws the README's pictures (docs/img/timeline.png, flamegraph.png) from a
# recording of a real training run: eval/workload.py's GPT over 2 gloo ranks,
# traced with the python, torch, gloo and host layers (scripts/pictures.sh,
# scripts/draw_readme.py); about half a minute, needs root.
pictures: build
	scripts/pictures.sh $(BUILD)

# Regenerates bench/RESULTS.md (45 to 60 minutes on the 2-core VM).
bench: build
	bench/run_all.sh $(BUILD)

# Regenerates eval/RESULTS.md: detection against injected faults and on
# fault-free control runs, beside scikit-learn's baselines, over SEEDS seeds
# (not the tuning seed); needs root. SEEDS=1 for a quick look.
SEEDS ?= 3
eval: build
	/usr/bin/python3 eval/run_eval.py $(BUILD) --seeds $(SEEDS)

# libFuzzer over the parsers and readers of tests/fuzz (clang-14 with ASan and
# UBSan, in build-fuzz): FUZZ_SECONDS each (10 minutes), two at a time;
# FUZZERS="spec config" for some. `make test` replays their corpora.
FUZZ_SECONDS ?= 600
fuzz: setup
	scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZERS)

# Formats the sources with the root .clang-format (ctest format.check fails on
# a file it would change).
format: setup
	@scripts/format.sh

clean:
	rm -rf $(BUILD)
