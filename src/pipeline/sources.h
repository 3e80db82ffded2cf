// SPDX-License-Identifier: Apache-2.0
// What the pipeline reads and whom it asks. Records come from a source (the
// BPF rings on a live node, bpf_sources.h); what a record cannot say about
// its process (its name, command line, parent, cgroup, maps, whether it has
// exited) comes from the System (/proc and pidfds, linux_system.h); placing
// probes on what a process maps, and the counts of what the probes lost, from
// the Probes (the attacher and the span engine, bpf_sources.h). The RecordLoop
// sees only these interfaces, so a test drives it with no BPF and no /proc
// (tests/unit/test_pipeline.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/result.h"
#include "eacgm/abi/events.h"
#include "eacgm/abi/python.h"
#include "pipeline/cgroup.h"
#include "probe/pid_watch.h"
#include "probe/proc_maps.h"
#include "probe/spec.h"

namespace eacgm {

// Takes the records a source reads, in the order it reads them.
class Records {
public:
	virtual ~Records() = default;
	virtual void span(const eacgm_span_event &e) = 0;
	virtual void proc(const eacgm_proc_event &e) = 0;
	// A Python stack record's header and its first `nframes` frames (a
	// record holds as many frames as its kind may have).
	virtual void py(const eacgm_py_stack_event &e, uint32_t nframes) = 0;
};

class RecordSource {
public:
	virtual ~RecordSource() = default;
	// Readable when records wait (poll); -1: none to wait on.
	virtual int fd() const = 0;
	// Hands every record waiting now to `to`; how many.
	virtual Result<int> consume(Records &to) = 0;
	// CPU time spent reading records on a thread of the source's own (the
	// ring reader's), which consume()'s caller does not see on its clock.
	virtual uint64_t reading_cpu_ns() const { return 0; }
};

// What the operating system says about a process, and the watch on its exit.
// A process gone answers empty (no name, no maps, nullopt).
class System {
public:
	virtual ~System() = default;
	virtual std::string comm(uint32_t pid) = 0;
	// The command line, its arguments separated by spaces.
	virtual std::string cmdline(uint32_t pid) = 0;
	virtual std::string thread_name(uint32_t pid, uint32_t tid) = 0;
	virtual std::optional<uint32_t> parent(uint32_t pid) = 0;
	virtual CgroupInfo cgroup(uint32_t pid) = 0;
	// The environment it started with: NUL-separated NAME=VALUE entries
	// (/proc/PID/environ), for its launcher's job and rank (pipeline/identity.h).
	virtual std::string environment(uint32_t pid) = 0;
	virtual Result<std::vector<Mapping>> maps(uint32_t pid) = 0;
	virtual std::vector<uint32_t> threads(uint32_t pid) = 0;
	virtual bool exists(uint32_t pid) = 0;
	// The exit code of a process that has exited and is not reaped yet.
	virtual std::optional<int> exit_status(uint32_t pid) = 0;
	// Where the symbolizer reads maps and files (/proc's root).
	virtual std::string proc_root() const = 0;
	// CLOCK_MONOTONIC now, the clock of every record: what the pipeline's
	// waits are measured on (a fork's verdict, a process's late records,
	// the Python samples' reordering). A test's system says what time it
	// is, so that no test depends on how fast it runs.
	virtual uint64_t now_ns() = 0;

	// The exit watch: `pidfd`, where given, was opened before the process
	// was tracked (a pid reused since cannot stand in for it). The state
	// when watched (an exited process is reported by take_exited too).
	virtual Result<PidState> watch(uint32_t pid, UniqueFd pidfd) = 0;
	virtual void unwatch(uint32_t pid) = 0;
	// Readable when a watched process has exited; -1: none to wait on.
	virtual int exits_fd() const = 0;
	virtual std::vector<uint32_t> take_exited() = 0;
};

// The probes, as the pipeline needs them.
class Probes {
public:
	virtual ~Probes() = default;
	virtual const SpecSet &specs() const = 0;
	// A forked child has its parent's probes until it execs.
	virtual void inherit(uint32_t child, uint32_t parent) = 0;
	// A new image (exec) or a process gone: judged afresh.
	virtual void forget(uint32_t pid) = 0;
	// What probing the libraries a process maps now placed: whether one of
	// them is an interpreter (the Python layer watches it), and what the
	// user should hear (probes placed late). Errors go to take_warnings.
	struct Scan {
		bool interpreter = false;
		std::vector<std::string> notes;
	};
	virtual Scan scan(uint32_t pid, const std::vector<Mapping> &maps) = 0;
	// Whether a file is one the specs trace.
	virtual bool wanted(const std::string &path) const = 0;
	// serve: follow the process's forks, execs, exit and scheduling.
	virtual Result<void> track(uint32_t pid) = 0;
	// What the span programs lost (enum eacgm_counter).
	virtual std::array<uint64_t, EACGM_CNT_COUNT> counters() const = 0;
	// The calls a thread is inside now, outermost first.
	virtual Result<std::vector<eacgm_open_call>> open_calls(uint32_t tid) const = 0;
	virtual std::vector<std::string> take_warnings() = 0;
};

} // namespace eacgm
