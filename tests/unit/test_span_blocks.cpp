// SPDX-License-Identifier: Apache-2.0
// Spans kept in blocks (schema 4: store/span_layout.h, store/sqlmod.h),
// read back through the `spans` virtual table: every kind of args value
// comes back as the very text a row per span held, constraints on id and
// start_ns pick exactly their rows, and a damaged file is an error, never a
// wrong row.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "store/block_reader.h"
#include "common/text.h"
#include "sql_rows.h"
#include "store/sqlmod.h"
#include "store/store.h"

using namespace eacgm;
using nlohmann::json;

namespace {

class SpanBlocks : public testing::Test {
protected:
	void SetUp() override
	{
		dir_ = testing::TempDir() + "/span-blocks-" + std::to_string(getpid());
		std::filesystem::create_directories(dir_);
	}
	void TearDown() override
	{
		if (db_)
			sqlite3_close(db_);
		std::filesystem::remove_all(dir_);
	}
	std::string path() const { return dir_ + "/run.db"; }

	void write(const std::vector<std::vector<Span>> &batches)
	{
		auto w = StoreWriter::create(path());
		ASSERT_TRUE(w) << w.error().message;
		for (const auto &b : batches)
			ASSERT_TRUE(w->add_spans(b)) << "batch of " << b.size();
		ASSERT_TRUE(w->finish());
		ASSERT_EQ(sqlite3_open(path().c_str(), &db_), SQLITE_OK);
		ASSERT_TRUE(register_span_module(db_));
	}

	std::vector<std::string> rows(const std::string &sql) { return sql_rows(db_, sql); }
	std::string one(const std::string &sql)
	{
		auto r = rows(sql);
		return r.size() == 1 ? r[0] : "(" + std::to_string(r.size()) + " rows)";
	}

	std::string dir_;
	sqlite3 *db_ = nullptr;
};

Span span(uint64_t start, json args = json::object())
{
	return Span{.start_ns = start,
		    .dur_ns = 10,
		    .pid = 42,
		    .tid = 43,
		    .layer = "testlib",
		    .name = "f",
		    .args = std::move(args)};
}

std::string text(const json &args) { return args.dump(-1, ' ', false, json::error_handler_t::replace); }

} // namespace

TEST_F(SpanBlocks, EveryKindOfArgsValueComesBackAsTheSameText)
{
	json many = json::object();
	for (int i = 0; i < 53; i++)
		many["k" + std::to_string(i)] = i * 1000003;
	const std::vector<json> args = {
		json::object(),
		{{"x", -5}},
		{{"x", INT64_MIN}, {"y", INT64_MAX}},
		{{"u", UINT64_MAX}, {"v", uint64_t(INT64_MAX) + 1}},
		{{"b", true}, {"c", false}},
		{{"p", "0x7f00dead"}, {"q", "0x0"}},
		{{"p", "0x0001"}}, // not as a pointer is written: kept as the string it is
		{{"p", "0x"}},
		{{"p", "0xFF"}},
		{{"p", "0x10000000000000000"}}, // past 64 bits
		{{"d", 0.5}, {"e", 1e308}, {"weight", 1.0}, {"z", -0.0}},
		{{"s", "float32[8, 32]"}, {"t", ""}},
		{{"s", "\xff\xfe not UTF-8"}},
		{{"s", "quote\" backslash\\ newline\n tab\t \x01"}},
		{{"key with \"quote\" and \xc3\xa9", 1}},
		{{"grid", {1, 2, 3}}, {"block", {256, 1, 1}}},
		{{"grid", {-1, INT64_MIN}}},
		{{"a", json::array()}},
		{{"a", {1, "x"}}},
		{{"a", {UINT64_MAX}}},
		{{"a", {1, 2, 3, 4, 5, 6, 7, 8, 9}}},
		{{"o", {{"k", 1}, {"l", {1, 2}}}}},
		{{"n", nullptr}},
		many,
	};
	std::vector<Span> first, second;
	for (size_t i = 0; i < args.size(); i++)
		(i % 2 ? second : first).push_back(span(i, args[i]));
	// The same shapes again, other values: a function's arguments are
	// coded as differences from its previous call's.
	second.push_back(span(100, {{"p", "0x7f00beef"}, {"q", "0x10"}}));
	second.push_back(span(101, {{"grid", {7, 8, 9}}, {"block", {1, 1, 1}}}));
	write({first, second});
	std::vector<std::string> want;
	for (const auto *batch : {&first, &second})
		for (const Span &s : *batch)
			want.push_back(text(s.args));
	EXPECT_EQ(rows("SELECT args FROM spans ORDER BY id"), want);
	// eacgm's own reading gives the same objects.
	auto rec = load_recording(path());
	ASSERT_TRUE(rec) << rec.error().message;
	ASSERT_EQ(rec->spans.size(), want.size());
	std::vector<std::string> read;
	for (const Span &s : rec->spans)
		read.push_back(text(s.args));
	std::sort(read.begin(), read.end());
	std::sort(want.begin(), want.end());
	EXPECT_EQ(read, want);
}

