// SPDX-License-Identifier: Apache-2.0
// read_span_blocks (block_reader.h).
#include "store/block_reader.h"
#include "common/text.h"
#include "store/sqlite_error.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

namespace eacgm {

namespace {

using nlohmann::json;

// A statement that returns rows, finalized with it.
struct Query {
	sqlite3_stmt *st = nullptr;
	Query(sqlite3 *db, const char *sql) { sqlite3_prepare_v2(db, sql, -1, &st, nullptr); }
	~Query() { sqlite3_finalize(st); }
	std::string text(int i) const
	{
		const char *p = reinterpret_cast<const char *>(sqlite3_column_text(st, i));
		return p ? std::string(p, sqlite3_column_bytes(st, i)) : std::string();
	}
};

// The dictionaries, read whole: a recording holds a few hundred functions,
// strings and stacks however many spans stand on them.
struct Dictionaries {
	std::unordered_map<uint64_t, SpanFunction> functions;
	std::unordered_map<uint64_t, std::string> strings; // as stored (a ret name, or a value's JSON)
	std::unordered_map<uint64_t, json> values;         // strings parsed as JSON, when first needed
	std::unordered_map<uint64_t, PyStack> stacks;

	Result<void> load(sqlite3 *db)
	{
		Query f(db, "SELECT id, layer, name, args FROM functions");
		while (sqlite3_step(f.st) == SQLITE_ROW) {
			auto fn = parse_function(f.text(1), f.text(2), f.text(3));
			if (!fn)
				return fn.error();
			functions.emplace(sqlite3_column_int64(f.st, 0), std::move(*fn));
		}
		Query s(db, "SELECT id, text FROM strings");
		while (sqlite3_step(s.st) == SQLITE_ROW)
			strings.emplace(sqlite3_column_int64(s.st, 0), s.text(1));
		Query k(db, "SELECT id, frames FROM stacks");
		while (sqlite3_step(k.st) == SQLITE_ROW) {
			auto frames = json::parse(k.text(1), nullptr, false);
			if (!frames.is_array() ||
			    !std::all_of(frames.begin(), frames.end(), [](auto &x) { return x.is_string(); }))
				return make_error(ErrorKind::BadInput,
						  "span py_stack is not a JSON array of strings: " + k.text(1));
			stacks.emplace(sqlite3_column_int64(k.st, 0), PyStack(frames.get<std::vector<std::string>>()));
		}
		if (!f.st || !s.st || !k.st)
			return with_context(sqlite_error(db), "cannot read the span dictionaries: ");
		return {};
	}
	const json *value(uint64_t id)
	{
		if (auto it = values.find(id); it != values.end())
			return &it->second;
		auto s = strings.find(id);
		if (s == strings.end())
			return nullptr;
		auto v = json::parse(s->second, nullptr, false);
		return v.is_discarded() ? nullptr : &values.emplace(id, std::move(v)).first->second;
	}
};

// An integer as parsing its text would make it: unsigned when not negative.
json integer(int64_t v) { return v < 0 ? json(v) : json(static_cast<uint64_t>(v)); }

Result<json> args_of(const SpanFunction &f, const Columns &cols, size_t row, Dictionaries &d)
{
	json args = json::object();
	size_t slot = kColSlot0;
	auto at = [&](size_t s) { return s < cols.size() ? cols[s][row] : 0; };
	for (const ArgDef &a : f.args) {
		const uint64_t v = at(slot);
		switch (a.kind) {
		case ArgKind::Int: args[a.key] = integer(static_cast<int64_t>(v)); break;
		case ArgKind::Uint: args[a.key] = v; break;
		case ArgKind::Bool: args[a.key] = v != 0; break;
		case ArgKind::Ptr: args[a.key] = hex(v); break;
		case ArgKind::Ints: {
			json arr = json::array();
			for (size_t k = 0; k < a.n; k++)
				arr.push_back(integer(static_cast<int64_t>(at(slot + k))));
			args[a.key] = std::move(arr);
			break;
		}
		case ArgKind::Text: {
			const json *j = d.value(v);
			if (!j)
				return make_error(ErrorKind::BadInput,
						  "a span names a string the recording does not hold");
			args[a.key] = *j;
		}
		}
		slot += a.n;
	}
	return args;
}

Result<Span> span_of(const Columns &cols, size_t row, const SpanFunction &f, Dictionaries &d)
{
	auto at = [&](SpanColumn c) { return cols[c][row]; };
	auto args = args_of(f, cols, row, d);
	if (!args)
		return args.error();
	Span s{.start_ns = at(kColStart),
	       .dur_ns = at(kColDur),
	       .pid = static_cast<uint32_t>(at(kColPid)),
	       .tid = static_cast<uint32_t>(at(kColTid)),
	       .depth = static_cast<uint32_t>(at(kColDepth)),
	       .layer = f.layer,
	       .name = f.name,
	       .ret = static_cast<int64_t>(at(kColRet)),
	       .bytes = at(kColBytes),
	       .args = std::move(*args)};
	if (uint64_t r = at(kColRetName)) {
		auto it = d.strings.find(r);
		if (it == d.strings.end())
			return make_error(ErrorKind::BadInput,
					  "a span names a return name the recording does not hold");
		s.ret_name = it->second;
	}
	if (uint64_t k = at(kColStack)) {
		auto it = d.stacks.find(k);
		if (it == d.stacks.end())
			return make_error(ErrorKind::BadInput, "a span names a stack the recording does not hold");
		s.py_stack = it->second;
	}
	return s;
}

} // namespace

Result<void> read_span_blocks(sqlite3 *db, const std::function<bool(const SpanFunction &)> &keep,
			      const std::function<void(Span &&)> &take, const RowKeep &rows,
			      const BlockKeep &keep_block)
{
	Dictionaries d;
	if (auto r = d.load(db); !r)
		return r;
	Query blocks(db, "SELECT data, min_start, max_start FROM span_blocks ORDER BY id");
	if (!blocks.st)
		return with_context(sqlite_error(db), "cannot read span_blocks: ");
	BlockDecoder dec;
	Columns cols;
	int rc;
	while ((rc = sqlite3_step(blocks.st)) == SQLITE_ROW) {
		if (keep_block &&
		    !keep_block(uint64_t(sqlite3_column_int64(blocks.st, 1)),
				uint64_t(sqlite3_column_int64(blocks.st, 2))))
			continue;
		std::string_view blob(static_cast<const char *>(sqlite3_column_blob(blocks.st, 0)),
				      sqlite3_column_bytes(blocks.st, 0));
		if (auto r = dec.decode(blob, cols); !r)
			return r;
		if (cols.size() < kColSlot0)
			return make_error(ErrorKind::BadInput,
					  "not a valid span block: " + std::to_string(cols.size()) + " columns");
		for (size_t row = 0; row < cols[kColId].size(); row++) {
			if (rows &&
			    !rows(static_cast<uint32_t>(cols[kColPid][row]), static_cast<uint32_t>(cols[kColTid][row]),
				  cols[kColStart][row]))
				continue;
			auto f = d.functions.find(cols[kColFn][row]);
			if (f == d.functions.end())
				return make_error(ErrorKind::BadInput,
						  "a span names a function the recording does not hold");
			if (keep && !keep(f->second))
				continue;
			auto s = span_of(cols, row, f->second, d);
			if (!s)
				return s.error();
			take(std::move(*s));
		}
	}
	if (rc != SQLITE_DONE)
		return with_context(sqlite_error(db), "cannot read span_blocks: ");
	return {};
}

namespace {

// A part of one thread's spans: those starting in [from, to].
struct Slice {
	uint32_t pid, tid;
	uint64_t from, to;
	uint64_t n; // about how many
};

// Each thread's spans cut into slices of at most about `limit`, by start
// time (cut where a sample of every kSample-th start falls), in the order of
// the trace. Reads the blocks once, making no span.
Result<std::vector<Slice>> slices_of(sqlite3 *db, size_t limit)
{
	constexpr uint64_t kSample = 64;
	struct Seen {
		uint64_t n = 0;
		std::vector<uint64_t> starts; // every kSample-th
	};
	std::map<std::pair<uint32_t, uint32_t>, Seen> threads;
	auto r = read_span_blocks(
		db, nullptr, [](Span &&) {},
		[&](uint32_t pid, uint32_t tid, uint64_t start) {
			Seen &t = threads[{pid, tid}];
			if (t.n++ % kSample == 0)
				t.starts.push_back(start);
			return false;
		});
	if (!r)
		return r.error();
	std::vector<Slice> out;
	const size_t per_slice = std::max<size_t>(1, limit / kSample); // samples a slice holds
	for (auto &[key, t] : threads) {
		std::sort(t.starts.begin(), t.starts.end());
		uint64_t from = 0;
		size_t begin = 0; // the sample the slice begins at
		for (size_t at = per_slice; at < t.starts.size(); at += per_slice) {
			// A cut between two starts; equal starts stay on one side.
			if (t.starts[at] == from)
				continue;
			out.push_back({key.first, key.second, from, t.starts[at] - 1, (at - begin) * kSample});
			from = t.starts[at], begin = at;
		}
		out.push_back(
			{key.first, key.second, from, UINT64_MAX, t.n - std::min<uint64_t>(t.n, begin * kSample)});
	}
	return out;
}

} // namespace

Result<void> read_spans_by_thread(sqlite3 *db, const std::function<void(Span &&)> &take, size_t limit)
{
	std::vector<Span> spans;
	auto visit_sorted = [&] {
		std::stable_sort(spans.begin(), spans.end(), nests_before); // read in id order: ties by id
		for (Span &s : spans)
			take(std::move(s));
		spans.clear();
	};
	Query total(db, "SELECT coalesce(sum(n), 0) FROM span_blocks");
	if (!total.st || sqlite3_step(total.st) != SQLITE_ROW)
		return with_context(sqlite_error(db), "cannot read span_blocks: ");
	if (uint64_t(sqlite3_column_int64(total.st, 0)) <= limit) { // most recordings: one pass
		if (auto r = read_span_blocks(db, nullptr, [&](Span &&s) { spans.push_back(std::move(s)); }); !r)
			return r;
		visit_sorted();
		return {};
	}
	auto slices = slices_of(db, limit);
	if (!slices)
		return slices.error();
	// Passes over the blocks, each taking consecutive slices of about
	// `limit` spans in all.
	for (size_t at = 0; at < slices->size();) {
		std::map<std::pair<uint32_t, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> wanted;
		std::vector<std::pair<uint64_t, uint64_t>> ranges; // every wanted start range, for the blocks
		uint64_t n = 0;
		for (; at < slices->size() && (wanted.empty() || n + (*slices)[at].n <= limit); at++) {
			const Slice &s = (*slices)[at];
			wanted[{s.pid, s.tid}].push_back({s.from, s.to});
			ranges.push_back({s.from, s.to});
			n += s.n;
		}
		auto r = read_span_blocks(
			db, nullptr, [&](Span &&s) { spans.push_back(std::move(s)); },
			[&](uint32_t pid, uint32_t tid, uint64_t start) {
				auto it = wanted.find({pid, tid});
				return it != wanted.end() &&
					std::any_of(it->second.begin(), it->second.end(), [&](const auto &range) {
						return range.first <= start && start <= range.second;
					});
			},
			[&](uint64_t min_start, uint64_t max_start) {
				return std::any_of(ranges.begin(), ranges.end(), [&](const auto &range) {
					return range.first <= max_start && min_start <= range.second;
				});
			});
		if (!r)
			return r;
		visit_sorted();
	}
	return {};
}

} // namespace eacgm
