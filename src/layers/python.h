// SPDX-License-Identifier: Apache-2.0
// The Python layer's kernel side: the sampling profiler (bpf/python.bpf.c),
// the table of traced Python processes with their runtime address and
// CPython offsets, and the ring buffer of Python stacks, which the span
// engine shares to record the stack behind each CUDA/NCCL/torch call.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "probe/links.h"
#include "probe/skeleton.h"
#include "common/result.h"
#include "probe/proc_maps.h"
#include "eacgm/abi/python.h"
#include "layers/python_offsets.h"
#include "probe/spec.h"

struct python_bpf;
struct bpf_link;
struct bpf_map;

namespace eacgm {

// A process's interpreter, found from its mappings.
struct PythonRuntime {
	int major = 0, minor = 0;
	uint64_t runtime_addr = 0; // _PyRuntime in the process
	uint64_t code_type = 0;    // PyCode_Type in the process
	std::string file;          // the executable or libpython that holds it
	PyOffsets offsets;         // its layout: the table's, checked against its own (3.13+)
};

// Whether a file is a CPython interpreter (python3.12, libpython3.12.so.1.0),
// by its name: the one answer eacgm gives to that question (a process that
// maps one is watched as Python; find_python_runtime reads the version from
// the same name).
bool names_python_interpreter(const std::string &path);

// The interpreter a process runs, if any: a mapped libpython3.X or python3.X
// executable that defines _PyRuntime.
Result<std::optional<PythonRuntime>> find_python_runtime(uint32_t pid, const std::vector<Mapping> &maps);

// What the BPF walker gets for a process.
eacgm_py_process py_process_config(const PythonRuntime &rt);

// The function whose entries eval_entry_probes() traces; spans with this
// name and layer "python" carry (code, code_name) arguments.
inline constexpr const char *kEvalEntryFunction = "_PyEval_EvalFrameDefault";

class PythonTracer {
public:
	// sample_hz 0: no sampling (stacks behind spans only).
	static Result<std::unique_ptr<PythonTracer>> open(int traced_map_fd, unsigned sample_hz);
	// open() in two steps: prepare() creates the maps the span engine shares
	// (their fds are valid from then on), load() verifies and attaches the
	// programs. The span engine can load while load() runs on another
	// thread: each takes the verifier about 0.1 s.
	static Result<std::unique_ptr<PythonTracer>> prepare(int traced_map_fd);
	Result<void> load(unsigned sample_hz);
	PythonTracer(const PythonTracer &) = delete;
	PythonTracer &operator=(const PythonTracer &) = delete;

	// Registers a traced process if it runs a CPython with known offsets.
	// Returns its runtime, nothing for a non-Python process; warns (once per
	// version) for a version without offsets.
	Result<std::optional<PythonRuntime>> add_process(uint32_t pid, const std::vector<Mapping> &maps);
	const std::map<uint32_t, PythonRuntime> &processes() const { return procs_; }
	// Processes registered so far (each image once: a forked child counts
	// when it execs another program that runs Python).
	uint64_t registrations() const { return registrations_; }
	// A forked child runs its parent's interpreter (the kernel side copied
	// its registration already).
	void inherit(uint32_t child, uint32_t parent);
	// A process that exited or exec'd: its registration goes (a pid may
	// come back as another program, an exec maps another).
	void forget(uint32_t pid);
	const PyOffsets *offsets(int minor) const; // the built-in table's
	// The sampler's period of a thread's CPU time now; 0 without sampling.
	uint64_t sample_period_ns() const { return sample_hz_ ? 1'000'000'000ull / sample_hz_ : 0; }
	unsigned sample_hz() const { return sample_hz_; }
	// The lowest rate used since load(), and its period: what bounds a
	// sampled time's error (0 without sampling).
	unsigned lowest_sample_hz() const { return lowest_hz_; }
	uint64_t longest_sample_period_ns() const { return lowest_hz_ ? 1'000'000'000ull / lowest_hz_ : 0; }
	// Changes the sampling rate of every CPU's event at once (the overhead
	// budget's lever on the sampler); a sampler that is off stays off.
	Result<void> set_sample_hz(unsigned hz);

	// Probes on the eval loop's entry, _PyEval_EvalFrameDefault, of every
	// CPython with known offsets: each call is a Python function entered
	// from C (a callback, a hook, a thread's or the program's start), kept
	// with the code object it runs. In 3.8-3.10 every Python call enters it
	// (exact calls, at a uprobe's cost each), in 3.11+ only those from C:
	// all_versions false keeps 3.11+ only.
	SpecSet eval_entry_probes(bool all_versions) const;

	struct bpf_map *procs_map() const;
	struct bpf_map *tstates_map() const;
	struct bpf_map *events_map() const;
	struct bpf_map *counters_map() const;
	std::vector<std::string> take_warnings();
	// The walker's counters (enum eacgm_py_counter), summed over CPUs.
	std::array<uint64_t, EACGM_PY_CNT_COUNT> counters() const;

private:
	PythonTracer() = default;
	Skeleton<struct python_bpf> skel_ = no_skeleton<struct python_bpf>();
	LinkSet links_; // after the skeleton: the links go first
	std::vector<UniqueFd> perf_fds_;
	std::map<std::string, PyOffsets> offsets_; // "3.11" -> offsets
	std::map<uint32_t, PythonRuntime> procs_;
	uint64_t registrations_ = 0;
	std::set<std::string> warned_;
	std::vector<std::string> warnings_;
	unsigned sample_hz_ = 0, lowest_hz_ = 0;
};

} // namespace eacgm
