// SPDX-License-Identifier: Apache-2.0
// The typed span (pipeline/span.h) and the interner its ids come from: the
// first step of the span path without a JSON object per span. decode_typed
// keeps everything a Span shows: rendering it gives the Span the record loop
// stores, for every probe of the built-in specs.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/text.h"
#include "pipeline/decode.h"
#include "pipeline/intern.h"
#include "pipeline/span.h"
#include "probe/spec.h"

using namespace eacgm;

TEST(Interner, IdsCountFromOneAndKeepTheirText)
{
	Interner names;
	EXPECT_EQ(names.id("cudaMemcpy"), 1u);
	EXPECT_EQ(names.id("volta_sgemm_128x64_nn"), 2u);
	EXPECT_EQ(names.id("cudaMemcpy"), 1u); // once per recording
	EXPECT_EQ(names.size(), 2u);
	EXPECT_EQ(names.text(2), "volta_sgemm_128x64_nn");
	EXPECT_EQ(names.text(0), ""); // none
	EXPECT_EQ(names.text(3), ""); // not made here
	EXPECT_EQ(names.id(""), 3u);  // the empty string is a string
	// Its texts stay where they are as it grows: the map's keys are views.
	for (int i = 0; i < 10'000; i++)
		EXPECT_EQ(names.id("k" + std::to_string(i)), 4u + i);
	for (int i = 0; i < 10'000; i++)
		ASSERT_EQ(names.id("k" + std::to_string(i)), 4u + i);
	EXPECT_EQ(names.text(4 + 9'999), "k9999");
	EXPECT_EQ(names.text(1), "cudaMemcpy");
}

// cudaMemcpy(dst, src, count, kind): its typed fields, no text.
TEST(TypedSpan, HoldsTheCallsFieldsAsNumbers)
{
	auto specs = load_builtin_spec("cuda");
	ASSERT_TRUE(specs) << specs.error().message;
	const uint32_t id = probe_index(*specs, "cudaMemcpy");
	ASSERT_LT(id, specs->probes.size());
	eacgm_span_event e{.start_ns = 5'000, .dur_ns = 700, .tgid = 42, .tid = 43, .spec_id = id};
	e.ret = 0xffffffff00000001ull; // cudaErrorInvalidValue, garbage above the int
	e.args[0] = 0x7f0000001000;
	e.args[1] = 0x7f0000002000;
	e.args[2] = 4096;
	e.args[3] = 1;
	e.flags = EACGM_SPAN_RUNQ;
	e.runq_ns = 1'500;
	Interner names;
	TypedSpan t = decode_typed(e, specs->probes[id], *specs, nullptr, names);
	EXPECT_EQ(t.start_ns, 5'000u);
	EXPECT_EQ(t.dur_ns, 700u);
	EXPECT_EQ(t.pid, 42u);
	EXPECT_EQ(t.tid, 43u);
	EXPECT_EQ(t.spec_id, id);
	EXPECT_EQ(t.ret, 1);
	EXPECT_EQ(t.bytes, 4096u);
	EXPECT_EQ(t.runq_ns, 1'500u);
	EXPECT_EQ(t.args[0], 0x7f0000001000u);
	EXPECT_EQ(names.size(), 0u); // nothing to intern
	Span s = render_span(t, specs->probes[id], *specs, names);
	EXPECT_EQ(s.name, "cudaMemcpy");
	EXPECT_EQ(s.ret_name, "cudaErrorInvalidValue");
	EXPECT_EQ(s.args["dst"], "0x7f0000001000");
	EXPECT_EQ(s.args[kRunqArg], 1'500);
}

// Every probe of the four built-in specs (loaded once): its spec set and
// its index there.
static std::vector<std::pair<const SpecSet *, uint32_t>> builtin_probes()
{
	static const std::vector<SpecSet> sets = [] {
		std::vector<SpecSet> out;
		for (const char *layer : {"cuda", "nccl", "gloo", "torch"}) {
			auto specs = load_builtin_spec(layer);
			EXPECT_TRUE(specs) << layer << ": " << specs.error().message;
			if (specs)
				out.push_back(std::move(*specs));
		}
		return out;
	}();
	EXPECT_EQ(sets.size(), 4u);
	std::vector<std::pair<const SpecSet *, uint32_t>> out;
	for (const SpecSet &set : sets)
		for (uint32_t id = 0; id < set.probes.size(); id++)
			out.emplace_back(&set, id);
	return out;
}

// A random record of probe `id`: random words in every slot (small ones
// every other round), random returns, waits or none.
static eacgm_span_event random_record(std::mt19937_64 &rng, uint32_t id, int round)
{
	eacgm_span_event e{.start_ns = rng(), .dur_ns = rng() >> 20, .tgid = 7, .tid = 8};
	e.spec_id = id;
	e.ret = round % 3 ? rng() : 0;
	for (auto &a : e.args)
		a = round % 2 ? rng() : rng() % 4096;
	e.flags = round % 4 == 0 ? EACGM_SPAN_RUNQ : 0;
	e.runq_ns = rng() % 100'000;
	return e;
}

// Every probe of every built-in spec, on random records (random words in
// every slot, random returns, waits or none): the typed span is all there
// is to it. Decoded twice it is the same bytes; rendered from a copy it is
// the same Span, with a "symbol" argument's text (its address in hex, with
// no symbolizer) from the interner.
TEST(TypedSpan, RenderedItIsTheSpanForEveryBuiltInProbe)
{
	std::mt19937_64 rng(37);
	size_t probes = 0, symbols = 0;
	Interner names;
	for (auto [set, id] : builtin_probes()) {
		const SpecSet &specs = *set;
		const ProbeSpec &spec = specs.probes[id];
		probes++;
		for (int round = 0; round < 20; round++) {
			const eacgm_span_event e = random_record(rng, id, round);
			TypedSpan t = decode_typed(e, spec, specs, nullptr, names);
			TypedSpan again = decode_typed(e, spec, specs, nullptr, names);
			ASSERT_EQ(std::memcmp(&t, &again, sizeof t), 0) << spec.function;
			TypedSpan copy;
			std::memcpy(&copy, &t, sizeof t);
			Span s = render_span(copy, spec, specs, names);
			Span d = decode_span(e, spec, specs, nullptr, names);
			EXPECT_EQ(s.args.dump(), d.args.dump()) << spec.function;
			EXPECT_EQ(std::tie(s.layer, s.name, s.ret, s.ret_name, s.bytes, s.start_ns, s.dur_ns, s.pid,
					   s.tid),
				  std::tie(d.layer, d.name, d.ret, d.ret_name, d.bytes, d.start_ns, d.dur_ns, d.pid,
					   d.tid))
				<< spec.function;
			size_t slot = 0;
			for (const ArgSpec &a : spec.args) {
				if (a.type == ArgType::Symbol) {
					symbols++;
					EXPECT_EQ(s.args[a.name], hex(e.args[slot])) << spec.function;
				}
				slot += arg_width(a);
			}
		}
	}
	EXPECT_GE(probes, 60u); // 64 in the four specs as they are
	EXPECT_GT(symbols, 0u); // the CUDA launches' kernels
}

// A probe's plan (decode_plan) gives the very span the walk of its spec
// gives (the path probes with a bytes or alias rule take), on every probe of
// every built-in spec and random records: the plan reads no ArgSpec per
// call, so a field it forgot would differ here.
TEST(TypedSpan, ThePlanDecodesAsTheSpecWalkDoes)
{
	std::mt19937_64 rng(41);
	size_t planned = 0, with_bytes = 0, with_symbols = 0;
	Interner names;
	for (auto [set, id] : builtin_probes()) {
		const SpecSet &specs = *set;
		const ProbeSpec &spec = specs.probes[id];
		const DecodePlan plan = decode_plan(spec);
		DecodePlan walk = plan;
		walk.general = true;
		planned += !plan.general;
		with_bytes += plan.bytes_slot >= 0;
		with_symbols += plan.n_symbols > 0;
		for (int round = 0; round < 20; round++) {
			const eacgm_span_event e = random_record(rng, id, round);
			TypedSpan t = decode_typed(e, spec, plan, specs, nullptr, names);
			TypedSpan w = decode_typed(e, spec, walk, specs, nullptr, names);
			ASSERT_EQ(std::memcmp(&t, &w, sizeof t), 0) << spec.function;
		}
	}
	// Most probes take the plan; some of those move bytes or name kernels.
	EXPECT_GE(planned, 50u);
	EXPECT_GT(with_bytes, 0u);
	EXPECT_GT(with_symbols, 0u);
}
