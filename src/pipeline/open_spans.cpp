// SPDX-License-Identifier: Apache-2.0
// Calls in flight, for the hang watch: what the span engine's entry program
// keeps per thread (start time, arguments, Python stack id) until the call
// returns, read from user space and decoded like a finished call.
#include <algorithm>

#include "pipeline/decode.h"
#include "pipeline/record_loop.h"

namespace eacgm {

std::vector<RecordLoop::OpenSpan> RecordLoop::open_spans(uint64_t now_ns, bool waits_only)
{
	const auto &specs = probes_.specs();
	std::vector<OpenSpan> out;
	for (uint32_t pid : processes_.table().live()) {
		for (uint32_t tid : system_.threads(pid)) {
			auto calls = probes_.open_calls(tid);
			if (!calls) {
				warnings_.add("calls in flight cannot be read, so hangs are not seen: " +
					      calls.error().message);
				return out;
			}
			for (size_t d = 0; d < calls->size(); d++) {
				const eacgm_open_call &c = (*calls)[d];
				if (c.spec_id >= specs.probes.size() || c.start_ns == 0)
					continue;
				const ProbeSpec &spec = specs.probes[c.spec_id];
				if (waits_only && !spec.waits)
					continue;
				out.push_back({open_span(pid, tid, uint32_t(d), c, spec, now_ns), spec.waits});
			}
		}
	}
	return out;
}

Span RecordLoop::open_span(uint32_t pid, uint32_t tid, uint32_t depth, const eacgm_open_call &c, const ProbeSpec &spec,
			   uint64_t now_ns)
{
	eacgm_span_event e{};
	e.start_ns = c.start_ns;
	e.dur_ns = now_ns > c.start_ns ? now_ns - c.start_ns : 0;
	e.tgid = pid;
	e.tid = tid;
	e.spec_id = c.spec_id;
	e.depth = uint16_t(depth);
	std::copy(std::begin(c.args), std::end(c.args), std::begin(e.args));
	Span s = decode_span(e, spec, probes_.specs(), &processes_.symbolizer(), names_, tensors_);
	// Not returned: no return value, and what is read at return is still
	// a pointer.
	s.ret = 0;
	s.ret_name.clear();
	for (const ArgSpec &a : spec.args)
		if (a.source == EACGM_ARG_DEREF_EXIT)
			s.args.erase(a.name);
	nccl_.observe(s); // the communicator's rank and size
	s.py_stack = python_join_.peek_stack(c.py_stack);
	return s;
}

} // namespace eacgm
