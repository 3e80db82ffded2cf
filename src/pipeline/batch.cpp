// SPDX-License-Identifier: Apache-2.0
// A typed span as a Span (span_at), for the edges that show it. Here rather
// than in the header: rendering needs decode.
#include "pipeline/decode.h"
#include "pipeline/span.h"

namespace eacgm {

Span span_at(const TypedSpans &t, size_t i)
{
	const TypedSpan &s = t.spans[i];
	Span out = render_span(s, t.specs->probes[s.spec_id], *t.specs, *t.names, t.tensors);
	if (i < t.stacks.size())
		out.py_stack = t.stacks[i];
	return out;
}

} // namespace eacgm