TEST_F(SpanBlocks, TheOtherColumnsComeBackAsWritten)
{
	Span a = span(1'000'000'000'000, {{"x", 1}});
	a.ret = -2;
	a.ret_name = "cudaErrorMemoryAllocation";
	a.bytes = UINT64_MAX;
	a.depth = 3;
	a.dur_ns = 0;
	Span b = span(5, {{"x", 2}});
	b.pid = UINT32_MAX;
	b.tid = 0;
	b.layer = "torch";
	b.name = "aten::mm";
	b.py_stack = PyStack{"f (a.py:1)", "<module> (a.py:9)"};
	write({{a, b}});
	EXPECT_EQ(rows("SELECT id, pid, tid, layer, name, start_ns, dur_ns, depth, ret, ret_name, bytes, py_stack "
		       "FROM spans ORDER BY id"),
		  (std::vector<std::string>{
			  "1|42|43|testlib|f|1000000000000|0|3|-2|cudaErrorMemoryAllocation|-1|NULL",
			  "2|4294967295|0|torch|aten::mm|5|10|0|0||0|[\"f (a.py:1)\",\"<module> (a.py:9)\"]"}));
}

TEST_F(SpanBlocks, ConstraintsOnIdAndStartPickExactlyTheirRows)
{
	// 5 batches (blocks) of 100 spans; span i (from 1) starts at 10 * i.
	std::vector<std::vector<Span>> batches(5);
	for (uint64_t i = 1; i <= 500; i++)
		batches[(i - 1) / 100].push_back(span(10 * i, {{"i", i}}));
	write(batches);
	EXPECT_EQ(one("SELECT count(*) FROM span_blocks"), "5");
	EXPECT_EQ(one("SELECT id, start_ns, args FROM spans WHERE id = 250"), "250|2500|{\"i\":250}");
	EXPECT_EQ(one("SELECT count(*), min(id), max(id) FROM spans WHERE id BETWEEN 150 AND 349"), "200|150|349");
	EXPECT_EQ(one("SELECT count(*), min(id) FROM spans WHERE id > 99.5"), "401|100");
	EXPECT_EQ(one("SELECT count(*), min(id), max(id) FROM spans WHERE start_ns > 4000 AND start_ns <= 4100"),
		  "10|401|410");
	EXPECT_EQ(one("SELECT count(*) FROM spans WHERE start_ns < 10"), "0");
	EXPECT_EQ(one("SELECT count(*) FROM spans WHERE id >= 501"), "0");
	EXPECT_EQ(one("SELECT group_concat(id) FROM spans WHERE id IN (1, 100, 101, 500)"), "1,100,101,500");
	EXPECT_EQ(one("SELECT group_concat(id) FROM (SELECT id FROM spans ORDER BY id DESC LIMIT 3)"), "500,499,498");
	EXPECT_EQ(one("SELECT count(*) FROM spans a JOIN spans b ON b.id = a.id + 1 WHERE a.id % 50 = 0"), "9");
	EXPECT_EQ(one("SELECT sum(id) FROM spans"), "125250");
}

