// SPDX-License-Identifier: Apache-2.0
// How the store (schema 4) keeps spans: in blocks (store/blocks.h), one per
// batch the record loop writes, a column per field, and how a span's `args`
// object is taken apart into integer slots and put back as the same text.
//
// A span's args are described by its *function*: a row of the `functions`
// table holding its layer, its name and its arguments' keys and kinds, in
// the key order JSON text has them (e.g. [["count","u"],["dst","x"]]). The
// values go into slots, the block's columns after the fixed ones; a value
// that is no integer (a string, a double, an object) is kept once as the
// text of its JSON in `strings` and its slot holds that row's id. Rendering
// (render_args) gives back exactly the text today's row-per-span store held.
// Shared by the writer (store.cpp) and the `spans` virtual table (sqlmod.cpp),
// which is also built alone as the SQLite extension eacgm_sql.so: nothing
// here may use more than the standard library, nlohmann's JSON and blocks.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "store/blocks.h"

namespace eacgm {

// A span block's fixed columns, then its slots.
enum SpanColumn : uint8_t {
	kColId,      // the span's id (spans.id): counts up from 1 in the order spans were written
	kColPid,     //
	kColTid,     //
	kColFn,      // functions.id
	kColStart,   // start_ns
	kColDur,     // dur_ns
	kColDepth,   //
	kColRet,     // the raw return, signed
	kColRetName, // strings.id of its name (the text itself, unquoted); 0: none ('')
	kColBytes,   //
	kColStack,   // stacks.id; 0: outside Python (py_stack NULL)
	kColSlot0    // the argument slots, as many as the block's widest function needs
};
constexpr size_t kMaxSlots = kMaxBlockColumns - kColSlot0;

// The codings of a block with `slots` argument slots.
std::vector<ColumnCoding> span_codings(size_t slots);

// A metrics block's columns (schema 4 keeps metrics in blocks too: a host
// layer's hundred samples a second were 70% of a ResNet-18 recording).
enum MetricColumn : uint8_t {
	kMetId,     // counts up from 1 in the order metrics were written (metrics.rowid)
	kMetSeries, // series.id: layer, name, key, pid
	kMetTs,     // ts_ns
	kMetValue,  // the double's bits
	kMetColumns
};
std::vector<ColumnCoding> metric_codings();

// How an argument's value is kept. Each kind's value is the letter a
// function's argument list in the store names it by (args_schema_json):
// recordings written before keep reading.
enum class ArgKind : char {
	Int = 'i',  // an int64
	Uint = 'u', // a uint64 past int64's range
	Bool = 'b',
	Ptr = 'x',  // a pointer written "0x..." (hex, lower case)
	Text = 's', // any other value: its JSON text in `strings`
	Ints = 'a', // an array of `n` int64s
};

// The kind a stored argument list's letter names; nullopt: none.
std::optional<ArgKind> arg_kind(char letter);

// One argument of a function: its key, how its value is kept, in how many
// slots.
struct ArgDef {
	std::string key; // as it is in the args object
	ArgKind kind = ArgKind::Text;
	uint8_t n = 1; // slots it takes
};

struct SpanFunction {
	std::string layer, name;
	std::vector<ArgDef> args; // in the order of their keys in the args text (sorted)
	size_t slots = 0;         // the sum of their n
	std::string key_texts;    // render_args' cache: each key quoted, with its ':'
	std::vector<uint32_t> key_ends;
};

// The functions table's `args` text of a function, and back (checked: a
// damaged row is an error, not a wrong rendering).
std::string args_schema_json(const std::vector<ArgDef> &args);
Result<SpanFunction> parse_function(std::string layer, std::string name, std::string_view args_json);

// Looks up the text of a strings row by id ("" where it has none).
class StringSource {
public:
	virtual ~StringSource() = default;
	virtual const std::string &text(uint64_t id) = 0;
};

// Appends the args text of row `row` of a block, a span of function f, to
// out: "{}" for none, else {"key":value,...} as nlohmann's dump() wrote it.
void render_args(const SpanFunction &f, const Columns &cols, size_t row, StringSource &strings, std::string &out);

// How one args value is kept: its kind, and its slots appended. Text: the
// caller keeps its JSON text as a string (and appends that row's id).
ArgDef classify_arg(const std::string &key, const nlohmann::json &v, std::vector<uint64_t> &slots);

} // namespace eacgm
