// SPDX-License-Identifier: Apache-2.0
// The store's typed rows: a TypedSpan (pipeline/span.h) kept exactly as the
// Span render_span makes of it would be (store.cpp's span_row: the same
// functions row, slots and strings), without making that Span. A Span's args
// are a JSON object walked key by key per span; a typed span's shape is its
// probe's, worked out once: its arguments in key order, each kept by its
// type. What varies with the value is looked up once per value: whether a
// u64 passes int64's range (Uint or Int), and the kind and text of an enum, a
// tensor or a symbol (render_arg's JSON, taken apart by classify_arg, the
// very function span_row uses). The unit test test_typed_store holds both
// paths to the same rows over every argument type.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <map>
#include <unordered_map>

#include <sqlite3.h>

#include "pipeline/decode.h"
#include "probe/spec.h"
#include "store/store.h"

namespace eacgm {

namespace {

// A row's shape: 7 bits per args key of its probe (code_of), up to
// EACGM_MAX_ARGS arguments and the two keys no argument gives.
using Signature = unsigned __int128;
static_assert((EACGM_MAX_ARGS + 2) * 7 <= sizeof(Signature) * 8, "a shape's signature loses keys");

// A kept value's kind and width, 7 bits of a shape's signature; 0: a key
// the span does not have (runq_ns where the thread never waited).
Signature code_of(ArgKind kind, uint8_t n)
{
	Signature k = 0;
	switch (kind) {
	case ArgKind::Int: k = 1; break;
	case ArgKind::Uint: k = 2; break;
	case ArgKind::Bool: k = 3; break;
	case ArgKind::Ptr: k = 4; break;
	case ArgKind::Text: k = 5; break;
	case ArgKind::Ints: k = 6; break;
	}
	return k | Signature(n) << 3;
}

// The keys no spec argument gives (common/model.h), as an Entry's arg.
constexpr int kRunqEntry = -1, kWeightEntry = -2;

// An args key of a probe, in the order of the keys in the args text.
struct Entry {
	std::string key;
	int arg = kRunqEntry;        // its index in the spec's args, or kRunqEntry, kWeightEntry
	size_t slot = 0;             // its first slot in the typed span
	ArgType type = ArgType::U64; // the argument's, here: no ArgSpec is read per call
};

// A value of an argument whose kept form the store looks up (an enum, a
// tensor, a symbol): by probe, argument and its slot words.
struct ValueKey {
	uint32_t spec;
	uint32_t arg;
	uint64_t a, b;
	bool operator==(const ValueKey &) const = default;
};
struct ValueHash {
	size_t operator()(const ValueKey &k) const
	{
		uint64_t h = (uint64_t(k.spec) << 32 | k.arg) * 0x9e3779b97f4a7c15ull;
		h ^= k.a + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
		h ^= k.b + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
		return h;
	}
};
struct Kept {
	ArgKind kind = ArgKind::Text;
	uint8_t n = 1;
	std::array<uint64_t, 8> slots{}; // a string's: its strings.id
	uint64_t block = 0;              // the last block that referred to it
};

// A typed row as it is made: its slots, and the kind and width of each
// args key of its probe's plan (n 0: a key the span does not have), and the
// looked-up values it holds as strings (to be listed in its block).
struct Row {
	// The most slots a row can take: a tensor takes two of the probe's
	// slots and at most 8 here (classify_arg's longest array), a dim3 two
	// and 3, any other argument one and one; and runq_ns and the weight.
	// A looked-up value is copied whole (8 slots) past the last: room kept.
	static_assert(EACGM_MAX_ARGS / 2 * 8 + 2 + 8 <= kMaxSlots, "a typed row's slots overflow a block's");
	uint64_t slots[kMaxSlots];
	size_t n = 0;
	struct Key {
		ArgKind kind;
		uint8_t n;
	} keys[EACGM_MAX_ARGS + 2];
	size_t k = 0;
	Signature sig = 0;
	Kept *strings[EACGM_MAX_ARGS + 2];
	size_t n_strings = 0;

