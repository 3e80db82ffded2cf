// SPDX-License-Identifier: Apache-2.0
// eacgm probes: find the functions of a library to trace and write a spec for
// them. The pure parts, for tests; run_probes (commands.h) is the CLI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "probe/elf_symbols.h"
#include "probe/symbol_search.h"

namespace eacgm {

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
