// SPDX-License-Identifier: Apache-2.0
// Finding functions in a library by pattern, and near misses for a pattern
// that finds none.
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
	std::string raw;                  // ELF name of the preferred alias (attached)
	std::string demangled;            // its demangled name (shown)
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

} // namespace eacgm
