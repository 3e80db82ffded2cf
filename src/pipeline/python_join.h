// SPDX-License-Identifier: Apache-2.0
// The Python layer's joiner: names the stacks the span engine walked behind
// calls and the sampler's stacks (resolving code objects through the
// interpreter's memory, once per distinct walk), shows a call's stack with
// it, and makes function spans from each thread's samples, the calls' stacks
// and the eval loop's measured calls (pipeline/python_spans.h). The RecordLoop
// hands it the records and asks it at each call and flush.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/model.h"
#include "common/result.h"
#include "eacgm/abi/events.h"
#include "eacgm/abi/python.h"
#include "layers/python.h"
#include "layers/python_resolver.h"
#include "pipeline/process_table.h"
#include "pipeline/python_spans.h"
#include "pipeline/sink.h"
#include "pipeline/sources.h"
#include "pipeline/weights.h"

namespace eacgm {

class PythonJoiner {
public:
	// tracer may be null (no Python layer: no stack resolves). The table
	// names a sampled stack's process and learns its threads.
	// The system's clock times the reordering window and the stack cache.
	PythonJoiner(PythonTracer *tracer, ProcessTable &table, System &system)
		: tracer_(tracer), table_(table), system_(system)
	{}

	// Keep every sample and measured call to the end and make the function
	// spans from them all there (--python-entries: a measured call can
	// reshape spans far before it ends). Otherwise each thread's spans are
	// made as its samples come (SampledSpans) and stored once closed.
	void keep_all_samples() { stream_ = false; }
	// Keep the sampled stacks for folded_stacks() (--flamegraph).
	void keep_folded_stacks() { fold_ = true; }

	// A Python stack record (ring callback: copied only).
	void record(const eacgm_py_stack_event &e, uint32_t nframes);
	// After a round's records: names the stacks behind its calls, within
	// milliseconds of the walk, not when the calls end: by then a short
	// program may be finalising and freeing the code objects (its module
	// body's first).
	void name_call_stacks();
	// The stack a call was made under (its record's py_stack), shown with
	// it; the functions of that stack join the samples at its start and
	// end. Empty: none, or a thread without Python frames. The record is
	// let go with the span of the call that walked it (a nested call
	// sharing it, EACGM_SPAN_PY_SHARED, ends before).
	PyStack take_stack(const eacgm_span_event &e);
	// The stack behind a call in flight, left for its end (the hang watch).
	PyStack peek_stack(uint64_t id) const;
	// A call into the eval loop: a measured call of the function its frame
	// runs; counted lost when that does not resolve (the code object is gone).
	void eval_entry(const Span &s, const eacgm_span_event &e);
	// The samples read so far, placed (with the sampler's period when each
	// was taken); about once a second, the function spans that closed to
	// `out` (force: now).
	Result<void> flush(Sink &out, const BudgetHistory &budget, bool force);
	// Every function span left.
	Result<void> finish(Sink &out);
	// Sampled stacks in the collapsed format of flame graph tools:
	// "outer;...;inner count" per line, frames as "qualname (file:def line)".
	std::string folded_stacks();

	// A process whose image is gone (it exec'd, or it is retired): what was
	// read of its memory says nothing of its next program (nor of the
	// next process given its pid).
	void forget(uint32_t pid);

	uint64_t samples_read() const { return samples_read_; }
	// What was lost on the way, by reason (the recording's drops).
	void drops(std::vector<Drop> &out) const;

private:
	// A resolved stack and how spans show it, shared by every walk that
	// read the same frames: a loop issues the same calls from the same
	// lines, and resolving and formatting each walk anew was most of
	// eacgm's CPU with Python stacks behind torch calls (measured on a GPT
	// step). Kept while the resolver trusts its entries (1 s).
	struct ResolvedStack {
		std::optional<SharedFrames> frames;
		PyStack shown;        // format_py_stack of a call's stack, shared by every span made under it
		uint64_t samples = 0; // periodic samples of it, not yet in folded_
	};
	// partial: a frame that does not resolve cuts the stack there (marked
	// "...") instead of dropping it.
	ResolvedStack &resolved(uint32_t pid, const eacgm_py_frame *frames, uint32_t n, bool partial);
	std::optional<std::vector<PyFrame>> resolve_stack(uint32_t pid, const eacgm_py_frame *frames, uint32_t n,
							  bool partial);
	void retire_stack_cache();
	// Adds the cache's sample counts to folded_, a line of text per
	// distinct stack rather than per sample.
	void fold_cached_samples();
	void fold_cached(uint32_t pid, ResolvedStack &rs);
	void add_sample(uint32_t pid, uint32_t tid, PyStackSample smp);
	// Hands each thread's samples older than kPyReorderNs (all: at the end)
	// to its spans, and stores the spans that closed.
	Result<void> fold(Sink &out, bool all);

	PythonTracer *tracer_;
	ProcessTable &table_;
	System &system_;
	PythonResolver resolver_;
	bool stream_ = true;
	bool fold_ = false;

	// Read in this round, named after it: the stacks behind calls (frames
	// in one buffer, no allocation per record).
	struct CallStack {
		uint64_t id;
		uint32_t pid;
		uint16_t flags;
		uint32_t first, n; // in call_frames_
	};
	std::vector<CallStack> call_stacks_;
	std::vector<eacgm_py_frame> call_frames_;
	// The stacks behind calls, by id, until their calls are decoded.
	struct SpanStack {
		uint16_t flags;      // enum eacgm_py_flags
		ResolvedStack stack; // resolved when read (shares the cache's)
	};
	std::map<uint64_t, SpanStack> span_stacks_;
	// Samples read, placed at flush.
	struct RawStack {
		uint64_t ts;
		uint32_t pid, tid;
		uint16_t flags; // enum eacgm_py_flags
		std::vector<eacgm_py_frame> frames;
	};
	std::vector<RawStack> pending_samples_;

	struct ViewHash {
		using is_transparent = void;
		size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
	};
	// raw walk -> resolved; looked up by string_view (no key allocated)
	std::unordered_map<std::string, ResolvedStack, ViewHash, std::equal_to<>> stack_cache_;
	std::string stack_key_; // the key of the walk being looked up
	uint64_t stack_cache_since_ns_ = 0;
	// The pids with stacks in stack_cache_: forget() looks through the cache
	// only for a process that has some (every exec and exit of the
	// machine's processes is forgotten, nearly all of them never Python).
	std::unordered_set<uint32_t> cached_stacks_;

	std::map<std::pair<uint32_t, uint32_t>, std::vector<PyCall>> calls_;          // (pid, tid)
	std::map<std::pair<uint32_t, uint32_t>, std::vector<PyStackSample>> samples_; // (pid, tid), !stream_
	// Streaming: each thread's samples not yet in order (younger than
	// kPyReorderNs), and its spans being made.
	struct PyThread {
		std::vector<PyStackSample> pending;
		SampledSpans spans;
	};
	std::map<std::pair<uint32_t, uint32_t>, PyThread> threads_;
	std::chrono::steady_clock::time_point last_fold_ = std::chrono::steady_clock::now();
	std::map<std::string, uint64_t> folded_; // collapsed sampled stacks -> samples

	uint64_t samples_read_ = 0;
	uint64_t unresolved_ = 0;
	uint64_t entries_lost_ = 0;     // eval-loop entries whose code object did not resolve
	size_t calls_contradicted_ = 0; // measured calls a sample showed were not running
	uint64_t late_ = 0;             // samples read too late to place (SampledSpans::late)
};

} // namespace eacgm
