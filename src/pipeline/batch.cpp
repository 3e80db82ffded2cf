// Typed spans as Spans (span_at, SpanBatch::all()), for the edges and sinks
// that read Spans. Here rather than in the headers: rendering needs decode.
#include "common/sink.h"
#include "ingest/decode.h"

namespace eacgm {

Span span_at(const TypedSpans &t, size_t i)
{
	const TypedSpan &s = t.spans[i];
	Span out = render_span(s, t.specs->probes[s.spec_id], *t.specs, *t.names, t.tensors);
	if (i < t.stacks.size())
		out.py_stack = t.stacks[i];
	return out;
}

const std::vector<Span> &SpanBatch::all() const
{
	if (typed.empty())
		return spans;
	if (!all_made_) {
		all_made_ = true;
		all_.reserve(spans.size() + typed.size());
		all_.assign(spans.begin(), spans.end());
		for (size_t i = 0; i < typed.size(); i++)
			all_.push_back(span_at(typed, i));
	}
	return all_;
}

} // namespace eacgm
