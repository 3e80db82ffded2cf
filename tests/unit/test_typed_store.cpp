// SPDX-License-Identifier: Apache-2.0
// The store's typed rows (store/typed.cpp): a typed span is kept as its
// Span would be. Two recordings of the same calls, one written as Spans
// (render_span, then the args object taken apart key by key) and one as
// typed spans, read back through the `spans` virtual table: every row, its
// args text, return name and stack, and every functions row, the same. The
// typed path's lookups (shapes, enum, tensor and symbol texts, stacks) must
// not outlive the rows they name: retention that collects strings is
// followed by more typed spans.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <random>

#include "common/text.h"
#include "layers/torch.h"
#include "pipeline/decode.h"
#include "sql_rows.h"
#include "store/sqlmod.h"
#include "store/store.h"

using namespace eacgm;

namespace {

class TypedStore : public testing::Test {
protected:
	void SetUp() override
	{
		dir_ = testing::TempDir() + "/typed-store-" + std::to_string(getpid());
		std::filesystem::create_directories(dir_);
	}
	void TearDown() override { std::filesystem::remove_all(dir_); }

	// The rows of a query over a finished recording (sql_rows.h).
	std::vector<std::string> rows(const std::string &path, const std::string &sql)
	{
		sqlite3 *db = nullptr;
		std::vector<std::string> out = sqlite3_open(path.c_str(), &db) == SQLITE_OK && register_span_module(db)
			? sql_rows(db, sql)
			: std::vector<std::string>{"error: " + std::string(sqlite3_errmsg(db))};
		sqlite3_close(db);
		return out;
	}
	std::string dir_;
};

constexpr const char *kAllSpans = "SELECT * FROM spans ORDER BY id";
constexpr const char *kFunctions = "SELECT layer, name, args FROM functions ORDER BY id";

// A raw record of probe `id` whose values reach every case of its argument
// types: u64s past int64's range, negative i32s, enums known and not,
// symbols that resolve and some that do not, tensors of no dimension; and
// calls that did not return.
eacgm_span_event random_event(std::mt19937_64 &rng, uint32_t id, int round)
{
	eacgm_span_event e{.start_ns = 1'000'000 + uint64_t(round) * 1000, .dur_ns = rng() >> 40, .tgid = 7};
	e.tid = 8 + round % 3;
	e.spec_id = id;
	e.ret = round % 3 == 0 ? 0 : round % 3 == 1 ? rng() % 5 : rng();
	for (auto &a : e.args)
		a = round % 4 == 0 ? rng() : round % 4 == 1 ? rng() % 8 : round % 4 == 2 ? 0 : rng() % 4096;
	e.flags = round % 5 == 0 ? EACGM_SPAN_RUNQ : 0;
	// Calls left by an exception or a longjmp: their return's name is how.
	if (round % 7 == 3)
		e.flags |= EACGM_SPAN_LEFT_EXCEPTION;
	else if (round % 11 == 6)
		e.flags |= EACGM_SPAN_LEFT_LONGJMP;
	e.runq_ns = round % 10 == 0 ? rng() % 100'000 : 0; // a RUNQ span that waited 0 keeps no key
	return e;
}

// Half the symbols resolve, to names that are no hex (and one that is, and
// one that is not UTF-8); the rest stay hex, as an unresolved one is.
StrId symbol_of(Interner &names, uint64_t v)
{
	switch (v % 4) {
	case 0: return names.id("kernel_" + std::to_string(v % 16));
	case 1: return names.id(v % 8 == 1 ? "0x10" : "k\xff\xfe");
	default: return names.id(hex(v));
	}
}

} // namespace

