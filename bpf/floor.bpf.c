// SPDX-License-Identifier: GPL-2.0
/* The floor for benchmarks: an empty uprobe and uretprobe. Whatever the span
 * engine costs above this is eacgm's own work; the trap itself is the kernel's. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int BPF_KPROBE(floor_entry) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(floor_exit) { return 0; }
