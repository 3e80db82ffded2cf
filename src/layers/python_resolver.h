// SPDX-License-Identifier: Apache-2.0
// Python frames, resolved in user space. The BPF frame walker emits per frame
// a code object address and the frame's raw instruction field; this turns
// them into qualified name, file and line by reading the target's memory.
// The target is never trusted: every read is bounded and may fail (the
// process exited, the object was freed), and then resolve() says nullopt.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "layers/python_offsets.h"

namespace eacgm {

struct PyFrameInfo {
	std::string qualname, filename; // co_qualname (3.11+) or co_name (3.8-3.10)
	int line = 0, first_line = 0;   // line 0: unknown (no line, or a bad offset)
};

// Reads exactly len bytes at addr in pid's memory; false on any shortfall.
using PyMemReader = std::function<bool(uint32_t pid, uint64_t addr, void *dst, size_t len)>;

// The default reader: one process_vm_readv.
bool read_process_memory(uint32_t pid, uint64_t addr, void *dst, size_t len);

// A code object's line table, decoded once into address ranges.
struct PyLineRange {
	uint32_t start, end; // byte offsets into the bytecode, [start, end)
	int32_t line;        // -1: no line (3.10 and 3.11+ can say so)
};
// Decoders for the three formats, bounded by the table's length whatever it
// holds: co_lnotab (3.8, 3.9), co_linetable (3.10), the location table (3.11+).
std::vector<PyLineRange> decode_lnotab(const uint8_t *p, size_t n, int first_line);
std::vector<PyLineRange> decode_linetable310(const uint8_t *p, size_t n, int first_line);
std::vector<PyLineRange> decode_locations(const uint8_t *p, size_t n, int first_line);
// The line at a byte offset as PyCode_Addr2Line says it: first_line before the
// first instruction (offset < 0), 0 where the table has no line or no entry.
int line_at(const std::vector<PyLineRange> &ranges, std::optional<int64_t> offset, int first_line);

// The walker's raw instruction value as a byte offset into the bytecode:
// 3.8/3.9 f_lasti (bytes), 3.10 f_lasti (instructions), 3.11/3.12 prev_instr
// and 3.13 instr_ptr (pointers into co_code_adaptive).
// Negative: before the first instruction; nullopt: not a plausible value.
std::optional<int64_t> instr_byte_offset(const PyOffsets &o, uint64_t code_addr, uint64_t instr);

struct PyResolverStats {
	uint64_t lookups = 0, hits = 0, misses = 0;
	uint64_t stale = 0;    // cached entries found replaced by another code object
	uint64_t failures = 0; // lookups that returned nullopt
};

// Not thread-safe: one per consumer.
class PythonResolver {
public:
	explicit PythonResolver(PyMemReader reader = read_process_memory);

	// name_ptr, when not 0: the co_name pointer the walker saw in the code
	// object; an object found at that address now with another name is a
	// replacement, and the frame is not resolved (nullopt), not misnamed.
	// file_ptr, when not 0 with name_ptr: its co_filename pointer. An
	// object found gone (no longer a code object) is answered from the
	// cache when the walker saw the cached names: the one it saw was alive
	// then and has been freed since (a program's last stacks: its module
	// body's code is freed before the process exits).
	std::optional<PyFrameInfo> resolve(uint32_t pid, const PyOffsets &o, uint64_t code_addr, uint64_t instr,
					   uint64_t name_ptr = 0, uint64_t file_ptr = 0);
	void forget(uint32_t pid);
	const PyResolverStats &stats() const { return stats_; }

	// Bounds on what one code object may make us read and keep.
	static constexpr size_t kMaxString = 4096;        // bytes of characters
	static constexpr size_t kMaxLineTable = 64 << 10; // bytes; longer tables are cut
	static constexpr size_t kMaxEntries = 1 << 16;    // per process; then start over
	// A hit whose walker-read name and file pointers match the cached ones
	// is trusted without a re-read for this long: the re-read is a syscall
	// per frame per sample (measured: the largest part of eacgm's CPU with
	// 1 kHz sampling on a training loop), and a code object replaced at the
	// same address by one with the very same name and file string objects
	// is the rare case the periodic re-read still catches.
	static constexpr uint64_t kTrustNs = 1'000'000'000;

private:
	// The code object's fields that a replacement at the same address would
	// almost surely change: re-read in one small read on every hit.
	struct Identity {
		uint64_t type = 0, filename = 0, name = 0, qualname = 0, linetable = 0;
		int32_t first_line = 0;
		bool operator==(const Identity &) const = default;
	};
	struct Entry {
		Identity id;
		PyFrameInfo info; // line unset
		std::vector<PyLineRange> lines;
		uint64_t checked_ns = 0; // identity last re-read from the process
	};
	struct Process {
		// Type objects proven once by tp_name, then compared by address.
		uint64_t code_type = 0, str_type = 0, bytes_type = 0;
		std::unordered_map<uint64_t, Entry> entries;
	};

	bool read_identity(uint32_t pid, const PyOffsets &o, uint64_t code_addr, Identity &id);
	bool is_type(uint32_t pid, uint64_t type, uint64_t &known, const char *name);
	std::optional<std::string> read_str(uint32_t pid, const PyOffsets &o, Process &p, uint64_t addr);
	std::optional<Entry> load(uint32_t pid, const PyOffsets &o, Process &p, uint64_t code_addr);

	PyMemReader read_;
	std::unordered_map<uint32_t, Process> procs_;
	PyResolverStats stats_;
};

} // namespace eacgm
