// Python function spans from stack samples.
#include <gtest/gtest.h>

#include "ingest/python_spans.h"

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
		at(100, {main}),
		at(200, {main, step, fwd}),
		at(300, {main, step, fwd}),
		at(400, {main, step, loss}),
		at(500, {main}),
		at(600, {main, step}),
	};
	auto spans = python_function_spans(7, 8, s);
	ASSERT_EQ(spans.size(), 5u);
	const Span *m = find(spans, "main", 100), *st1 = find(spans, "step", 200), *fw = find(spans, "Model.forward", 200),
		   *lo = find(spans, "loss", 400), *st2 = find(spans, "step", 600);
	ASSERT_TRUE(m && st1 && fw && lo && st2);
	EXPECT_EQ(m->dur_ns, 500u);
	EXPECT_EQ(m->depth, 0u);
	EXPECT_EQ(st1->dur_ns, 200u); // 200..400
	EXPECT_EQ(st1->depth, 1u);
	EXPECT_EQ(fw->dur_ns, 100u); // 200..300
	EXPECT_EQ(fw->depth, 2u);
	EXPECT_EQ(lo->dur_ns, 0u);   // one sample
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

PyStackSample call(uint64_t ts, std::vector<PyFrame> outer_first, PyStackSample::Boundary b)
{
	PyStackSample s = at(ts, std::move(outer_first));
	s.boundary = b;
	return s;
}

TEST(PythonSpans, MeasuredCallsSplitBackToBackCallsAndKeepTheirTimes)
{
	PyFrame main = f("main", 1), key = f("key", 10), work = f("work", 20);
	using B = PyStackSample;
	std::vector<PyStackSample> s = {
		call(100, {main, key}, B::kCallStart), at(150, {main, key, work}), call(300, {main, key}, B::kCallEnd),
		call(300, {main, key}, B::kCallStart), at(350, {main, key, work}), call(500, {main, key}, B::kCallEnd),
		at(600, {main}),
	};
	auto spans = python_function_spans(1, 1, s);
	const Span *k1 = find(spans, "key", 100), *k2 = find(spans, "key", 300), *m = find(spans, "main", 100);
	ASSERT_TRUE(k1 && k2 && m);
	EXPECT_EQ(spans.size(), 5u); // main, two keys, two works
	EXPECT_EQ(k1->dur_ns, 200u);
	EXPECT_EQ(k2->dur_ns, 200u);
	EXPECT_EQ(k1->args["exact"], true);
	EXPECT_EQ(k2->args["exact"], true);
	EXPECT_FALSE(m->args.contains("exact")); // sampled: its ends are samples
	EXPECT_EQ(m->dur_ns, 500u);
	EXPECT_EQ(find(spans, "work", 150)->dur_ns, 0u);
}

TEST(PythonSpans, ASampleThatContradictsAnOpenMeasuredCallIsIgnored)
{
	PyFrame main = f("main", 1), key = f("key", 10), other = f("other", 30);
	using B = PyStackSample;
	// The sample at 150 lost the key frame (read while frames were being linked).
	std::vector<PyStackSample> s = {call(100, {main, key}, B::kCallStart), at(150, {main, other}),
					at(200, {main, key}), call(300, {main, key}, B::kCallEnd)};
	auto spans = python_function_spans(1, 1, s);
	ASSERT_EQ(spans.size(), 2u) << spans[0].name;
	const Span *k = find(spans, "key", 100);
	ASSERT_TRUE(k);
	EXPECT_EQ(k->dur_ns, 200u);
	EXPECT_EQ(k->args["exact"], true);
}

TEST(PythonSpans, NoSamplesNoSpans) { EXPECT_TRUE(python_function_spans(1, 1, {}).empty()); }

TEST(PythonSpans, StacksAreShownInnermostFirstWithFileAndLine)
{
	EXPECT_EQ(format_py_stack({f("Model.forward", 20, 23), f("main", 1, 4)}),
		  (std::vector<std::string>{"Model.forward (train.py:23)", "main (train.py:4)"}));
}

} // namespace
} // namespace eacgm
