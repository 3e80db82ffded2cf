#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the fuzzers of tests/fuzz with libFuzzer: builds them with clang-14,
# ASan and UBSan in build-fuzz (EACGM_FUZZ), then runs each for SECONDS
# (default 600), two at a time at low priority, starting from its corpus in
# tests/fuzz/NAME. What they find new goes to build-fuzz/corpus/NAME, and a
# crash, leak, timeout or UB report to build-fuzz/artifacts/NAME/ (the
# fuzzer stops at the first). With FUZZ_MERGE=1 the inputs that reach new
# code are merged into tests/fuzz/NAME afterwards (`make test` replays that
# directory, so keep it small: a few hundred files).
#   scripts/fuzz.sh [SECONDS] [NAME...]     e.g. scripts/fuzz.sh 60 spec config
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
	seconds=$1
	shift
fi
build=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_PARALLEL:-2} # the VM has 2 cores, shared

if [[ ! -f $build/CMakeCache.txt ]]; then
	# -O1 -g, asserts kept: what libFuzzer's documentation advises.
	CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DEACGM_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
fi
names=("$@")
if ((${#names[@]} == 0)); then
	for src in tests/fuzz/*.cpp; do
		n=$(basename "$src" .cpp)
		[[ $n == replay_main ]] || names+=("$n")
	done
fi
targets=()
for n in "${names[@]}"; do
	[[ -f tests/fuzz/$n.cpp ]] || { echo "fuzz: no tests/fuzz/$n.cpp" >&2; exit 2; }
	targets+=("fuzz_$n")
done
mkdir -p "$build/logs"
if ! nice -n 10 cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/logs/build.log" 2>&1; then
	tail -n 40 "$build/logs/build.log" >&2
	echo "fuzz: the build failed (log: $build/logs/build.log)" >&2
	exit 1
fi

# The longest input each fuzzer makes: about the size of what it reads in
# practice, so that time goes to structure rather than to bulk.
max_len() {
	case $1 in
	spec) echo 8192 ;;      # the built-in specs' python.json and gloo.json fit
	config) echo 4096 ;;
	proc_maps) echo 8192 ;;
	store) echo 16384 ;;    # the seeds are 11 KiB (512-byte pages)
	store_rows) echo 2048 ;; # up to 64 row operations
	elf) echo 16384 ;;
	*) echo 4096 ;;
	esac
}

# The SQLite and ELF fuzzers write each input to a file: memory, not disk.
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then
	export TMPDIR=/dev/shm
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
	local n=$1 corpus=$build/corpus/$1 artifacts=$build/artifacts/$1/ log=$build/logs/$1.log
	mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
	touch "$log.start" # what this run found is newer: older findings stay, unreported
	local dict=()
	[[ -f tests/fuzz/$n.dict ]] && dict=(-dict="tests/fuzz/$n.dict")
	# The first directory takes what is found; the second, the kept corpus,
	# is only read.
	# (The group's stderr: bash's own "Aborted" line when a fuzzer stops on
	# a crash; the summary says so.)
	{
		nice -n 10 "$build/tests/fuzz/fuzz_$n" -max_total_time="$seconds" -max_len="$(max_len "$n")" \
			-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" \
			"${dict[@]}" "$corpus" "tests/fuzz/$n" >"$log" 2>&1
	} 2>/dev/null || true
	if [[ ${FUZZ_MERGE:-0} == 1 ]]; then
		# Edges only (no hit counts): a corpus a third to a tenth the size.
		nice -n 10 "$build/tests/fuzz/fuzz_$n" -merge=1 -use_counters=0 -max_len="$(max_len "$n")" -timeout=10 \
			"tests/fuzz/$n" "$corpus" >>"$log" 2>&1 || true
	fi
}

summary() {
	local n=$1 log=$build/logs/$1.log artifacts=$build/artifacts/$1
	local runs cov found
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	# The last status line: "#RUNS ... cov: C ft: F corp: N/SIZE ..."
	cov=$(grep -E '^#[0-9]+' "$log" | grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9]*[a-zA-Z]*' | tail -1)
	found=$(find "$artifacts" -type f -newer "$log.start" \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
		-o -name 'oom-*' -o -name 'slow-unit-*' \) | sort)
	printf 'fuzz %-10s %ss, %s runs, %s, kept corpus %s files; %s\n' "$n" "$seconds" "${runs:-?}" \
		"${cov:-no coverage line}" "$(find "tests/fuzz/$n" -type f | wc -l)" \
		"$([[ -z $found ]] && echo 'no crash' || echo "FOUND: $(echo $found)  (log: $log)")"
	[[ -z $found ]]
}

running=0
for n in "${names[@]}"; do
	if ((running >= jobs)); then
		wait -n || true
		running=$((running - 1))
	fi
	echo "fuzz: running $n for ${seconds}s (log: $build/logs/$n.log)"
	run_one "$n" &
	running=$((running + 1))
done
wait
status=0
for n in "${names[@]}"; do
	summary "$n" || status=1
done
exit $status
