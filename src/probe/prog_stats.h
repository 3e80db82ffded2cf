// SPDX-License-Identifier: Apache-2.0
// What eacgm's own BPF programs cost the machine: run counts and run time
// per program, as the kernel accounts them once BPF_STATS_RUN_TIME is on.
// The programs are found through this process's descriptors, so every
// layer's are counted without each one reporting its own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"

namespace eacgm {

struct ProgStats {
	std::string name; // the program's name, as bpftool shows it (16 bytes at most)
	uint64_t runs = 0;
	uint64_t run_ns = 0;
};

// Turns the kernel's run-time accounting on for as long as the descriptor
// lives (it adds two clock reads to every program run). Invalid when the
// kernel refuses (the numbers then stay 0).
UniqueFd enable_prog_stats();

// Per program name (copies of one program, e.g. per-function and
// uprobe_multi variants, stay apart), the programs this process holds.
std::vector<ProgStats> own_prog_stats();

} // namespace eacgm
