// eacgm probes: find the functions of a library to trace and write a spec for
// them. The pure parts, for tests; run_probes (commands.h) is the CLI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "probe/elf_symbols.h"

namespace eacgm {

// One function address of a library and every name it has there.
struct FunctionMatch {
	uint64_t offset = 0; // in the file: what a uprobe attaches to
	uint64_t size = 0;
	std::string raw;       // ELF name of the preferred alias (attached)
	std::string demangled; // its demangled name (shown)
	std::vector<std::string> aliases; // the other names at the address, demangled
};

// Function symbols whose demangled or raw name the regex finds (std::regex
// search), one entry per address, sorted by name. The preferred name is the
// public one: "x" over its profiling alias "px" (ncclAllReduce over
// pncclAllReduce), else ElfFile::aliases' first. Fails on an invalid regex.
Result<std::vector<FunctionMatch>> match_functions(const ElfFile &elf, const std::string &regex);

// "0x0005a1b0  312  ncclAllReduce  (alias: pncclAllReduce)"; the size is
// right-aligned to size_width digits.
std::string format_match(const FunctionMatch &m, size_t size_width = 0);

// Up to n function names (without parameters) closest to the pattern's literal
// text: longest common substring first, then edit distance, then name;
// case-insensitive.
std::vector<std::string> close_matches(const ElfFile &elf, const std::string &pattern, size_t n = 5);

// A demangled name without its parameter list, qualifiers and template return
// type: "at::_ops::linear::call(at::Tensor const&) const" -> "at::_ops::linear::call".
std::string function_name(const std::string &demangled);

// The spec's library for a file: "libnccl.so*" for .../libnccl.so.2; a file
// without ".so" in its name (an executable) keeps its path.
std::string library_glob(const std::string &path);

// The spec document (JSON text): one probe per match, no arguments.
std::string generate_spec(const std::vector<FunctionMatch> &matches, const std::string &layer,
			  const std::string &library, const std::string &about_source);

// A path, or a bare soname found in the loader cache (ldconfig -p) or the CUDA
// directories; the real path (symlinks resolved).
Result<std::string> resolve_library(const std::string &lib);

// Microseconds per call of a function under eacgm's span engine (uprobe +
// uretprobe, no arguments kept), measured in this process; needs root.
Result<double> measure_probe_cost();

} // namespace eacgm
