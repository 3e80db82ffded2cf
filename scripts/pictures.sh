#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make pictures`: records a real training run with eacgm and draws the
# README's pictures from it (scripts/draw_readme.py) into docs/img/.
# The run is make eval's data-parallel job without faults (eval/workload.py):
# a small GPT-style transformer trained on the CPU with Debian's torch,
# DistributedDataParallel over 2 gloo ranks on this machine.
# Usage: scripts/pictures.sh [BUILD (build)] [OUTDIR (docs/img)]; STEPS=20 steps.
set -euo pipefail
build=${1:-build}
out=${2:-docs/img}
steps=${STEPS:-20}
work=$(mktemp -d /tmp/eacgm-pictures.XXXXXX)
trap 'rm -rf "$work"' EXIT
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)

# Both ranks under one record, started by one bash (sudo keeps no environment,
# so gloo's interface is set in there). They meet through a FileStore in
# $work; if the first to end failed, the other is stopped rather than left
# waiting for it at the rendezvous for gloo's 30 minutes. `wait -n` answers
# 127 when both have ended already (bash 5.2), which is no failure: each
# rank's own status comes from `wait PID`, which keeps it.
rank() {
  echo "/usr/bin/python3 eval/workload.py $work/steps.$1 --model gpt --steps $steps" \
    "--rank $1 --world 2 --store $work/store > $work/rank$1.log 2>&1"
}
ranks="export GLOO_SOCKET_IFNAME=lo
$(rank 0) & a=\$!
$(rank 1) & b=\$!
wait -n; r=\$?
[ \$r -eq 0 ] || [ \$r -eq 127 ] || kill \$a \$b 2>/dev/null
wait \$a; ra=\$?; wait \$b; rb=\$?
exit \$((ra || rb))"

# python: every nn.Module call exactly (entered from C, on CPython 3.11+), the
# rest sampled; torch: the operators; gloo: DDP's all-reduces; host: the CPU
# wait. --overhead-budget 0 keeps every call, where the budget would probe the
# hottest operators in bursts after 10 s. A 64 MiB ring buffer: with the
# default 8 MiB, one run in four on the 2-vCPU VM lost enough Python samples
# (ring buffer full) that Tensor.backward was missing from most of its steps.
cmd=("$build/eacgm" record -o "$work/run.db" --layers python,torch,gloo,host --python-entries auto
     --overhead-budget 0 --ring-buffer-kb 65536 -- bash -c "$ranks")
echo "== eacgm record --layers python,torch,gloo,host --python-entries auto --overhead-budget 0" \
  "--ring-buffer-kb 65536 -- bash -c '2 ranks of eval/workload.py --model gpt --steps $steps'"
if ! "${sudo_cmd[@]}" "${cmd[@]}" > "$work/record.txt" 2>&1; then
  for f in "$work/record.txt" "$work"/rank*.log; do
    echo "-- $(basename "$f"), its end:" >&2
    tail -15 "$f" >&2
  done
  exit 1
fi
# The recording is owner-only (docs/security.md): hand it to whoever draws.
[[ ${#sudo_cmd[@]} -eq 0 ]] || sudo chown "$(id -u):$(id -g)" "$work/run.db"

/usr/bin/python3 scripts/draw_readme.py "$work/run.db" "$out" --eacgm "$build/eacgm" \
  --label "a GPT-style transformer, DDP over 2 gloo ranks on the CPU"
