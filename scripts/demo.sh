#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: records a real CUDA program and a short PyTorch CPU training run
# with eacgm, and shows what came out.
set -euo pipefail
build=${1:-build}
out=demo-out
mkdir -p "$out"
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
eacgm=("${sudo_cmd[@]}" "$build/eacgm")

prog=$build/demo/cuda_demo
[[ -x $prog ]] || prog=$build/tests/testprogs/cuda_calls
echo "== 1. a CUDA program: eacgm record -- $prog"
"${eacgm[@]}" record -o "$out/cuda.db" --perfetto "$out/cuda.trace.json" -- "$prog"

train=(/usr/bin/python3 tests/testprogs/torch_train.py 4 20 256 32)
echo
echo "== 2. PyTorch CPU training, 4 Linear layers, 20 steps: eacgm record -- ${train[*]}"
"${eacgm[@]}" record -o "$out/torch.db" --perfetto "$out/torch.trace.json" -- "${train[@]}"

# Recordings and traces are owner-only (docs/security.md): hand them to
# whoever ran the demo, who reads them next.
[[ ${#sudo_cmd[@]} -eq 0 ]] || sudo chown "$(id -u):$(id -g)" "$out"/*

echo
echo "== the recordings stay queryable: eacgm summary $out/torch.db (first lines)"
"$build/eacgm" summary "$out/torch.db" | sed -n 1,6p # sed reads all of it: no SIGPIPE under pipefail
echo
echo "Open $out/cuda.trace.json or $out/torch.trace.json in https://ui.perfetto.dev to see the timelines;"
echo "query the .db files with eacgm sql, e.g. $build/eacgm sql $out/torch.db \"SELECT name, count(*) FROM spans GROUP BY name\""
echo "(tables: spans, metrics, events, anomalies, processes, threads, drops, meta; plain sqlite3 cannot read spans"
echo "or metrics, which are kept in blocks: load $build/eacgm_sql.so into it first, docs/store.md)."
