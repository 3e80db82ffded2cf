#!/usr/bin/env bash
# Regenerates the pinned bpf/vmlinux.h from the running kernel's BTF.
# The pinned copy keeps builds reproducible; CO-RE relocations make the
# programs load on other kernels too. Run it when a new kernel type is needed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
btf=${1:-/sys/kernel/btf/vmlinux}
[ -r "$btf" ] || { echo "gen-vmlinux: no BTF at $btf (a kernel with CONFIG_DEBUG_INFO_BTF=y is needed)" >&2; exit 1; }
bpftool btf dump file "$btf" format c > "$here/bpf/vmlinux.h.tmp"
mv "$here/bpf/vmlinux.h.tmp" "$here/bpf/vmlinux.h"
echo "wrote bpf/vmlinux.h from $btf ($(uname -r))"