TEST_F(TypedStore, ATypedSpanIsKeptAsItsSpanForEveryBuiltInProbe)
{
	std::mt19937_64 rng(37);
	size_t probes = 0, spans = 0;
	for (const char *layer : {"cuda", "nccl", "gloo", "torch"}) {
		auto specs = load_builtin_spec(layer);
		ASSERT_TRUE(specs) << layer << ": " << specs.error().message;
		for (TensorFormatter tensors : {TensorFormatter(format_tensor), TensorFormatter(nullptr)}) {
			Interner names;
			TypedSpans typed{&*specs, &names, tensors, {}, {}};
			std::vector<Span> rendered;
			const PyStack stacks[] = {{}, {"train.py:step", "model.py:forward"}, {"other.py:f"}};
			for (uint32_t id = 0; id < specs->probes.size(); id++) {
				const ProbeSpec &spec = specs->probes[id];
				probes++;
				for (int round = 0; round < 24; round++) {
					eacgm_span_event e = random_event(rng, id, round);
					TypedSpan t = decode_typed(e, spec, *specs, nullptr, names);
					size_t slot = 0;
					for (const ArgSpec &a : spec.args) {
						if (a.type == ArgType::Symbol && slot < EACGM_MAX_ARGS)
							t.args[slot] = symbol_of(names, e.args[slot]);
						slot += arg_width(a);
					}
					// Calls a throttled probe's burst saw (their weights'
					// texts, shared and not) and those it did not.
					t.weight = round % 6 == 1 ? 4.0
						: round % 6 == 4  ? 1 / 0.03
						: round % 12 == 5 ? 2.5
								  : 1.0;
					const PyStack &stack = stacks[(round / 2) % 3];
					typed.push_back(t, stack);
					rendered.push_back(render_span(t, spec, *specs, names, tensors));
					rendered.back().py_stack = stack;
				}
			}
			spans += rendered.size();
			const std::string a = dir_ + "/spans-" + layer + ".db", b = dir_ + "/typed-" + layer + ".db";
			for (const std::string &path : {a, b}) {
				auto w = StoreWriter::create(path);
				ASSERT_TRUE(w) << w.error().message;
				// Two batches, the second's shapes and values already known.
				size_t half = rendered.size() / 2;
				if (path == a) {
					ASSERT_TRUE(w->add_spans({rendered.begin(), rendered.begin() + half}));
					ASSERT_TRUE(w->add_spans({rendered.begin() + half, rendered.end()}));
				} else {
					TypedSpans first = typed, second = typed;
					first.spans.resize(half), first.stacks.resize(half);
					second.spans.erase(second.spans.begin(), second.spans.begin() + half);
					second.stacks.erase(second.stacks.begin(), second.stacks.begin() + half);
					ASSERT_TRUE(w->add_spans({}, first));
					auto r = w->add_spans({}, second);
					ASSERT_TRUE(r) << r.error().message;
				}
				ASSERT_TRUE(w->finish());
			}
			auto want = rows(a, kAllSpans), got = rows(b, kAllSpans);
			ASSERT_EQ(want.size(), rendered.size()) << layer << (want.empty() ? "" : ": " + want.back());
			for (size_t i = 0; i < want.size(); i++)
				ASSERT_EQ(got[i], want[i]) << layer << " row " << i;
			EXPECT_EQ(rows(b, kFunctions), rows(a, kFunctions)) << layer;
		}
	}
	EXPECT_GE(probes, 2 * 60u);
	EXPECT_GT(spans, 2000u);
}

// One batch of Spans and typed spans: the Spans first, ids counting on
// through the typed ones, each function's row shared by both.
TEST_F(TypedStore, SpansAndTypedSpansShareABatch)
{
	auto specs = load_builtin_spec("cuda");
	ASSERT_TRUE(specs);
	const uint32_t memcpy_id = probe_index(*specs, "cudaMemcpy");
	ASSERT_LT(memcpy_id, specs->probes.size());
	Interner names;
	TypedSpans typed{&*specs, &names, nullptr, {}, {}};
	std::vector<Span> spans;
	for (uint64_t i = 0; i < 3; i++) {
		eacgm_span_event e{.start_ns = 100 + i, .dur_ns = 5, .tgid = 1, .tid = 1, .spec_id = memcpy_id};
		e.args[0] = 0x1000, e.args[1] = 0x2000, e.args[2] = 64 << i, e.args[3] = 1;
		TypedSpan t = decode_typed(e, specs->probes[memcpy_id], *specs, nullptr, names);
		if (i == 0)
			spans.push_back(render_span(t, specs->probes[memcpy_id], *specs, names));
		else
			typed.push_back(t);
	}
	const std::string path = dir_ + "/mixed.db";
	{
		auto w = StoreWriter::create(path);
		ASSERT_TRUE(w);
		ASSERT_TRUE(w->add_spans(spans, typed));
		ASSERT_TRUE(w->finish());
	}
	EXPECT_EQ(
		rows(path, "SELECT id, start_ns, bytes, ret_name, args FROM spans ORDER BY id"),
		(std::vector<std::string>{
			R"(1|100|64|cudaSuccess|{"count":64,"dst":"0x1000","kind":"cudaMemcpyHostToDevice","src":"0x2000"})",
			R"(2|101|128|cudaSuccess|{"count":128,"dst":"0x1000","kind":"cudaMemcpyHostToDevice","src":"0x2000"})",
			R"(3|102|256|cudaSuccess|{"count":256,"dst":"0x1000","kind":"cudaMemcpyHostToDevice","src":"0x2000"})"}));
	EXPECT_EQ(rows(path, "SELECT count(*) FROM functions"), std::vector<std::string>{"1"});
	EXPECT_EQ(rows(path, "SELECT count(*) FROM span_blocks"), std::vector<std::string>{"1"});
}

