// SPDX-License-Identifier: Apache-2.0
// Recordings whose values, not pages, are the fuzzer's: a valid file (the
// sample recording) with rows inserted, changed and deleted and its schema
// altered as the input says, then read. SQLite keeps the file valid, so
// every input reaches eacgm's reading of the rows: args that are not JSON,
// names that are not UTF-8, numbers out of every range, a missing column.
#include <sqlite3.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "sample_recording.h"
#include "store/sqlmod.h"
#include "store/store.h"

using namespace eacgm;

namespace {

struct Table {
	std::string name;
	std::vector<std::string> columns;
};

struct Template {
	std::string bytes;
	std::vector<Table> tables;
};

const Template &make_template(const fuzz::Scratch &scratch)
{
	static const Template t = [&] {
		Template t;
		const std::string path = scratch.dir() + "/template.db";
		if (!fuzz::write_recording(fuzz::sample_recording(), path))
			std::abort();
		std::ifstream in(path, std::ios::binary);
		t.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
		// The tables as the writer made them today, so that a change of the
		// schema changes what is fuzzed, not the inputs' meaning.
		// The spans virtual table is left out: it is read-only, and what it
		// reads (span_blocks, functions, strings, stacks) is fuzzed.
		sqlite3 *db = nullptr;
		if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
			std::abort();
		sqlite3_stmt *st = nullptr;
		sqlite3_prepare_v2(
			db,
			"SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p"
			" WHERE m.type = 'table' AND m.sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY m.name, p.cid",
			-1, &st, nullptr);
		while (sqlite3_step(st) == SQLITE_ROW) {
			std::string table = reinterpret_cast<const char *>(sqlite3_column_text(st, 0));
			if (t.tables.empty() || t.tables.back().name != table)
				t.tables.push_back({table, {}});
			t.tables.back().columns.push_back(reinterpret_cast<const char *>(sqlite3_column_text(st, 1)));
		}
		sqlite3_finalize(st);
		sqlite3_close(db);
		std::remove(path.c_str());
		if (t.tables.empty())
			std::abort();
		return t;
	}();
	return t;
}

// Text a reader parses, near what it expects: JSON of every shape.
const char *const kTexts[] = {
	"",
	"{}",
	"[]",
	"null",
	"3",
	"{\"size\":1}",
	"[\"f (a.py:1)\"]",
	"[1]",
	"{\"a\":",
	"[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]",
	"{\"seq\":18446744073709551615}",
	"{\"seq\":-9223372036854775808,\"runq_ns\":1e308}",
	"\"\\ud800\"",
	"3",
	"-1",
	"9223372036854775808",
	"0x10",
	" 12",
	"cuda",
};

void bind_value(sqlite3_stmt *st, int i, fuzz::Bytes &in)
{
	switch (in.u8() % 8) {
	case 0: sqlite3_bind_null(st, i); break;
	case 1: sqlite3_bind_int64(st, i, int64_t(in.u64())); break;
	case 2: sqlite3_bind_int64(st, i, int8_t(in.u8())); break;
	case 3: {
		const uint64_t bits = in.u64();
		double d;
		std::memcpy(&d, &bits, sizeof d); // NaNs and infinities too
		sqlite3_bind_double(st, i, d);
		break;
	}
	case 4: {
		const std::string s = in.str();
		sqlite3_bind_text(st, i, s.data(), int(s.size()), SQLITE_TRANSIENT); // any bytes: not UTF-8
		break;
	}
	case 5: {
		const std::string s = in.str();
		sqlite3_bind_blob(st, i, s.data(), int(s.size()), SQLITE_TRANSIENT);
		break;
	}
	case 6: {
		const std::string s = kTexts[in.u8() % std::size(kTexts)];
		sqlite3_bind_text(st, i, s.data(), int(s.size()), SQLITE_TRANSIENT);
		break;
	}
	default: {
		static const int64_t edges[] = {INT64_MIN, INT64_MAX,        -1,         0,
						1,         int64_t(1) << 32, UINT32_MAX, INT32_MIN};
		sqlite3_bind_int64(st, i, edges[in.u8() % std::size(edges)]);
		break;
	}
	}
}

// One statement with the input's values bound; a failure (a constraint, a
// type SQLite refuses) leaves the file as it was.
void run(sqlite3 *db, const std::string &sql, fuzz::Bytes &in)
{
	sqlite3_stmt *st = nullptr;
	if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
		return;
	for (int i = 1; i <= sqlite3_bind_parameter_count(st); ++i)
		bind_value(st, i, in);
	(void)sqlite3_step(st);
	sqlite3_finalize(st);
}

// Changes to the schema a reader meets in older or damaged files.
const char *const kSchemaChanges[] = {
	"ALTER TABLE anomalies DROP COLUMN detected_ns",
	"DROP TABLE spans",
	"DROP TABLE spans; CREATE VIEW spans AS SELECT 1 AS id, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14",
	"DROP TABLE stacks",
	"DROP TABLE strings",
	"DROP TABLE functions",
	"DROP TABLE span_blocks",
	"DROP TABLE meta",
	"DELETE FROM meta WHERE key = 'schema_version'",
	"UPDATE meta SET value = '3' WHERE key = 'schema_version'",
	"PRAGMA journal_mode = WAL",
	"UPDATE span_blocks SET data = substr(data, 1, length(data) - 3)",
	"UPDATE span_blocks SET first_id = first_id + 2, n = n - 1",
	"UPDATE functions SET args = '[[\"a\",\"a\",60]]'",
	"DELETE FROM strings",
	"DELETE FROM stacks",
	"DROP TABLE metrics",
	"DELETE FROM series",
	"UPDATE metric_blocks SET data = zeroblob(40)",
};

void apply(sqlite3 *db, const std::vector<Table> &tables, fuzz::Bytes &in)
{
	for (int ops = 0; !in.empty() && ops < 64; ++ops) {
		const uint8_t op = in.u8();
		const Table &t = tables[in.u8() % tables.size()];
		const std::string row =
			"(SELECT rowid FROM " + t.name + " LIMIT 1 OFFSET " + std::to_string(in.u8() % 4) + ")";
		switch (op % 6) {
		case 0:
		case 1: {
			std::string sql = "INSERT INTO " + t.name + " VALUES(";
			for (size_t i = 0; i < t.columns.size(); ++i)
				sql += i ? ",?" : "?";
			run(db, sql + ")", in);
			break;
		}
		case 2:
		case 3: {
			const std::string &column = t.columns[in.u8() % t.columns.size()];
			run(db, "UPDATE " + t.name + " SET \"" + column + "\" = ? WHERE rowid = " + row, in);
			break;
		}
		case 4: run(db, "DELETE FROM " + t.name + " WHERE rowid = " + row, in); break;
		default:
			(void)sqlite3_exec(db, kSchemaChanges[in.u8() % std::size(kSchemaChanges)], nullptr, nullptr,
					   nullptr);
		}
	}
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const fuzz::Scratch scratch;
	const Template &t = make_template(scratch);
	const std::string path =
		scratch.write("rows.db", reinterpret_cast<const uint8_t *>(t.bytes.data()), t.bytes.size());
	sqlite3 *db = nullptr;
	if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK ||
	    !register_span_module(db)) // DROP TABLE spans needs it
		std::abort();
	// One transaction, no syncs: the file is thrown away after reading, and a
	// sync per statement made this the slowest of the fuzzers.
	(void)sqlite3_exec(db, "PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY; BEGIN", nullptr, nullptr,
			   nullptr);
	fuzz::Bytes in(data, size);
	apply(db, t.tables, in);
	(void)sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
	sqlite3_close(db);
	(void)load_recording(path);
	for (const char *side : {"-wal", "-shm", "-journal"})
		std::remove((path + side).c_str());
	return 0;
}
