// SPDX-License-Identifier: Apache-2.0
// Owner of bpf/proc.bpf.c: the set of traced processes (shared with every
// other BPF object), its fork/exec/exit tracking and the dynamic-linker probe.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "probe/links.h"
#include "probe/skeleton.h"
#include "common/result.h"

struct proc_bpf;
struct bpf_link;
struct bpf_map;

namespace eacgm {

class ProcTracker {
public:
	static Result<std::unique_ptr<ProcTracker>> open(bool trace_all);
	ProcTracker(const ProcTracker &) = delete;
	ProcTracker &operator=(const ProcTracker &) = delete;

	int traced_map_fd() const;
	// Adds a process to the traced set; its future children follow.
	Result<void> track(uint32_t pid);
	// Attaches the link-map probe (_dl_debug_state) of a dynamic linker, once
	// per file: after dlopen the agent rescans the process for libraries.
	Result<void> watch_dynamic_linker(const std::string &path);
	struct bpf_map *events_map() const;

private:
	ProcTracker() = default;
	Skeleton<struct proc_bpf> skel_ = no_skeleton<struct proc_bpf>();
	LinkSet links_; // after the skeleton: the links go first
	std::set<std::string> linkers_;
	bool multi_ = false; // the link-map probe attaches as a uprobe_multi link
};

} // namespace eacgm
