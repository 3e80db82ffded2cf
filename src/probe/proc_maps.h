// SPDX-License-Identifier: Apache-2.0
// /proc/PID/maps: which file backs each address range of a process. Used to
// turn a runtime address into (file, offset) and to find the libraries a
// process has loaded (e.g. the libcudart inside a Python venv).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

struct Mapping {
	uint64_t start = 0, end = 0, offset = 0; // [start, end) maps file bytes from offset
	std::string perms;                       // "r-xp"
	uint64_t dev_major = 0, dev_minor = 0, inode = 0;
	std::string path; // as the kernel wrote it: may be empty, "[vdso]", "... (deleted)"

	bool exec() const { return perms.size() > 2 && perms[2] == 'x'; }
};

// Parses <proc_root>/<pid>/maps (proc_root is injectable for tests).
Result<std::vector<Mapping>> read_maps(uint32_t pid, const std::string &proc_root = "/proc");

// The mapping containing addr, or nullptr. Maps are sorted by address, so this
// is a binary search.
const Mapping *mapping_for(const std::vector<Mapping> &maps, uint64_t addr);

// Distinct paths of regular files with at least one executable mapping, in
// order of first appearance: the code a uprobe can target. Data-only files
// (mmapped model weights, locale archives, /dev/nvidia*) are left out on
// purpose, as are anonymous and pseudo mappings ([vdso], [heap]) and files
// marked "(deleted)" (they no longer exist under that path).
std::vector<std::string> mapped_files(const std::vector<Mapping> &maps);

// The path under which this tool can open `path` as the process `pid` sees it.
// A process in another mount namespace (a container) maps files that exist
// only under <proc_root>/<pid>/root. Returns `path` itself when it is the same
// file (same device and inode) as seen through the process's root, or when the
// process's root cannot be reached (it exited) but `path` exists; otherwise
// the <proc_root>/<pid>/root form.
std::string host_path(uint32_t pid, const std::string &path, const std::string &proc_root = "/proc");

} // namespace eacgm
