// SPDX-License-Identifier: Apache-2.0
// Python function spans from stack samples: a function appears from the
// first sample that holds it to the last one that still does, nested as the
// stacks say. The stacks recorded behind CUDA/NCCL/torch spans join the
// samples (at the span's start and end), so the functions that made a call
// always contain its span in the timeline.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/model.h"

namespace eacgm {

struct PyFrame {
	std::string qualname, filename;
	int line = 0;       // the line running in this frame
	int first_line = 0; // where its function starts: with the names, its identity
};

// An immutable stack, innermost first, shared by every sample that saw it:
// a training loop makes the same few hundred stacks millions of times, and a
// copy per sample was most of the record loop's memory.
class SharedFrames {
public:
	SharedFrames() : p_(empty()) {}
	SharedFrames(std::vector<PyFrame> frames) // NOLINT: a stack is its frames
		: p_(std::make_shared<const std::vector<PyFrame>>(std::move(frames)))
	{}
	SharedFrames(std::shared_ptr<const std::vector<PyFrame>> p) : p_(p ? std::move(p) : empty()) {}
	const std::vector<PyFrame> &operator*() const { return *p_; }
	const std::vector<PyFrame> *operator->() const { return p_.get(); }

private:
	static const std::shared_ptr<const std::vector<PyFrame>> &empty()
	{
		static const auto e = std::make_shared<const std::vector<PyFrame>>();
		return e;
	}
	std::shared_ptr<const std::vector<PyFrame>> p_;
};

struct PyStackSample {
	uint64_t ts_ns = 0;
	SharedFrames frames;    // innermost first
	bool truncated = false; // deeper than the walker keeps: outer frames missing
	// From the periodic sampler (one per sample period of the thread's CPU
	// time); false for a stack read at a traced call's start or end, an
	// exact moment that counts no time.
	bool periodic = true;
	// The sampler's period when it was taken: the CPU time a periodic
	// sample stands for (the budget may change the rate). 0: not known.
	uint64_t period_ns = 0;
};

// A call measured at both ends (the eval loop's entry probe).
struct PyCall {
	uint64_t start_ns = 0, end_ns = 0;
	PyFrame frame;
};

// Samples of one thread, in time order, and its measured calls. Spans get
// layer "python", the qualified name, args file, line (the def line),
// self_ns (time not in a nested Python function) and "exact": true for a
// measured call; the measured calls replace the sampled spans of their
// function that they overlap, and nesting follows time.
// A sampled span is an estimate, and says so: args "samples", the periodic
// samples that saw it, and "sampled_ns", the sum of their periods (where
// they are known): its time (unbiased; `summary` shows it with its error), while its edges stay at its first and
// last sample: what was certainly seen, never outside the call, so about a
// period short on average. Back-to-back calls with no sample between them
// are one span: a sampled span is a run of calls, not a call.
std::vector<Span> python_function_spans(uint32_t pid, uint32_t tid, const std::vector<PyStackSample> &samples,
					const std::vector<PyCall> &calls = {}, size_t *dropped = nullptr);

// The same spans, for a thread without measured calls, made as its samples
// come instead of from all of them at the end: a function's span is final
// once a sample no longer holds it, and only the frames still on the stack
// are kept (a long recording need not keep its samples: on GPT they grew
// by half a MB a second, two per torch call). Samples must come in time
// order; one that comes late (a torch call's start, read when the call
// ended) moves the start of the open frames it shares back to it, where no
// earlier span of their depth ended after it, and is otherwise dropped
// (late()). take() hands over the spans closed so far; finish() closes the
// rest. Together they are python_function_spans()'s spans, in another order.
class SampledSpans {
public:
	SampledSpans(uint32_t pid, uint32_t tid) : pid_(pid), tid_(tid) {}
	void add(const PyStackSample &smp);
	std::vector<Span> take() { return std::exchange(closed_, {}); }
	std::vector<Span> finish();
	uint64_t late() const { return late_; } // samples that came late and said nothing
	size_t open_frames() const { return open_.size(); }

private:
	struct Open {
		PyFrame frame;
		uint64_t start, last;
		uint64_t floor;           // the end of the span before it at its depth
		uint64_t samples = 0;     // periodic samples that saw it
		uint64_t sampled_ns = 0;  // the sum of their periods
		uint64_t children_ns = 0; // of the spans closed inside it
	};
	void close_from(size_t depth);
	void add_late(const PyStackSample &smp);

	uint32_t pid_, tid_;
	std::vector<Open> open_;      // outermost first
	std::vector<uint64_t> ended_; // per depth, the end of the last span closed there
	std::vector<Span> closed_;
	// The stack open_ holds exactly (a sample's whole stack), or empty:
	// a sample of the same stack only credits the open frames.
	SharedFrames top_;
	uint64_t last_ns_ = 0, late_ = 0;
};

// "train_step (train.py:42)", innermost first: how a span shows its stack.
std::vector<std::string> format_py_stack(const std::vector<PyFrame> &frames);

} // namespace eacgm
