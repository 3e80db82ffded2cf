// SPDX-License-Identifier: Apache-2.0
// Decides where the span engine's probes go: finds the library files a spec
// names (installed ones, those a program links, those a process maps now or
// loads later with dlopen), resolves the symbols and attaches once per file.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "probe/elf_prefetch.h"
#include "probe/elf_symbols.h"
#include "probe/first_insn.h"
#include "probe/proc_maps.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"
#include "probe/spec.h"

namespace eacgm {

struct AttachedProbe {
	uint32_t spec_id;
	std::string path;
	std::string symbol;
	uint64_t offset; // where the probe is: the function's, or past its landing pad (src/arch)
};

// Arguments a pattern probe reads from each matched function's signature
// (the torch layer's leading tensors), for the functions of one library
// file. `args` null: the probes keep the arguments their spec lists. `key`
// tells readings apart (the torch layer: its TensorImpl layout): functions
// of the same name read with the same key share one compiled spec.
struct SignatureArgs {
	std::function<std::vector<ArgSpec>(const std::string &demangled)> args;
	uint64_t key = 0;
	std::string warning; // said once to the user when not empty
};
// Given a pattern spec that asks for signature arguments and the file it
// matched in. Set by the layer that knows the signatures.
using SignatureReader = std::function<SignatureArgs(const ProbeSpec &pattern, const std::string &path)>;

class Attacher {
public:
	Attacher(SpanEngine &engine, ProcTracker &tracker, SpecSet specs);

	// Stores the compiled specs in the BPF spec table; call once before attaching.
	Result<void> load_specs();
	// Attaches every probe whose library matches this file, once per file.
	// Fails only for a --spec probe whose symbol is missing in a matching library.
	Result<void> attach_library(const std::string &path);
	// Attaches to the libraries (and the dynamic linker) a process maps now.
	// Returns the files it maps that it did not map at its last scan.
	Result<std::vector<std::string>> scan_process(uint32_t pid);
	// The same on maps already read: a dlopen scan shares one reading of
	// /proc/PID/maps with the symbolizer.
	Result<std::vector<std::string>> scan_maps(uint32_t pid, const std::vector<Mapping> &maps);
	// A forked child maps what its parent maps: it starts from the parent's
	// files. An exec'd or exited process starts afresh.
	void inherit(uint32_t child, uint32_t parent);
	void forget(uint32_t pid) { judged_.erase(pid); }
	// Libraries the specs name that are installed where libraries live
	// (the loader cache, CUDA toolkits) or that a program links.
	Result<void> attach_installed(const std::vector<std::string> &extra_libraries);

	// How pattern specs that ask for signature arguments (tensor_args) get
	// them; without a reader they keep the arguments they list.
	void set_signature_reader(SignatureReader r) { signature_reader_ = std::move(r); }
	// ELF files read ahead (at start, while the BPF objects load); not owned.
	void use_prefetch(ElfPrefetch *p) { prefetch_ = p; }
	const SpecSet &specs() const { return specs_; }
	const std::vector<AttachedProbe> &attached() const { return attached_; }
	// attached()[from..] as places in files, named as spans show them.
	std::vector<ProbeSite> sites(size_t from = 0) const;
	// Things worth telling the user once (a built-in symbol missing, ...).
	std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }

	// Whether a spec names this library file.
	bool wanted(const std::string &path) const;
	// Puts the exception guard's probes on a library that holds a
	// process's unwinder, C++ runtime or longjmp (probe/unwind_guard.h),
	// once per file. Called for such files before any other of the same
	// process: no return probe of it is live before its guard is.
	Result<void> guard_library(const std::string &path);

private:
	// Adds a probe per function of `elf` that a `match` pattern finds.
	// `matched`: what the prefetch found per pattern (null: match here).
	Result<void> expand_pattern(size_t pattern, const ElfFile &elf,
				    const std::map<std::string, std::vector<uint32_t>> *matched,
				    const std::function<Result<void>(uint32_t, const ElfSymbol &)> &add);

	// The guard's probes on a file already open (its sites, if any).
	Result<void> guard_elf(const std::string &real, const ElfFile &elf);
	// Whether the probes of this file must wait for a guard this engine
	// lacks (a library of C++ exceptions): said once, and skipped.
	bool unguarded_refusal(const std::string &real, const ElfFile &elf);

	SpanEngine &engine_;
	ProcTracker &tracker_;
	SpecSet specs_;
	std::set<std::pair<uint64_t, uint64_t>> done_files_;  // (dev, inode)
	std::set<std::pair<uint64_t, uint64_t>> guard_files_; // (dev, inode) the guard judged
	// Per pid, the mapped files already judged. `import torch` loads a few
	// hundred extension modules, each a dlopen and a rescan of maps with
	// thousands of entries: judging only the new files keeps each rescan at
	// one read of the maps (measured: the rescans were most of eacgm's CPU
	// during the import, and the import took 2.6x as long under eacgm).
	std::unordered_map<uint32_t, std::unordered_set<std::string>> judged_;
	std::vector<AttachedProbe> attached_;
	std::vector<std::string> warnings_;
	ElfPrefetch *prefetch_ = nullptr;
	// The distinct `library` values of specs_ (as of libraries_for_ specs).
	mutable std::vector<std::string> libraries_;
	mutable size_t libraries_for_ = 0;
	// (pattern, function, signature reading key) -> spec id
	std::map<std::tuple<size_t, std::string, uint64_t>, uint32_t> expanded_;
	SignatureReader signature_reader_;
	// Where each function's probe goes (past a leading landing pad when safe).
	InsnDecoder decoder_;
};

// The shared libraries a dynamically linked program loads at start, as its
// dynamic linker resolves them (ld.so --list); empty for scripts and static
// programs. Read once per program and run.
std::vector<std::string> linked_libraries(const std::string &program);

// Library files in the loader cache and the usual CUDA locations, read
// once per run.
std::vector<std::string> installed_libraries();

} // namespace eacgm
