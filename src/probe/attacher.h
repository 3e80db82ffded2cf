// Decides where the span engine's probes go: finds the library files a spec
// names (installed ones, those a program links, those a process maps now or
// loads later with dlopen), resolves the symbols and attaches once per file.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "probe/elf_symbols.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"
#include "probe/spec.h"

namespace eacgm {

struct AttachedProbe {
	uint32_t spec_id;
	std::string path;
	std::string symbol;
	uint64_t offset;
};

class Attacher {
public:
	Attacher(SpanEngine &engine, ProcTracker &tracker, SpecSet specs);

	// Stores the compiled specs in the BPF spec table; call once before attaching.
	Result<void> load_specs();
	// Attaches every probe whose library matches this file, once per file.
	// Fails only for a --spec probe whose symbol is missing in a matching library.
	Result<void> attach_library(const std::string &path);
	// Attaches to the libraries (and the dynamic linker) a process maps now.
	Result<void> scan_process(uint32_t pid);
	// Libraries the specs name that are installed where libraries live
	// (the loader cache, CUDA toolkits) or that a program links.
	Result<void> attach_installed(const std::vector<std::string> &extra_libraries);

	const SpecSet &specs() const { return specs_; }
	const std::vector<AttachedProbe> &attached() const { return attached_; }
	// Things worth telling the user once (a built-in symbol missing, ...).
	std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }

private:
	bool wanted(const std::string &path) const;
	// Adds a probe per function of `elf` that a `match` pattern finds.
	Result<void> expand_pattern(size_t pattern, const ElfFile &elf,
				    const std::function<Result<void>(uint32_t, const ElfSymbol &)> &add);

	SpanEngine &engine_;
	ProcTracker &tracker_;
	SpecSet specs_;
	std::set<std::pair<uint64_t, uint64_t>> done_files_; // (dev, inode)
	std::vector<AttachedProbe> attached_;
	std::vector<std::string> warnings_;
	// (pattern, function, tensor layout) -> spec id
	std::map<std::tuple<size_t, std::string, std::pair<uint16_t, uint16_t>>, uint32_t> expanded_;
};

// The shared libraries a dynamically linked program loads at start, as its
// dynamic linker resolves them (ld.so --list); empty for scripts and static
// programs.
std::vector<std::string> linked_libraries(const std::string &program);

// Library files in the loader cache and the usual CUDA locations.
std::vector<std::string> installed_libraries();

} // namespace eacgm