// A user's probe whose argument is named as a key eacgm adds (weight,
// runq_ns): the key eacgm adds wins, on both paths alike, and a weighted
// call's row reads as its Span's.
TEST_F(TypedStore, AnArgumentNamedAsAnAddedKeyGivesWay)
{
	auto specs = parse_spec(R"({"layer": "x", "library": "libx.so*", "probes": [{"function": "f", "args": [
		{"name": "weight", "slot": 0, "type": "u64"}, {"name": "n", "slot": 1, "type": "i32"}]}]})",
				"test", true);
	ASSERT_TRUE(specs) << specs.error().message;
	Interner names;
	TypedSpans typed{&*specs, &names, nullptr, {}, {}};
	std::vector<Span> spans;
	for (uint64_t i = 0; i < 3; i++) {
		eacgm_span_event e{.start_ns = 100 + i, .dur_ns = 5, .tgid = 1, .tid = 1, .spec_id = 0};
		e.args[0] = 7, e.args[1] = uint64_t(-2);
		TypedSpan t = decode_typed(e, specs->probes[0], *specs, nullptr, names);
		t.weight = i == 1 ? 8.0 : 1.0;
		typed.push_back(t);
		spans.push_back(render_span(t, specs->probes[0], *specs, names));
	}
	const std::string a = dir_ + "/named-spans.db", b = dir_ + "/named-typed.db";
	for (const std::string &path : {a, b}) {
		auto w = StoreWriter::create(path);
		ASSERT_TRUE(w);
		ASSERT_TRUE(path == a ? w->add_spans(spans) : w->add_spans({}, typed));
		ASSERT_TRUE(w->finish());
	}
	const char *sql = "SELECT id, args FROM spans ORDER BY id";
	EXPECT_EQ(rows(b, sql),
		  (std::vector<std::string>{R"(1|{"n":-2,"weight":7})", R"(2|{"n":-2,"weight":8.0})",
					    R"(3|{"n":-2,"weight":7})"}));
	EXPECT_EQ(rows(a, sql), rows(b, sql));
}

// Retention collects the strings no block uses any more; the enum texts and
// the stack the typed path had looked up are written again, not named by
// ids that are gone.
TEST_F(TypedStore, LookupsDoNotOutliveTheRowsRetentionCollects)
{
	auto specs = load_builtin_spec("cuda");
	ASSERT_TRUE(specs);
	const uint32_t memcpy_id = probe_index(*specs, "cudaMemcpy");
	ASSERT_LT(memcpy_id, specs->probes.size());
	Interner names;
	auto batch = [&](uint64_t start, int64_t kind) {
		TypedSpans typed{&*specs, &names, nullptr, {}, {}};
		eacgm_span_event e{.start_ns = start, .dur_ns = 5, .tgid = 1, .tid = 1, .spec_id = memcpy_id};
		e.args[2] = 16, e.args[3] = uint64_t(kind);
		typed.push_back(decode_typed(e, specs->probes[memcpy_id], *specs, nullptr, names),
				PyStack{"a.py:f", std::to_string(start)});
		return typed;
	};
	const std::string path = dir_ + "/kept.db";
	auto w = StoreWriter::create(path, true);
	ASSERT_TRUE(w);
	const uint64_t s = 1'000'000'000;
	ASSERT_TRUE(w->add_spans({}, batch(1 * s, 2)));
	ASSERT_TRUE(w->add_spans({}, batch(50 * s, 3)));
	ASSERT_TRUE(w->commit());
	auto gone = w->enforce({.max_bytes = 0, .max_age_ns = 20 * s}, 60 * s);
	ASSERT_TRUE(gone) << gone.error().message;
	ASSERT_EQ(*gone, 1u);
	ASSERT_TRUE(w->add_spans({}, batch(55 * s, 2))); // the first batch's enum text again
	ASSERT_TRUE(w->add_spans({}, batch(56 * s, 3))); // the second's, still there
	ASSERT_TRUE(w->finish());
	EXPECT_EQ(rows(path, "SELECT start_ns / 1000000000, json_extract(args, '$.kind'), py_stack FROM spans"),
		  (std::vector<std::string>{R"(50|cudaMemcpyDeviceToDevice|["a.py:f","50000000000"])",
					    R"(55|cudaMemcpyDeviceToHost|["a.py:f","55000000000"])",
					    R"(56|cudaMemcpyDeviceToDevice|["a.py:f","56000000000"])"}));
}