	void put(ArgKind kind, uint64_t v) { slots[n++] = v, keys[k] = {kind, 1}; }
	void put(Kept &kept)
	{
		std::memcpy(slots + n, kept.slots.data(), sizeof kept.slots); // a fixed copy: no call
		n += kept.n;
		keys[k] = {kept.kind, kept.n};
		if (kept.kind == ArgKind::Text)
			strings[n_strings++] = &kept;
	}
	// The key done: its code in the signature.
	void next()
	{
		sig = sig << 7 | (keys[k].n ? code_of(keys[k].kind, keys[k].n) : 0);
		k++;
	}
};

// A row made once for a probe whose arguments are all looked up (a torch
// operator's tensors), by its argument words: the calls that follow with
// the same words copy it. Made under one generation of the looked-up
// values (their Kept pointers die with them).
struct Memo {
	static constexpr size_t kSlots = 16; // a wider row is not kept
	std::array<uint64_t, EACGM_MAX_ARGS> words{};
	uint64_t generation = 0; // 0: empty
	int64_t fn = 0;
	uint8_t n = 0, n_strings = 0;
	uint64_t slots[kSlots];
	Kept *strings[EACGM_MAX_ARGS];
};
constexpr size_t kMemosPerProbe = 64;

size_t memo_index(const std::array<uint64_t, EACGM_MAX_ARGS> &w)
{
	uint64_t h = 0;
	for (uint64_t x : w)
		h = (h ^ x) * 0x9e3779b97f4a7c15ull;
	return size_t(h >> 58); // 64 memos: the top bits mix best
}
static_assert(kMemosPerProbe == 64, "memo_index gives 6 bits");

} // namespace

struct StoreWriter::TypedCache {
	// What it was filled under: other probes or names, or ids forgotten by
	// the dictionaries, and it starts over.
	const SpecSet *specs = nullptr;
	const Interner *names = nullptr;
	TensorFormatter tensors = nullptr;
	uint64_t epochs[3] = {};

	struct Plan {
		bool built = false;
		bool typed = false;    // false: its rows go through render_span (an args key twice, or one eacgm adds)
		bool enum_ret = false; // its return has a name (returns_enum)
		std::vector<Entry> entries;
		std::vector<std::pair<Signature, int64_t>> shapes; // -> functions.id
		struct RetName {
			int64_t id = 0; // strings.id (0: none)
			uint64_t block = 0;
		};
		std::unordered_map<int64_t, RetName> ret_names; // by return
		// Its arguments are all looked up (enums, tensors, symbols): its
		// rows are kept by their words (Memo), kMemosPerProbe of them.
		bool memo = false;
		std::vector<Memo> memos;
	};
	std::vector<Plan> plans; // by spec_id
	std::unordered_map<ValueKey, Kept, ValueHash> values;
	// Weights' texts (strings.id) by their bits: a throttled probe's calls
	// share one until the budget moves.
	std::unordered_map<uint64_t, Kept> weights;
	static constexpr size_t kMaxValues = 1 << 16;
	// In front of `values`, by hash: a tensor's shape or a kernel's name
	// repeats call after call. Its pointers are to `values`' nodes, which
	// stay put until cleared.
	struct Front {
		ValueKey key{};
		Kept *kept = nullptr;
	};
	std::array<Front, 1024> front{};
	Kept *find(const ValueKey &k, size_t h)
	{
		Front &f = front[h % front.size()];
		if (f.kept && f.key == k)
			return f.kept;
		auto it = values.find(k);
		if (it == values.end())
			return nullptr;
		f = {k, &it->second};
		return &it->second;
	}
	// Counts the lives of `values`: a memo of another is stale.
	uint64_t generation = 1;
	void clear_values()
	{
		generation++;
		values.clear();
		front.fill({});
		weights.clear();
	}
	// Stacks by their body (PyStack shares one among its copies): the copy
	// kept here holds it, so that no other stack can take its address.
	struct Stack {
		PyStack stack;
		int64_t id = 0;
		uint64_t block = 0;
	};
	std::unordered_map<const void *, Stack> stacks;
	Stack *last = nullptr; // the last one used: calls from one line follow each other
	// Which block the rows are for: a dictionary row goes into a block's
	// list of rows it refers to once, not once per span.
	uint64_t block = 0;

