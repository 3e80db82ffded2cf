#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What only a machine with an NVIDIA GPU can check: the gpu layer against the
# real NVML (the `gpu` ctest label), and eacgm recording real CUDA work, a
# compiled CUDA program and PyTorch training on the GPU, with what each
# recording holds printed for a reader to check. The cost of tracing GPU
# training is bench/train_cost.py with --device cuda, run after this.
#
# Usage: bench/gpu_check.sh BIN OUT [check|cost|layers]
#   BIN  the build folder (make build), or a folder with eacgm, gpu_tests and
#        bench_span_cost side by side, and their libraries under lib/ (what
#        bench/gpu_pack.sh packs, to carry to a GPU machine)
#   OUT  where the recordings and logs go
#   check (default): machine, gpu tests, the CUDA program and a GPU ResNet-18
#        recorded, bench_span_cost on this CPU
#   cost: bench/train_cost.py --device cuda (3 rounds, both workloads)
#   layers: what each layer costs GPU ResNet-18 (3 rounds of the default
#        layers, cuda+gpu+host, those and torch, every layer but the
#        sampler: about 6 minutes on a 16-vCPU machine)
# PYTHON (default python3) is the interpreter with torch and torchvision.
# Needs root (eacgm attaches uprobes).
set -uo pipefail
bin=$(realpath "${1:?usage: gpu_check.sh BIN OUT [check|cost]}")
out=$(realpath -m "${2:?usage: gpu_check.sh BIN OUT [check|cost]}")
what=${3:-check}
py=${PYTHON:-python3}
root=$(dirname "$(dirname "$(realpath "$0")")")
mkdir -p "$out"
# A carried pack's libraries (gpu_pack.sh); the traced programs inherit the
# path too, harmlessly: the pack holds no library of CUDA or PyTorch.
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

section() { printf '\n== %s\n' "$*"; }

# A program of BIN: side by side, or where the build puts it.
prog() {
	if [ -x "$bin/$1" ]; then echo "$bin/$1"; else echo "$bin/$2/$1"; fi
}
gpu_tests=$(prog gpu_tests tests)
span_cost=$(prog bench_span_cost bench)

# The spans of a recording by layer and the busiest names, its GPU metrics
# and its drops: enough to see whether each layer saw what ran.
describe() {
	"$py" - "$1" "$bin/eacgm_sql.so" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.enable_load_extension(True)
c.load_extension(sys.argv[2])  # spans' module (docs/store.md)
q = lambda sql: c.execute(sql).fetchall()
print("spans by layer:", q("SELECT layer, count(*) FROM spans GROUP BY layer"))
for layer in ("cuda", "torch", "python", "nccl"):
    top = q("SELECT name, count(*), sum(dur_ns)/1000, sum(bytes) FROM spans WHERE layer='%s' "
            "GROUP BY name ORDER BY 2 DESC LIMIT 8" % layer)
    for name, n, us, b in top:
        print("  %-6s %-48s %7d calls %10d us %s" % (layer, name[:48], n, us, "" if b is None else "%d bytes" % b))
kern = q("SELECT json_extract(args,'$.kernel'), count(*) FROM spans WHERE name LIKE 'cudaLaunchKernel%' "
         "GROUP BY 1 ORDER BY 2 DESC LIMIT 5")
print("kernels named:", kern)
errs = q("SELECT name, ret_name, count(*) FROM spans WHERE layer='cuda' AND ret != 0 GROUP BY 1, 2 LIMIT 10")
print("cuda calls that failed:", errs)
print("gpu metrics:", q("SELECT name, count(*), min(value), max(value) FROM metrics WHERE layer='gpu' "
                       "GROUP BY name ORDER BY name"))
print("gpu events:", q("SELECT name, args FROM events WHERE layer='gpu' LIMIT 5"))
print("anomalies:", q("SELECT layer, name, count(*), min(score), max(score) FROM anomalies GROUP BY 1, 2 "
                      "ORDER BY 3 DESC LIMIT 5"))
print("drops:", q("SELECT * FROM drops WHERE count > 0"))
print("meta:", {k: v for k, v in q("SELECT key, value FROM meta") if k.startswith(("agent", "attach", "warn", "layers"))})
EOF
}

check() {
	section machine
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	uname -r
	grep -m1 'model name' /proc/cpuinfo
	nproc
	"$py" -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)'
	ls -la /sys/kernel/btf/vmlinux

	section "gpu tests (real NVML)"
	"$gpu_tests" 2>&1 | tail -25

	section "eacgm doctor"
	"$bin/eacgm" doctor 2>&1 | tail -30

	section "a CUDA program"
	if nvcc -cudart shared -o "$out/cuda_demo" "$root/demo/cuda_demo.cu" 2>"$out/nvcc.log"; then
		"$bin/eacgm" record -o "$out/cuda_demo.db" -- "$out/cuda_demo" >"$out/cuda_demo.txt" 2>&1
		echo "exit $?"
		tail -40 "$out/cuda_demo.txt"
		describe "$out/cuda_demo.db"
	else
		cat "$out/nvcc.log"
	fi

	section "ResNet-18 trained on the GPU, every layer"
	# --raw-dump keeps what decode saw: bench_pipeline_cost --replay
	# "$out/resnet_gpu.raw" times the span path on real GPU calls anywhere.
	"$bin/eacgm" record -o "$out/resnet_gpu.db" --raw-dump "$out/resnet_gpu.raw" -- "$py" "$root/bench/workloads/resnet18_train.py" 40 \
		--device cuda --batch 64 --size 128 >"$out/resnet_gpu.txt" 2>&1
	echo "exit $?"
	tail -40 "$out/resnet_gpu.txt"
	describe "$out/resnet_gpu.db"

	section "per call, on this CPU"
	"$span_cost" 2>&1 | tail -30
}

cost() {
	section "train_cost on the GPU"
	"$py" "$root/bench/train_cost.py" "$bin/eacgm" 3 --device cuda --python "$py" --steps 100
}

layers() {
	section "what each layer costs ResNet-18 on the GPU"
	"$py" "$root/bench/train_cost.py" "$bin/eacgm" 3 --only resnet18 --device cuda --python "$py" --steps 100 \
		--configs "eacgm default;eacgm --layers cuda,gpu,host;eacgm --layers cuda,torch,gpu,host;eacgm --sample-hz 0"
}

case $what in
check) check ;;
cost) cost ;;
layers) layers ;;
*) echo "gpu_check.sh: unknown step '$what' (check, cost or layers)" >&2; exit 2 ;;
esac