// A probe whose arguments are all looked up (here two enums, as a torch
// operator's tensors) keeps a row per distinct argument words and copies it
// for the calls that follow. Past the cache's bound (65,536 looked-up
// values; one-byte enums, so that their texts stay few) the values are
// cleared and so are those rows: a call with the first words is made again,
// and its block lists the strings it uses, not a row that names freed
// values. Every row reads as its Span's.
TEST_F(TypedStore, RowsKeptByTheirWordsDieWithTheValuesTheyName)
{
	auto specs = parse_spec(R"({"layer": "x", "library": "libx.so*",
		"enums": {"e": {"1": "one", "2": "two"}},
		"probes": [{"function": "op", "returns": "void", "args": [
			{"name": "a", "slot": 0, "type": "enum", "enum": "e", "size": 1},
			{"name": "b", "slot": 1, "type": "enum", "enum": "e", "size": 1}]}]})",
				"test", true);
	ASSERT_TRUE(specs) << specs.error().message;
	Interner names;
	std::vector<TypedSpans> typed(3, TypedSpans{&*specs, &names, nullptr, {}, {}});
	std::vector<std::vector<Span>> spans(3);
	size_t made = 0;
	auto call = [&](size_t batch, uint64_t a, uint64_t b) {
		eacgm_span_event e{.start_ns = 1000 + made++, .dur_ns = 5, .tgid = 1, .tid = 1, .spec_id = 0};
		e.args[0] = a, e.args[1] = b;
		TypedSpan t = decode_typed(e, specs->probes[0], *specs, nullptr, names);
		typed[batch].push_back(t);
		spans[batch].push_back(render_span(t, specs->probes[0], *specs, names));
	};
	call(0, 1, 2), call(0, 1, 2), call(0, 2, 1);
	const uint64_t distinct = 33'000; // 66,000 values, 256 texts
	for (uint64_t i = 0; i < distinct; i++)
		call(1, (i + 1) << 8 | 3, (i + 1) << 8 | 4);
	call(2, 1, 2), call(2, 2, 1), call(2, 1, 2);
	const std::string a = dir_ + "/memo-spans.db", b = dir_ + "/memo-typed.db";
	for (const std::string &path : {a, b}) {
		auto w = StoreWriter::create(path);
		ASSERT_TRUE(w);
		for (size_t batch = 0; batch < 3; batch++)
			ASSERT_TRUE(path == a ? w->add_spans(spans[batch]) : w->add_spans({}, typed[batch]));
		ASSERT_TRUE(w->finish());
	}
	const char *sql = "SELECT id, args FROM spans ORDER BY id";
	auto want = rows(a, sql), got = rows(b, sql);
	ASSERT_EQ(got.size(), distinct + 6);
	ASSERT_EQ(want.size(), got.size());
	for (size_t i = 0; i < got.size(); i++)
		ASSERT_EQ(got[i], want[i]) << "row " << i;
	EXPECT_EQ(got[1], R"(2|{"a":"one","b":"two"})");
	EXPECT_EQ(got[3], R"x(4|{"a":"e(3)","b":"e(4)"})x");
	EXPECT_EQ(got[distinct + 3], std::to_string(distinct + 4) + R"(|{"a":"one","b":"two"})");
	EXPECT_EQ(got[distinct + 4], std::to_string(distinct + 5) + R"(|{"a":"two","b":"one"})");
	// The last block lists the strings its rows use (retention keeps
	// those it lists).
	const char *listed = "SELECT s.text FROM span_blocks k, json_each(k.strings) j JOIN strings s ON s.id = j.value"
			     " WHERE k.rowid = (SELECT max(rowid) FROM span_blocks) ORDER BY s.text";
	EXPECT_EQ(rows(b, listed), (std::vector<std::string>{R"("one")", R"("two")"}));
	EXPECT_EQ(rows(a, listed), rows(b, listed));
}
