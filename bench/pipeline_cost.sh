#!/usr/bin/env bash
# The user-space pipeline on the records of real recordings: records
# ResNet-18 and GPT training (bench/workloads, 40 steps each, default layers)
# with record --raw-dump, then times decode + store on their records
# (bench_pipeline_cost --replay: today's Span path and the typed path in
# alternating rounds, SQLite's floor in the same run) and the block codec on
# the recordings (bench_block_codec).
# Usage: bench/pipeline_cost.sh BUILD_DIR   (needs root; about 2 minutes)
set -euo pipefail
build=$(realpath "${1:?usage: pipeline_cost.sh BUILD_DIR}") # it cd-s into a temporary directory
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for w in resnet18 gpt; do
	"$build/eacgm" record -o "$tmp/$w.db" --raw-dump "$tmp/$w.raw" --perfetto "$tmp/$w.pftrace" -- \
		/usr/bin/python3 "$here/workloads/${w}_train.py" 40 --warmup-s 0 >"$tmp/$w.log" 2>&1 ||
		{ cat "$tmp/$w.log" >&2; exit 1; }
done
cd "$tmp"
"$build/bench/bench_pipeline_cost" --replay resnet18.raw gpt.raw --rounds 5
echo
"$build/bench/bench_pipeline_cost"
echo
"$build/bench/bench_block_codec" resnet18.db gpt.db
