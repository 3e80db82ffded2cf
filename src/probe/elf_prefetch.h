// SPDX-License-Identifier: Apache-2.0
// Reads, on a thread of its own, the ELF files a recording is about to
// probe, while the BPF objects load on the main thread: at start both take
// a few hundred milliseconds (Debian's libtorch_cpu has 34,000 symbols to
// read, pip's over a million; the kernel verifies each BPF object), and on a
// machine with two cores or more the two can overlap.
#pragma once
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "probe/elf_symbols.h"
#include "probe/spec.h"

namespace eacgm {

// A file read ahead, with the functions each `match` pattern of the specs
// finds in it (indices into symbols()): matching a regular expression
// against libtorch's operator names takes tens of milliseconds too.
struct PrefetchedElf {
	Result<ElfFile> elf;
	std::map<std::string, std::vector<uint32_t>> matches; // by pattern
};

// The functions of `elf` whose demangled name `pattern` finds (a regex
// search; names that cannot start with its anchored literal prefix are
// skipped, most without being demangled), as indices into elf.symbols().
std::vector<uint32_t> match_symbols(const ElfFile &elf, const std::string &pattern);

class ElfPrefetch {
public:
	ElfPrefetch() = default;
	~ElfPrefetch();
	ElfPrefetch(const ElfPrefetch &) = delete;
	ElfPrefetch &operator=(const ElfPrefetch &) = delete;

	// Starts reading the libraries the specs name among those `pid` maps now
	// (0: none), those `program` links (empty: none) and the installed ones.
	void start(const SpecSet &specs, uint32_t pid, const std::string &program);
	// The file read ahead for this real path (waiting for it if still being
	// read), handed over once; nothing when it was not among them.
	std::optional<PrefetchedElf> take(const std::string &real_path);

private:
	std::future<void> work_;
	std::mutex mu_;
	std::condition_variable listed_cv_;
	bool listed_ = false; // files_ holds every file that will be read
	std::map<std::string, std::future<PrefetchedElf>> files_;
	std::map<std::string, std::promise<PrefetchedElf>> pending_;
};

} // namespace eacgm