	// A string row named in the block being filled: listed in it once.
	void refer(uint64_t &last_block, int64_t id, BlockRows &b)
	{
		if (std::exchange(last_block, block) != block)
			b.strings.push_back(id);
	}
	// The looked-up values a row holds as strings, listed in its block.
	void refer(Kept *const *strings, size_t n, BlockRows &b)
	{
		for (size_t i = 0; i < n; i++)
			refer(strings[i]->block, int64_t(strings[i]->slots[0]), b);
	}
	// Each returns null or 0 where a dictionary row could not be written.
	Kept *value(StoreWriter &w, const TypedSpans &ts, uint32_t spec_id, const Entry &e, uint64_t v, uint64_t next);
	Kept *weight(StoreWriter &w, double weight);
	Result<void> fill(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t, const Plan &p, Row &r);
	// The function row of an all-looked-up probe's call (0: a dictionary
	// row could not be written): `kept` points at its memo where one was
	// kept for its words; else its row is made in r, and kept if it fits.
	int64_t memo_row(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t, const ProbeSpec &spec, Plan &p,
			 Row &r, const Memo *&kept);
	int64_t function_of(StoreWriter &w, const ProbeSpec &spec, Plan &p, const Row &r);
	bool ret_name(StoreWriter &w, const ProbeSpec &spec, Plan &p, int64_t ret, BlockRows &b, int64_t &id);
	int64_t stack_row(StoreWriter &w, const PyStack &stack, BlockRows &b);
	// The function row and slots of a call's row, made by fill.
	int64_t made_row(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t, const ProbeSpec &spec, Plan &p,
			 Row &r);

