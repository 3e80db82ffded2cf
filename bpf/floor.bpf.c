// SPDX-License-Identifier: GPL-2.0
/* The floor for benchmarks: an empty uprobe and uretprobe. Whatever the span
 * engine costs above this is eacgm's own work; the trap itself is the kernel's.
 * The same empty pair twice, as bpf/span.bpf.c has its programs twice: one
 * perf-event link per function (floor_entry, floor_exit), or one uprobe_multi
 * link (the _multi pair, whose attach type the benchmark sets before loading).
 * The kernel runs the two kinds differently around the program, so each kind
 * of link has a floor of its own. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int BPF_KPROBE(floor_entry) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(floor_exit) { return 0; }

SEC("uprobe")
int BPF_KPROBE(floor_entry_multi) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(floor_exit_multi) { return 0; }