TEST_F(SpanBlocks, ABatchWithMoreArgumentValuesThanABlockKeepsFailsAlone)
{
	json too_many = json::object();
	for (int i = 0; i < 54; i++)
		too_many["k" + std::to_string(i)] = i;
	auto w = StoreWriter::create(path());
	ASSERT_TRUE(w) << w.error().message;
	ASSERT_TRUE(w->add_spans({span(1), span(2)}));
	auto r = w->add_spans({span(3), span(4, too_many)});
	ASSERT_FALSE(r);
	EXPECT_NE(r.error().message.find("54 argument values, more than the 53"), std::string::npos)
		<< r.error().message;
	ASSERT_TRUE(w->add_spans({span(5)}));
	ASSERT_TRUE(w->finish());
	ASSERT_EQ(sqlite3_open(path().c_str(), &db_), SQLITE_OK);
	ASSERT_TRUE(register_span_module(db_));
	EXPECT_EQ(one("SELECT group_concat(id || ':' || start_ns) FROM spans"), "1:1,2:2,3:5");
}

TEST_F(SpanBlocks, ADamagedFileIsAnErrorNeverAWrongRow)
{
	write({{span(1, {{"s", "x"}}), span(2, {{"s", "y"}})}});
	ASSERT_EQ(sqlite3_exec(db_, "UPDATE span_blocks SET data = substr(data, 1, length(data) - 1)", nullptr, nullptr,
			       nullptr),
		  SQLITE_OK);
	EXPECT_EQ(one("SELECT count(*) FROM spans").rfind("error: not a valid span block: ", 0), 0u)
		<< one("SELECT count(*) FROM spans");
	auto rec = load_recording(path());
	ASSERT_FALSE(rec);
	EXPECT_NE(rec.error().message.find("is damaged: not a valid span block"), std::string::npos)
		<< rec.error().message;
}

TEST_F(SpanBlocks, ASpanWhoseFunctionOrStringIsGoneIsAnError)
{
	write({{span(1, {{"s", "x"}})}});
	ASSERT_EQ(sqlite3_exec(db_, "DELETE FROM strings", nullptr, nullptr, nullptr), SQLITE_OK);
	EXPECT_EQ(one("SELECT args FROM spans"),
		  "error: eacgm_spans: a span names a string the recording does not hold");
	ASSERT_EQ(sqlite3_exec(db_, "DELETE FROM functions", nullptr, nullptr, nullptr), SQLITE_OK);
	EXPECT_EQ(one("SELECT id, start_ns FROM spans"), "1|1"); // what needs no function still reads
	EXPECT_EQ(one("SELECT name FROM spans"),
		  "error: eacgm_spans: a span names a function the recording does not hold");
}

