// SPDX-License-Identifier: Apache-2.0
// Address -> function name inside a traced process, e.g. the host stub address
// passed to cudaLaunchKernel -> "void vector_add<float>(float*, ...)".
// Events arrive after the fact, sometimes after the process has exited, so the
// maps are cached per pid and can be captured early (snapshot) or borrowed
// from the parent of a forked child (inherit).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"

namespace eacgm {

// Thread-safe (one mutex); every method may be called from any thread.
class Symbolizer {
public:
	explicit Symbolizer(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}

	// "name" at a symbol start, "name+0x1c" inside it; nullopt when the address
	// is in no file-backed mapping, the file has no symbol there, or the maps
	// cannot be read. Results are cached per (pid, addr), misses included, so a
	// miss costs one re-read of the maps once, not on every event.
	std::optional<std::string> resolve(uint32_t pid, uint64_t addr);
	// The demangled name of the data object that starts exactly at addr
	// ("typeinfo for c10::Error"), cached as resolve() is.
	std::optional<std::string> resolve_object(uint32_t pid, uint64_t addr);
	// What resolve_object(pid, addr) says from now on (until an exec), from
	// a word of the process itself: an exception's type, named while the
	// process lived (its maps may be gone when its spans are decoded).
	void name_object(uint32_t pid, uint64_t addr, std::string name);

	// Reads the maps now: call when a process is first seen, so that addresses
	// of a short-lived process still resolve after it exits, and after an exec
	// or dlopen. When the read succeeds the pid's cached results are dropped
	// (after an exec they describe the old image).
	void snapshot(uint32_t pid);
	// The same with maps the caller has just read.
	void adopt(uint32_t pid, std::vector<Mapping> maps);
	// A forked child shares its parent's mappings: the parent's maps (read now
	// if not yet cached) serve the child until the child's own maps are read,
	// and whenever its /proc entry is gone.
	void inherit(uint32_t child, uint32_t parent);
	// A new image: what was read or inherited before says nothing about it;
	// the next use (or a fork from it) reads the maps again.
	void exec(uint32_t pid);
	// Drops the pid's maps and results. Parsed ELF files stay cached by path.
	void forget(uint32_t pid);
	// From now on, in this process, `handle` stands for the code at `addr`:
	// an opaque value a library handed out for a function (a spec's "alias",
	// as CUDA 12+ launches a kernel by the cudaKernel_t that __cudaGetKernel
	// made for its host stub). A fork inherits it; an exec forgets it.
	void alias(uint32_t pid, uint64_t handle, uint64_t addr);

private:
	struct Proc {
		std::shared_ptr<const std::vector<Mapping>> maps; // shared with forked children
		bool own = false; // maps read from this pid's /proc entry (not inherited)
		// A forked child's parent's maps, kept after its own are read: a
		// process read while it exits shows part of its maps (the kernel
		// unmaps as it goes), and what it ran before exec is in them.
		std::shared_ptr<const std::vector<Mapping>> inherited;
		std::unordered_map<uint64_t, std::optional<std::string>> results, objects;
		std::unordered_map<uint64_t, uint64_t> aliases; // handle -> address it stands for
	};
	static bool take(Proc &p, std::vector<Mapping> maps);
	bool read(uint32_t pid, Proc &p);
	std::optional<std::string> lookup(uint32_t pid, const std::vector<Mapping> &maps, uint64_t addr, bool object);
	std::optional<std::string> find(uint32_t pid, uint64_t addr, bool object);
	const ElfFile *elf(const std::string &path);

	std::string proc_root_;
	std::mutex mu_;
	std::unordered_map<uint32_t, Proc> procs_;
	std::unordered_map<std::string, std::optional<ElfFile>> elfs_; // nullopt: unreadable, do not retry
};

} // namespace eacgm
