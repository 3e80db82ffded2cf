#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs what bench/gpu_check.sh runs into one tarball small enough to carry to
# a lent GPU machine, whose image has CUDA and PyTorch but none of eacgm's
# libraries: eacgm, its SQL module, gpu_tests and bench_span_cost with their
# debug sections stripped (their symbol tables stay: doctor's self-test and
# the overhead budget probe eacgm's own functions), and under lib/ every
# shared library they load but the C and C++ runtimes, which the machine has
# in versions at least as new. gpu_check.sh puts BIN/lib on LD_LIBRARY_PATH.
#
# Usage: bench/gpu_pack.sh BUILD OUT.tgz
#   on the GPU machine: mkdir -p /tmp/g && tar xzf OUT.tgz -C /tmp/g &&
#                       bench/gpu_check.sh /tmp/g /tmp/gc
set -euo pipefail
build=$(realpath "${1:?usage: gpu_pack.sh BUILD OUT.tgz}")
out=$(realpath -m "${2:?usage: gpu_pack.sh BUILD OUT.tgz}")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
progs=("$build/eacgm" "$build/eacgm_sql.so" "$build/tests/gpu_tests" "$build/bench/bench_span_cost")
for p in "${progs[@]}"; do
	[ -f "$p" ] || { echo "gpu_pack.sh: $p is missing; run make build first" >&2; exit 1; }
	strip --strip-debug -o "$stage/$(basename "$p")" "$p"
done
# ldd lists each library once per program: the C runtime, the loader and
# libstdc++/libgcc stay behind.
ldd "${progs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
	grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s)\.so|/ld-linux' |
	while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar czf "$out" -C "$stage" .
echo "$out: $(du -h "$out" | cut -f1), $(ls "$stage/lib" | wc -l) libraries"