	void reset()
	{
		plans.clear();
		clear_values();
		stacks.clear();
		last = nullptr;
	}
	Plan &plan(uint32_t spec_id)
	{
		return spec_id < plans.size() && plans[spec_id].built ? plans[spec_id] : build(spec_id);
	}
	Plan &build(uint32_t spec_id);
};

void StoreWriter::TypedCacheDeleter::operator()(TypedCache *c) const { delete c; }

StoreWriter::TypedCache::Plan &StoreWriter::TypedCache::build(uint32_t spec_id)
{
	if (plans.size() <= spec_id)
		plans.resize(spec_id + 1);
	Plan &p = plans[spec_id];
	p.built = true;
	const ProbeSpec &spec = specs->probes[spec_id];
	// The args object keeps the last argument of a name, in key order.
	std::map<std::string, Entry> by_key;
	size_t slot = 0;
	bool twice = false;
	for (size_t i = 0; i < spec.args.size(); i++) {
		const ArgSpec &a = spec.args[i];
		twice |= by_key.count(a.name) > 0 || a.name == kRunqArg || a.name == kWeightArg;
		by_key[a.name] = {a.name, int(i), slot, a.type};
		slot += arg_width(a);
	}
	by_key[kRunqArg] = {kRunqArg, kRunqEntry, 0};
	by_key[kWeightArg] = {kWeightArg, kWeightEntry, 0};
	p.typed = !twice;
	p.enum_ret = returns_enum(spec.returns);
	p.memo = !spec.args.empty() && std::all_of(spec.args.begin(), spec.args.end(), [](const ArgSpec &a) {
		return a.type == ArgType::Enum || a.type == ArgType::Tensor || a.type == ArgType::Symbol;
	});
	for (auto &[k, e] : by_key)
		p.entries.push_back(std::move(e));
	return p;
}

// An enum's, a tensor's or a symbol's kept form, made the first time by
// render_arg and classify_arg as span_row would.
Kept *StoreWriter::TypedCache::value(StoreWriter &w, const TypedSpans &ts, uint32_t spec_id, const Entry &e, uint64_t v,
				     uint64_t next)
{
	const ValueKey vk{spec_id, uint32_t(e.arg), v, e.type == ArgType::Tensor ? next : 0};
	const size_t h = ValueHash{}(vk);
	if (Kept *kv = find(vk, h))
		return kv;
	static thread_local std::vector<uint64_t> got;
	got.clear();
	const ArgSpec &a = specs->probes[spec_id].args[e.arg];
	const nlohmann::json j = render_arg(a, v, next, *ts.specs, *ts.names, ts.tensors);
	ArgDef d = classify_arg(e.key, j, got);
	Kept kept{d.kind, d.n, {}};
	if (d.kind == ArgKind::Text) {
		int64_t id = w.value_string(j);
		if (!id)
			return nullptr;
		got.assign(1, uint64_t(id));
	}
	std::copy(got.begin(), got.end(), kept.slots.begin());
	// Past kMaxValues they are cleared, but only between rows (typed_row):
	// a row being made holds pointers to those it looked up.
	return &values.emplace(vk, kept).first->second;
}

// A weight's text: a throttled probe's calls share one until the budget
// moves.
Kept *StoreWriter::TypedCache::weight(StoreWriter &w, double weight)
{
	if (weights.size() >= kMaxValues)
		weights.clear();
	auto [it, fresh] = weights.try_emplace(std::bit_cast<uint64_t>(weight));
	if (fresh && !(it->second.slots[0] = uint64_t(w.value_string(nlohmann::json(weight))))) {
		weights.erase(it);
		return nullptr;
	}
	return &it->second;
}

// The row's slots, key by key of the plan.
Result<void> StoreWriter::TypedCache::fill(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t, const Plan &p,
					   Row &r)
{
	for (const Entry &e : p.entries) {
		r.keys[r.k] = {ArgKind::Text, 0}; // n 0: a key the span does not have
		if (e.arg == kRunqEntry) {        // where the thread waited
			if (t.runq_ns)
				r.put(t.runq_ns > uint64_t(INT64_MAX) ? ArgKind::Uint : ArgKind::Int, t.runq_ns);
		} else if (e.arg == kWeightEntry) { // where it stands for others
			if (t.weight != 1.0) {
				Kept *kv = weight(w, t.weight);
				if (!kv)
					return w.db_failure();
				r.put(*kv);
			}
		} else {
			const uint64_t v = e.slot < EACGM_MAX_ARGS ? t.args[e.slot] : 0;
			const uint64_t next = e.slot + 1 < EACGM_MAX_ARGS ? t.args[e.slot + 1] : 0;
			switch (e.type) {
			case ArgType::U64:
			case ArgType::Bytes: r.put(v > uint64_t(INT64_MAX) ? ArgKind::Uint : ArgKind::Int, v); break;
			case ArgType::I64: r.put(ArgKind::Int, v); break;
			case ArgType::U32: r.put(ArgKind::Int, uint32_t(v)); break;
			case ArgType::I32: r.put(ArgKind::Int, uint64_t(int64_t(int32_t(v)))); break;
			case ArgType::Ptr: r.put(ArgKind::Ptr, v); break;
			case ArgType::Dim3:
				r.slots[r.n++] = uint32_t(v), r.slots[r.n++] = v >> 32, r.slots[r.n++] = uint32_t(next);
				r.keys[r.k] = {ArgKind::Ints, 3};
				break;
			case ArgType::Enum:
			case ArgType::Tensor:
			case ArgType::Symbol: {
				Kept *kv = value(w, ts, t.spec_id, e, v, next);
				if (!kv)
					return w.db_failure();
				r.put(*kv);
				break;
			}
			}
		}
		r.next();
	}
	return {};
}

// The function's row for this shape: found among the probe's few.
int64_t StoreWriter::TypedCache::function_of(StoreWriter &w, const ProbeSpec &spec, Plan &p, const Row &r)
{
	for (auto &[sig, id] : p.shapes)
		if (sig == r.sig)
			return id;
	std::vector<ArgDef> defs;
	for (size_t e = 0; e < p.entries.size(); e++)
		if (r.keys[e].n)
			defs.push_back({p.entries[e].key, r.keys[e].kind, r.keys[e].n});
	int64_t fn = w.function_row(spec.layer, spec.function, defs);
	if (fn)
		p.shapes.emplace_back(r.sig, fn);
	return fn;
}

// The strings row of a return's name (0: it has none); false: it could
// not be written.
bool StoreWriter::TypedCache::ret_name(StoreWriter &w, const ProbeSpec &spec, Plan &p, int64_t ret, BlockRows &b,
				       int64_t &id)
{
	id = 0;
	if (!p.enum_ret)
		return true;
	auto it = p.ret_names.find(ret);
	if (it == p.ret_names.end()) {
		const std::string text = ret_text(spec, *specs, ret);
		int64_t made = text.empty() ? 0 : w.intern(w.strings_, kInsertString, text);
		if (!text.empty() && !made)
			return false;
		it = p.ret_names.emplace(ret, Plan::RetName{made, 0}).first;
	}
	if ((id = it->second.id))
		refer(it->second.block, id, b);
	return true;
}

// The stacks row of a span's stack (stacks are looked up by their shared
// body: the calls of one line follow each other).
int64_t StoreWriter::TypedCache::stack_row(StoreWriter &w, const PyStack &stack, BlockRows &b)
{
	if (stacks.size() >= kMaxValues)
		stacks.clear(), last = nullptr;
	const void *body = stack.identity();
	if (!last || last->stack.identity() != body) {
		auto [it, fresh] = stacks.try_emplace(body);
		if (fresh) {
			if (!(it->second.id = w.stack_id(stack))) {
				stacks.erase(it);
				return 0;
			}
			it->second.stack = stack;
		}
		last = &it->second;
	}
	if (std::exchange(last->block, block) != block)
		b.stacks.push_back(last->id);
	return last->id;
}

// A row's function and slots, made key by key (fill); 0 where a dictionary
// row could not be written.
int64_t StoreWriter::TypedCache::made_row(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t,
					  const ProbeSpec &spec, Plan &p, Row &r)
{
	if (auto filled = fill(w, ts, t, p, r); !filled)
		return 0;
	return function_of(w, spec, p, r);
}

int64_t StoreWriter::TypedCache::memo_row(StoreWriter &w, const TypedSpans &ts, const TypedSpan &t,
					  const ProbeSpec &spec, Plan &p, Row &r, const Memo *&kept)
{
	if (p.memos.empty())
		p.memos.resize(kMemosPerProbe);
	Memo &m = p.memos[memo_index(t.args)];
	if (m.generation == generation && m.words == t.args) {
		kept = &m;
		return m.fn;
	}
	kept = nullptr;
	const int64_t fn = made_row(w, ts, t, spec, p, r);
	if (fn && r.n <= Memo::kSlots && r.n_strings <= std::size(m.strings)) { // else made each call
		m.generation = generation;
		m.words = t.args, m.fn = fn, m.n = uint8_t(r.n), m.n_strings = uint8_t(r.n_strings);
		std::copy_n(r.slots, r.n, m.slots);
		std::copy_n(r.strings, r.n_strings, m.strings);
	}
	return fn;
}

Result<void> StoreWriter::typed_row(const TypedSpans &ts, size_t i, BlockRows &b)
{
	if (!typed_)
		typed_.reset(new TypedCache);
	TypedCache &c = *typed_;
	const uint64_t epochs[3] = {strings_.epoch(), functions_.epoch(), stacks_.epoch()};
	if (c.specs != ts.specs || c.names != ts.names || c.tensors != ts.tensors ||
	    !std::equal(epochs, epochs + 3, c.epochs)) {
		c.reset();
		c.specs = ts.specs, c.names = ts.names, c.tensors = ts.tensors;
		std::copy(epochs, epochs + 3, c.epochs);
	}
	c.block = b.serial;
	if (c.values.size() >= TypedCache::kMaxValues)
		c.clear_values(); // between rows: a row holds pointers to the values it looked up
	const TypedSpan &t = ts.spans[i];
	static const PyStack kNone;
	const PyStack &stack = i < ts.stacks.size() ? ts.stacks[i] : kNone;
	if (!ts.specs || !ts.names || t.spec_id >= ts.specs->probes.size())
		return make_error(ErrorKind::BadInput,
				  "a typed span of probe " + std::to_string(t.spec_id) + " outside its probe set");
	const ProbeSpec &spec = ts.specs->probes[t.spec_id];
	TypedCache::Plan &p = c.plan(t.spec_id);
	// A call left without a return (an exception) is rare: its return's
	// name is its own, made as a Span's.
	if (!p.typed || t.left) {
		Span s = render_span(t, spec, *ts.specs, *ts.names, ts.tensors);
		s.py_stack = stack;
		return span_row(s, b);
	}
	// The dictionary rows in span_row's order (function, strings of the
	// arguments, the return's name, the stack): the same ids either way.
	// With no key but the looked-up arguments', the row is its words'.
	Row r;
	const Memo *m = nullptr;
	const int64_t fn = p.memo && !t.runq_ns && t.weight == 1.0 ? c.memo_row(*this, ts, t, spec, p, r, m)
								   : c.made_row(*this, ts, t, spec, p, r);
	if (!fn)
		return db_failure();
	const uint64_t *slots = m ? m->slots : r.slots;
	const size_t n = m ? m->n : r.n;
	if (m)
		c.refer(m->strings, m->n_strings, b);
	else
		c.refer(r.strings, r.n_strings, b);
	int64_t ret_name = 0, stack_row = 0;
	if (!c.ret_name(*this, spec, p, t.ret, b, ret_name) ||
	    (!stack.empty() && !(stack_row = c.stack_row(*this, stack, b))))
		return db_failure();
	b.add({t.pid, t.tid, uint64_t(fn), t.start_ns, t.dur_ns, t.depth, uint64_t(t.ret), uint64_t(ret_name), t.bytes,
	       uint64_t(stack_row)},
	      slots, n);
	return {};
}

} // namespace eacgm
