#!/usr/bin/env bash
# `make demo`: records a real CUDA program with eacgm and shows what came out.
set -euo pipefail
build=${1:-build}
out=demo-out
mkdir -p "$out"
prog=$build/demo/cuda_demo
[[ -x $prog ]] || prog=$build/tests/testprogs/cuda_calls
echo "== eacgm record -- $prog"
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" "$build/eacgm" record -o "$out/cuda.db" --perfetto "$out/cuda.trace.json" -- "$prog"
echo
echo "== the recording, queried again: eacgm summary $out/cuda.db"
"$build/eacgm" summary "$out/cuda.db" | head -5
echo
echo "Open $out/cuda.trace.json in https://ui.perfetto.dev to see the timeline;"
echo "query $out/cuda.db with sqlite3 (tables: spans, processes, threads, drops, meta)."