// eacgm's own readers take a schema 4 file's spans from its blocks
// (block_reader.h), not through the virtual table: they give what the rows
// of its version 3 copy (export --sqlite) give, value for value and type
// for type, in every order and filter.
TEST_F(SpanBlocks, ReadingTheBlocksGivesWhatTheRowsGive)
{
	std::vector<Span> spans;
	for (int i = 0; i < 40; i++) {
		json args = {{"x", i - 20},
			     {"p", hex(0x7f0000000000ull + 64 * i)},
			     {"shape", "float32[" + std::to_string(i % 3) + "]"},
			     {"grid", {i, 1, 1}},
			     {"w", 0.25 * i},
			     {"big", UINT64_MAX - i}};
		if (i % 4 == 0)
			args.update({{"seq", i / 4}, {"rank", i % 2}, {"nranks", 2}});
		if (i % 5 == 0)
			args["odd"] = {{"nested", true}};
		Span s = span(1000 - 10 * i, std::move(args)); // later spans start earlier: by_start reorders
		s.tid = 43 + i % 3;
		s.ret = i % 7 - 3;
		s.ret_name = i % 2 ? "ok" : "";
		if (i % 3 == 0)
			s.py_stack = PyStack{"f (a.py:" + std::to_string(i % 2) + ")", "<module> (a.py:9)"};
		spans.push_back(std::move(s));
	}
	write({std::vector<Span>(spans.begin(), spans.begin() + 25),
	       std::vector<Span>(spans.begin() + 25, spans.end())});
	const std::string flat = dir_ + "/flat.db";
	ASSERT_TRUE(write_flat_copy(path(), flat));
	auto v4 = RecordingReader::open(path()), v3 = RecordingReader::open(flat);
	ASSERT_TRUE(v4 && v3);
	EXPECT_EQ(v4->schema_version(), 4);
	EXPECT_EQ(v3->schema_version(), 3);
	auto same = [](const std::vector<Span> &a, const std::vector<Span> &b) {
		ASSERT_EQ(a.size(), b.size());
		for (size_t i = 0; i < a.size(); i++) {
			EXPECT_EQ(std::tie(a[i].start_ns, a[i].dur_ns, a[i].pid, a[i].tid, a[i].depth, a[i].layer,
					   a[i].name, a[i].ret, a[i].ret_name, a[i].bytes),
				  std::tie(b[i].start_ns, b[i].dur_ns, b[i].pid, b[i].tid, b[i].depth, b[i].layer,
					   b[i].name, b[i].ret, b[i].ret_name, b[i].bytes))
				<< "span " << i;
			EXPECT_EQ(a[i].args.dump(), b[i].args.dump()) << "span " << i;
			for (auto it = a[i].args.begin(); it != a[i].args.end(); ++it)
				EXPECT_EQ(it->type(), b[i].args.at(it.key()).type()) << it.key();
			EXPECT_EQ(a[i].py_stack.frames(), b[i].py_stack.frames()) << "span " << i;
		}
	};
	for (SpanOrder order : {SpanOrder::as_recorded, SpanOrder::by_start, SpanOrder::by_thread}) {
		std::vector<Span> a, b;
		ASSERT_TRUE(v4->each_span(order, [&](const Span &s) { a.push_back(s); }));
		ASSERT_TRUE(v3->each_span(order, [&](const Span &s) { b.push_back(s); }));
		same(a, b);
	}
	std::vector<Span> a, b;
	ASSERT_TRUE(v4->each_span_with_int_args({"seq", "rank"}, [&](const Span &s) { a.push_back(s); }));
	ASSERT_TRUE(v3->each_span_with_int_args({"seq", "rank"}, [&](const Span &s) { b.push_back(s); }));
	EXPECT_EQ(a.size(), 10u);
	same(a, b);
}

// A trace's order read from the blocks in passes of a few threads, or a
// part of one thread's start times, at a time (read_spans_by_thread's
// bound on memory): the same order as one pass, and as SQLite's sort of the
// `spans` table, whatever the bound, with ties in start, duration and depth.
TEST_F(SpanBlocks, ATracesOrderReadInBoundedPassesIsSQLitesOrder)
{
	std::vector<std::vector<Span>> batches(7);
	for (int i = 0; i < 2000; i++) {
		Span s = span(1000 + (i / 7) * 10 + (i % 5 == 0 ? 0 : i % 3), {{"i", i}});
		s.tid = 43 + i % 3;
		s.dur_ns = (i * 37) % 100;
		s.depth = i % 4;
		batches[i % 7].push_back(std::move(s));
	}
	write(batches);
	std::vector<std::string> want;
	for (const std::string &r : rows("SELECT json_extract(args, '$.i') FROM spans"
					 " ORDER BY pid, tid, start_ns, dur_ns DESC, depth, id"))
		want.push_back(r);
	ASSERT_EQ(want.size(), 2000u);
	for (size_t limit : {size_t(1'000'000), size_t(500), size_t(64), size_t(1)}) {
		std::vector<std::string> got;
		auto r = read_spans_by_thread(
			db_, [&](Span &&s) { got.push_back(s.args["i"].dump()); }, limit);
		ASSERT_TRUE(r) << r.error().message;
		EXPECT_EQ(got, want) << "limit " << limit;
	}
}
