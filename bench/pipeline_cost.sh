#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The user-space pipeline on the records of real recordings: records
# ResNet-18 and GPT training (bench/workloads, 40 steps each, default layers)
# with record --raw-dump, prints their bytes a span (the store as record
# left it, WAL included; the native trace and the JSON trace of the same
# spans), then times decode + store on their records
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
# The recordings as record left them: the store's files (WAL included) and
# the native trace per span, against the JSON trace of the same spans.
echo "the recordings (40 steps each, default layers), bytes a span:"
for w in resnet18 gpt; do
	n=$("$build/eacgm" sql "$w.db" "SELECT count(*) FROM spans" | tail -1)
	"$build/eacgm" export "$w.db" --perfetto "$w.json" >/dev/null
	store=$(cat "$w".db* | wc -c)
	native=$(wc -c <"$w.pftrace")
	json=$(wc -c <"$w.json")
	awk -v w="$w" -v n="$n" -v s="$store" -v p="$native" -v j="$json" 'BEGIN {
		printf "  %-9s %7d spans  store %5.1f B  native trace %6.1f B  JSON trace %6.1f B  (JSON / native %.1fx)\n",
			w, n, s / n, p / n, j / n, j / p }'
done
echo
"$build/bench/bench_pipeline_cost" --replay resnet18.raw gpt.raw --rounds 5
echo
"$build/bench/bench_pipeline_cost"
echo
"$build/bench/bench_block_codec" resnet18.db gpt.db
