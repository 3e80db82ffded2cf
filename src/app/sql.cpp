// SPDX-License-Identifier: Apache-2.0
// eacgm sql: SQL on a recording, with `spans` readable whatever the file's
// layout (the spans module registered), as a table on stdout.
#include <sqlite3.h>

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "store/store.h"

namespace eacgm {

namespace {

std::string cell(sqlite3_stmt *st, int i)
{
	const auto *p = reinterpret_cast<const char *>(sqlite3_column_text(st, i));
	return p ? std::string(p, sqlite3_column_bytes(st, i)) : std::string();
}

std::string csv_cell(const std::string &v)
{
	if (v.find_first_of(",\"\n\r") == std::string::npos)
		return v;
	std::string out = "\"";
	for (char ch : v)
		out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
	return out + "\"";
}

nlohmann::json json_cell(sqlite3_stmt *st, int i)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER: return sqlite3_column_int64(st, i);
	case SQLITE_FLOAT: return sqlite3_column_double(st, i);
	case SQLITE_NULL: return nullptr;
	default: return cell(st, i);
	}
}

// Prints one statement's rows; false (with SQLite's message) on an error.
bool print_rows(sqlite3 *db, sqlite3_stmt *st, const SqlArgs &a, std::string &err)
{
	const int n = sqlite3_column_count(st);
	const char *sep = a.format == "csv" ? "," : "|";
	auto line = [&](auto value) {
		for (int i = 0; i < n; i++)
			std::cout << (i ? sep : "") << value(i);
		std::cout << '\n';
	};
	if (n && a.header && a.format != "json")
		line([&](int i) {
			return a.format == "csv" ? csv_cell(sqlite3_column_name(st, i)) : sqlite3_column_name(st, i);
		});
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (a.format == "json") {
			nlohmann::json row = nlohmann::json::object();
			for (int i = 0; i < n; i++)
				row[sqlite3_column_name(st, i)] = json_cell(st, i);
			std::cout << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
		} else {
			line([&](int i) { return a.format == "csv" ? csv_cell(cell(st, i)) : cell(st, i); });
		}
	}
	if (rc != SQLITE_DONE) {
		err = sqlite3_errmsg(db);
		return false;
	}
	return true;
}

} // namespace

int run_sql(const SqlArgs &a)
{
	auto db = open_recording_read_only(a.db);
	if (!db)
		return fail(db.error().message);
	const char *sql = a.query.c_str();
	while (*sql) {
		sqlite3_stmt *st = nullptr;
		const char *tail = nullptr;
		if (sqlite3_prepare_v2(db->get(), sql, -1, &st, &tail) != SQLITE_OK)
			return fail(std::string("SQL error: ") + sqlite3_errmsg(db->get()) +
					    " (the tables and their columns: docs/store.md)",
				    2);
		std::string err;
		const bool ok = !st || print_rows(db->get(), st, a, err);
		sqlite3_finalize(st);
		if (!ok)
			return fail("SQL error: " + err);
		sql = tail;
	}
	return 0;
}

} // namespace eacgm
