// SPDX-License-Identifier: Apache-2.0
// The rows of a query, each as its columns' text joined by '|' (NULL as
// "NULL"); an error as "error: " and SQLite's message: what the store's
// unit tests compare.
#pragma once
#include <sqlite3.h>

#include <string>
#include <vector>

inline std::vector<std::string> sql_rows(sqlite3 *db, const std::string &sql)
{
	sqlite3_stmt *st = nullptr;
	if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
		return {"error: " + std::string(sqlite3_errmsg(db))};
	std::vector<std::string> out;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		std::string r;
		for (int i = 0; i < sqlite3_column_count(st); i++) {
			const char *t = reinterpret_cast<const char *>(sqlite3_column_text(st, i));
			r += (i ? "|" : "") + std::string(t ? t : "NULL");
		}
		out.push_back(r);
	}
	if (rc != SQLITE_DONE)
		out.push_back("error: " + std::string(sqlite3_errmsg(db)));
	sqlite3_finalize(st);
	return out;
}
