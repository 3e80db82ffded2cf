// SPDX-License-Identifier: Apache-2.0
// Python function spans from stack samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "pipeline/python_spans.h"

namespace eacgm {
namespace {

PyFrame f(const std::string &name, int first_line, int line = 0)
{
	return {name, "/app/train.py", line ? line : first_line + 1, first_line};
}

// Stacks given outermost first for readability.
PyStackSample at(uint64_t ts, std::vector<PyFrame> outer_first)
{
	return {ts, std::vector<PyFrame>(outer_first.rbegin(), outer_first.rend())};
}

const Span *find(const std::vector<Span> &spans, const std::string &name, uint64_t start)
{
	for (auto &s : spans)
		if (s.name == name && s.start_ns == start)
			return &s;
	return nullptr;
}

TEST(PythonSpans, NestedFunctionsFromFirstToLastSample)
{
	PyFrame main = f("main", 1), step = f("step", 10), fwd = f("Model.forward", 20), loss = f("loss", 30);
	std::vector<PyStackSample> s = {
		at(100, {main}), at(200, {main, step, fwd}), at(300, {main, step, fwd}), at(400, {main, step, loss}),
		at(500, {main}), at(600, {main, step}),
	};
	auto spans = python_function_spans(7, 8, s);
	ASSERT_EQ(spans.size(), 5u);
	const Span *m = find(spans, "main", 100), *st1 = find(spans, "step", 200),
		   *fw = find(spans, "Model.forward", 200), *lo = find(spans, "loss", 400),
		   *st2 = find(spans, "step", 600);
	ASSERT_TRUE(m && st1 && fw && lo && st2);
	EXPECT_EQ(m->dur_ns, 500u);
	EXPECT_EQ(m->depth, 0u);
	EXPECT_EQ(st1->dur_ns, 200u); // 200..400
	EXPECT_EQ(st1->depth, 1u);
	EXPECT_EQ(fw->dur_ns, 100u); // 200..300
	EXPECT_EQ(fw->depth, 2u);
	EXPECT_EQ(lo->dur_ns, 0u); // one sample
	EXPECT_EQ(st2->dur_ns, 0u);
	EXPECT_EQ(m->layer, "python");
	EXPECT_EQ(m->pid, 7u);
	EXPECT_EQ(m->tid, 8u);
	EXPECT_EQ(fw->args["file"], "/app/train.py");
	EXPECT_EQ(fw->args["line"], 20);
	// Self time: main 500 minus step 200; step minus forward 100.
	EXPECT_EQ(m->args["self_ns"], 300);
	EXPECT_EQ(st1->args["self_ns"], 100);
	EXPECT_EQ(fw->args["self_ns"], 100);
}

TEST(PythonSpans, AnotherFunctionAtTheSameDepthEndsTheFirst)
{
	auto spans = python_function_spans(1, 1, {at(0, {f("a", 1), f("b", 5)}), at(10, {f("a", 1), f("c", 9)})});
	ASSERT_EQ(spans.size(), 3u);
	EXPECT_TRUE(find(spans, "b", 0));
	EXPECT_TRUE(find(spans, "c", 10));
	EXPECT_EQ(find(spans, "a", 0)->dur_ns, 10u);
	// Same name, other definition (first line): another function.
	auto twins = python_function_spans(1, 1, {at(0, {f("a", 1)}), at(10, {f("a", 2)})});
	EXPECT_EQ(twins.size(), 2u);
}

TEST(PythonSpans, MeasuredCallsSplitMergedSamplesAndKeepTheirTimes)
{
	PyFrame main = f("main", 1), key = f("key", 10), work = f("work", 20);
	// The samples see key throughout 120..480: two calls back to back.
	std::vector<PyStackSample> s = {at(100, {main}),
					at(120, {main, key, work}),
					at(290, {main, key, work}),
					at(350, {main, key, work}),
					at(480, {main, key, work}),
					at(600, {main})};
	std::vector<PyCall> calls = {{110, 300, key}, {300, 490, key}};
	auto spans = python_function_spans(1, 1, s, calls);
	const Span *k1 = find(spans, "key", 110), *k2 = find(spans, "key", 300), *m = find(spans, "main", 100);
	ASSERT_TRUE(k1 && k2 && m);
	EXPECT_EQ(spans.size(), 5u); // main, two keys, a work in each
	EXPECT_EQ(k1->dur_ns, 190u);
	EXPECT_EQ(k2->dur_ns, 190u);
	EXPECT_EQ(k1->args["exact"], true);
	EXPECT_EQ(k2->args["exact"], true);
	EXPECT_EQ(k1->depth, 1u);
	EXPECT_FALSE(m->args.contains("exact")); // sampled: its ends are samples
	EXPECT_EQ(m->dur_ns, 500u);
	EXPECT_EQ(m->args["self_ns"], 500 - 190 - 190);
	// The calls' boundaries split what they called too: a work in each.
	const Span *w1 = find(spans, "work", 120), *w2 = find(spans, "work", 350);
	ASSERT_TRUE(w1 && w2);
	EXPECT_EQ(w1->depth, 2u);
	EXPECT_EQ(w1->dur_ns, 170u);
	EXPECT_EQ(w2->depth, 2u);
	EXPECT_EQ(w2->dur_ns, 130u);
}

TEST(PythonSpans, WhatTheSamplesSawBelowACallCoversIt)
{
	// A thread's first function is sampled late (its first sample), the
	// call it made from C was measured from its start: the caller holds it.
	PyFrame boot = f("Thread._bootstrap_inner", 1), run = f("Worker.run", 10), spin = f("spin", 20);
	auto spans = python_function_spans(1, 1, {at(105, {boot, run, spin}), at(190, {boot, run, spin})},
					   {{100, 200, run}});
	const Span *b = find(spans, "Thread._bootstrap_inner", 100), *r = find(spans, "Worker.run", 100);
	ASSERT_TRUE(b && r) << spans.size();
	EXPECT_EQ(b->depth, 0u);
	EXPECT_EQ(b->dur_ns, 100u);
	EXPECT_EQ(r->depth, 1u);
	EXPECT_EQ(find(spans, "spin", 105)->depth, 2u);
}

TEST(PythonSpans, ASampledParentCoversTheCallsItHolds)
{
	PyFrame main = f("main", 1), cb = f("callback", 10);
	// main's last sample is at 200, inside the callback it made, which ran to 260.
	auto spans = python_function_spans(1, 1, {at(100, {main}), at(200, {main, cb})}, {{150, 260, cb}});
	ASSERT_EQ(spans.size(), 2u);
	const Span *m = find(spans, "main", 100), *c = find(spans, "callback", 150);
	ASSERT_TRUE(m && c);
	EXPECT_EQ(m->dur_ns, 160u);
	EXPECT_EQ(c->depth, 1u);
	EXPECT_EQ(c->dur_ns, 110u);
}

TEST(PythonSpans, ACallASampleContradictsIsLeftOutAndCounted)
{
	PyFrame main = f("main", 1), a = f("a", 5);
	// The call "ran" to 500, but at 300 and 400 the stack held main alone:
	// its return was missed and it was paired with a later one.
	size_t dropped = 0;
	auto spans = python_function_spans(1, 1, {at(100, {main, a}), at(300, {main}), at(400, {main})}, {{90, 500, a}},
					   &dropped);
	EXPECT_EQ(dropped, 1u);
	EXPECT_EQ(find(spans, "a", 90), nullptr);
	EXPECT_NE(find(spans, "a", 100), nullptr); // what the samples saw stays
	// One sample alone (a walk that met the chain mid-update) is not enough.
	dropped = 0;
	python_function_spans(1, 1, {at(100, {main, a}), at(300, {main}), at(400, {main, a})}, {{90, 500, a}},
			      &dropped);
	EXPECT_EQ(dropped, 0u);
	// A truncated sample (outer frames missing) contradicts nothing.
	PyStackSample cut = at(300, {main});
	cut.truncated = true;
	dropped = 0;
	python_function_spans(1, 1, {at(100, {main, a}), cut}, {{90, 500, a}}, &dropped);
	EXPECT_EQ(dropped, 0u);
}

TEST(PythonSpans, ATruncatedSampleContinuesTheOpenStackOrSaysNothing)
{
	PyFrame m = f("<module>", 1), a = f("a", 5), b = f("b", 9), c = f("c", 13);
	PyStackSample cut = at(200, {b, c}); // <module> and a beyond the walker's depth
	cut.truncated = true;
	PyStackSample lost = at(300, {f("z", 50)}); // z is not open: nothing to hang it on
	lost.truncated = true;
	auto spans = python_function_spans(1, 1, {at(100, {m, a, b}), cut, lost, at(400, {m, a, b, c})});
	// One <module> and one a throughout; b and c continue across the cut sample.
	EXPECT_EQ(spans.size(), 4u);
	ASSERT_TRUE(find(spans, "<module>", 100) && find(spans, "a", 100) && find(spans, "b", 100));
	EXPECT_EQ(find(spans, "<module>", 100)->dur_ns, 300u);
	EXPECT_EQ(find(spans, "b", 100)->dur_ns, 300u);
	ASSERT_TRUE(find(spans, "c", 200));
	EXPECT_EQ(find(spans, "c", 200)->dur_ns, 200u);
	EXPECT_EQ(find(spans, "c", 200)->depth, 3u);
}

TEST(PythonSpans, CallsAloneNestByTime)
{
	PyFrame mod = f("<module>", 1), a = f("a", 5), b = f("b", 9);
	auto spans = python_function_spans(1, 1, {}, {{0, 100, mod}, {10, 50, a}, {20, 30, b}, {50, 60, a}});
	ASSERT_EQ(spans.size(), 4u);
	EXPECT_EQ(find(spans, "<module>", 0)->depth, 0u);
	EXPECT_EQ(find(spans, "a", 10)->depth, 1u);
	EXPECT_EQ(find(spans, "b", 20)->depth, 2u);
	EXPECT_EQ(find(spans, "a", 50)->depth, 1u); // a sibling that starts where the first ends
	EXPECT_EQ(find(spans, "<module>", 0)->args["self_ns"], 50);
}

// Random walks of a call tree: calls and returns between samples, some
// samples truncated, some periodic. (Two samples at one moment that
// disagree are left out: there the batch nests by time, which makes a
// one-sample span a child of the sibling that ended at that moment, while
// the stack, which SampledSpans follows, says sibling.)
std::vector<PyStackSample> random_samples(unsigned seed, size_t n)
{
	std::mt19937 rng(seed);
	const PyFrame names[] = {f("a", 10), f("b", 20), f("c", 30), f("d", 40)};
	std::vector<PyFrame> stack = {f("<module>", 1)};
	std::vector<PyStackSample> out;
	uint64_t ts = 1000;
	for (size_t i = 0; i < n; i++) {
		for (unsigned moves = rng() % 3; moves-- > 0;)
			if (rng() % 2 && stack.size() > 1)
				stack.pop_back();
			else if (stack.size() < 7)
				stack.push_back(names[rng() % 4]);
		PyStackSample smp = at(ts, stack);
		if (rng() % 9 == 0) { // the walker's depth cut its outer frames
			smp.frames = std::vector<PyFrame>(smp.frames->begin(),
							  smp.frames->begin() + 1 + rng() % smp.frames->size());
			smp.truncated = true;
		}
		smp.periodic = rng() % 3 != 0;
		smp.period_ns = smp.periodic && rng() % 2 ? 1000 + rng() % 50 : 0;
		out.push_back(smp);
		ts += 100 + rng() % 900;
	}
	return out;
}

// The spans of samples by the batch's general path (with measured calls):
// a call of a function no sample holds, after them all, makes it take that
// path without changing the sampled spans.
std::vector<Span> by_batch(const std::vector<PyStackSample> &s)
{
	PyFrame never = f("never_sampled", 900);
	uint64_t after = s.back().ts_ns + 1000000;
	auto spans = python_function_spans(1, 1, s, {{after, after + 10, never}});
	EXPECT_EQ(spans.back().name, "never_sampled");
	spans.pop_back();
	return spans;
}

TEST(PythonSpans, SpansMadeAsSamplesComeAreTheBatchsSpans)
{
	for (unsigned seed = 1; seed <= 40; seed++) {
		SCOPED_TRACE("seed " + std::to_string(seed));
		auto samples = random_samples(seed, 300);
		auto expected = by_batch(samples);
		// Handed over in pieces of every size, as the record loop takes them.
		SampledSpans builder(1, 1);
		std::vector<Span> got;
		for (size_t i = 0; i < samples.size(); i++) {
			builder.add(samples[i]);
			if (i % (1 + seed % 17) == 0)
				for (Span &s : builder.take())
					got.push_back(std::move(s));
		}
		for (Span &s : builder.finish())
			got.push_back(std::move(s));
		EXPECT_EQ(builder.late(), 0u);
		EXPECT_EQ(builder.open_frames(), 0u);
		auto key = [](const Span &s) { return std::tie(s.start_ns, s.dur_ns, s.depth, s.name); };
		std::sort(got.begin(), got.end(), [&](auto &x, auto &y) { return key(x) < key(y); });
		std::sort(expected.begin(), expected.end(), [&](auto &x, auto &y) { return key(x) < key(y); });
		ASSERT_EQ(got.size(), expected.size());
		ASSERT_GT(got.size(), 30u); // the walk made spans at several depths
		for (size_t i = 0; i < got.size(); i++) {
			EXPECT_EQ(key(got[i]), key(expected[i])) << i;
			EXPECT_EQ(got[i].args, expected[i].args) << i;
		}
	}
}

TEST(PythonSpans, ALateSampleStartsTheOpenFramesItShares)
{
	PyFrame m = f("<module>", 1), a = f("a", 5), b = f("b", 9), c = f("c", 13);
	SampledSpans builder(1, 1);
	builder.add(at(100, {m, b}));
	builder.add(at(200, {m}));                // b ends at 100
	builder.add(at(400, {m, a, c}));          // a from 400
	PyStackSample start = at(300, {m, a, c}); // a torch call's start, read when it ended
	start.periodic = false;
	builder.add(start);
	PyStackSample before_b = at(50, {m, a}); // before b ended at its depth: nowhere to go
	before_b.periodic = false;
	builder.add(before_b);
	builder.add(at(500, {m}));
	auto spans = builder.finish();
	EXPECT_EQ(builder.late(), 1u);
	ASSERT_EQ(spans.size(), 4u);
	ASSERT_TRUE(find(spans, "a", 300) && find(spans, "c", 300) && find(spans, "<module>", 50));
	EXPECT_EQ(find(spans, "a", 300)->dur_ns, 100u); // 300..400
	EXPECT_EQ(find(spans, "<module>", 50)->dur_ns, 450u);
	EXPECT_EQ(find(spans, "<module>", 50)->args["samples"], 4); // the late ones are not periodic
}

TEST(PythonSpans, NoSamplesNoSpans) { EXPECT_TRUE(python_function_spans(1, 1, {}).empty()); }

TEST(PythonSpans, StacksAreShownInnermostFirstWithFileAndLine)
{
	EXPECT_EQ(format_py_stack({f("Model.forward", 20, 23), f("main", 1, 4)}),
		  (std::vector<std::string>{"Model.forward (train.py:23)", "main (train.py:4)"}));
}

} // namespace
} // namespace eacgm
