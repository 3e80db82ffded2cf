// SPDX-License-Identifier: Apache-2.0
// What eacgm keeps of root once its work no longer needs the rest. It runs
// as root on production nodes next to jobs it must not harm: a bug in it,
// or a hostile value read from a traced process, should find a process
// that can trace and read, not one that can mount, load modules or
// reconfigure the network.
#pragma once
#include <linux/capability.h> // the capabilities' numbers
#include <sys/types.h>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

// Capabilities by number (linux/capability.h), named as in capabilities(7).
struct Capability {
	int number;
	const char *name;
};

// What tracing needs throughout: load and attach BPF programs and uprobes
// (CAP_BPF, CAP_PERFMON), read traced processes' memory and /proc
// (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH; and write a stack slot back for
// the exception guard, probe/guard_server.h), raise the locked-memory and
// open-file limits (CAP_SYS_RESOURCE), resume a process the exception
// guard stopped, whoever owns it (CAP_KILL). dist/systemd/eacgm.service.in
// bounds the agent to these.
std::vector<Capability> tracing_capabilities();

// Drops every capability but `keep` from the bounding, permitted, effective
// and inheritable sets and the ambient set, in the calling thread: call it
// before any other thread starts (threads inherit their creator's sets).
// A capability in `keep` the process does not hold stays absent. Returns
// the names kept, for the recording's meta.
Result<std::vector<std::string>> drop_capabilities_except(const std::vector<Capability> &keep);

// What record and serve keep, before their first thread: the tracing set,
// `extra`, and CAP_SYS_ADMIN where bpf_stats turns on the kernel's
// accounting of BPF programs. Files created from then on are owner-only
// (umask 077): a recording holds command lines, arguments and stacks.
// Returns the names kept.
Result<std::vector<std::string>> keep_tracing_privileges(std::vector<Capability> extra, bool bpf_stats);

// Lowers every thread of this process to niceness `nice` (0-19; the
// threads started later inherit it from their creator). An agent beside a
// job that keeps every core busy should run in the time the job gives up
// (a spinning worker's sched_yield, a slice's end) rather than preempt a
// training thread on waking: measured on GPT, 2-vCPU KVM, both cores busy,
// three runs of bench/step_pairs (2026-11-28) read 1.025x, 1.024x and
// 1.011x at niceness 10 against 1.050x, 1.041x and 1.012x at 0 in the same
// rounds: lower or level, within this VM's noise in the last. At 10 eacgm
// still gets about a tenth of a core from a contended CPU, several times
// what it spends. A thread whose niceness is already higher keeps it.
// Raising a thread's niceness needs no privilege, so a command launched
// before this keeps its own (it may not lower it back without
// CAP_SYS_NICE); but a thread may not change one that holds capabilities
// it lacks (the kernel's cap_safe_nice): call it before the capabilities
// are dropped, or once every thread holds the same. The threads in `keep`
// keep their niceness (the ring-draining thread: pipeline/ring_reader.h).
Result<void> lower_priority(int nice, const std::vector<pid_t> &keep = {});

// Lets a thread of eacgm's set its niceness back to `nice` (the one it
// started at) after lower_priority, with no CAP_SYS_NICE: RLIMIT_NICE at
// 20 - nice. serve yields before any thread starts, and its ring-draining
// thread, started later, takes its niceness back so (pipeline/ring_reader.h).
// Raising the limit needs CAP_SYS_RESOURCE: before the capabilities are
// dropped.
Result<void> allow_niceness_back_to(int nice);

} // namespace eacgm
