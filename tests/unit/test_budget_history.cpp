// SPDX-License-Identifier: Apache-2.0
// What calls and samples stand for as the overhead budget moves
// (pipeline/weights.h): the weight or period in force at a time, exactly at
// the changes' edges, and the list bounded however long the agent runs.
#include <gtest/gtest.h>

#include "pipeline/weights.h"

using namespace eacgm;

TEST(BudgetHistory, WeightInForceAtTheCallsStart)
{
	BudgetHistory h;
	EXPECT_EQ(h.weight(0, 5), 1.0); // no change yet: every call is itself
	h.set_weights(100, {2.0, 4.0});
	EXPECT_EQ(h.weight(0, 99), 1.0);
	EXPECT_EQ(h.weight(0, 100), 2.0);
	EXPECT_EQ(h.weight(1, 150), 4.0);
	EXPECT_EQ(h.weight(2, 150), 1.0); // a spec past the list: not throttled
	h.set_weights(100, {3.0});        // the same decision time: replaced
	EXPECT_EQ(h.weight(0, 150), 3.0);
	EXPECT_EQ(h.weight(1, 150), 1.0);
	h.set_weights(200, {});           // throttling over
	EXPECT_EQ(h.weight(0, 199), 3.0); // a late span of the burst keeps its weight
	EXPECT_EQ(h.weight(0, 200), 1.0);
}

TEST(BudgetHistory, PeriodInForceAndBeforeTheFirst)
{
	BudgetHistory h;
	EXPECT_EQ(h.period_at(10), 0u);
	h.set_sample_period(50, 1'000'000);
	h.set_sample_period(200, 4'000'000);
	EXPECT_EQ(h.period_at(10), 1'000'000u); // before the first: the first
	EXPECT_EQ(h.period_at(199), 1'000'000u);
	EXPECT_EQ(h.period_at(200), 4'000'000u);
	EXPECT_EQ(h.period_at(1'000'000), 4'000'000u);
}

// An agent whose budget moves every 2 s for a day keeps the last 10
// minutes of changes and the one in force before them, and answers for
// those as it did.
TEST(BudgetHistory, ChangesNoSpanCanNeedAreForgotten)
{
	BudgetHistory h;
	const uint64_t s = 1'000'000'000, day = 86'400 * s;
	for (uint64_t t = 0; t < day; t += 2 * s) {
		h.set_weights(t, {double(t / s)});
		h.set_sample_period(t, 1000 + t / s);
	}
	const uint64_t last = day - 2 * s;
	const size_t kept = BudgetHistory::kKeepNs / (2 * s) + 1;
	EXPECT_LE(h.changes(), 2 * (kept + 1));
	EXPECT_GE(h.changes(), 2 * kept);
	EXPECT_EQ(h.weight(0, last), double(last / s));
	EXPECT_EQ(h.weight(0, last - 1), double((last - 2 * s) / s));
	const uint64_t edge = last - BudgetHistory::kKeepNs;
	EXPECT_EQ(h.weight(0, edge), double(edge / s));
	EXPECT_EQ(h.period_at(edge + s), 1000 + edge / s);
}
