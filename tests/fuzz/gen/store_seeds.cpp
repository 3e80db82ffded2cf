// SPDX-License-Identifier: Apache-2.0
// Writes the seeds of tests/fuzz/store/: small recordings of the shapes a
// reader meets, in 512-byte pages so that each is a few KiB (the default
// 4 KiB page makes every table, view and index a page of its own).
//   fuzz_store_seeds tests/fuzz/store
#include <sqlite3.h>

#include <cstdio>
#include <string>

#include "sample_recording.h"
#include "store/sqlmod.h"

using namespace eacgm;

static bool shrink(const std::string &path, const char *sql)
{
	sqlite3 *db = nullptr;
	bool ok = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK &&
		register_span_module(db) && // VACUUM makes the spans table again
		sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK &&
		sqlite3_exec(db, "PRAGMA page_size = 512; VACUUM;", nullptr, nullptr, nullptr) == SQLITE_OK;
	sqlite3_close(db);
	return ok;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	const std::string dir = argv[1];
	const Recording full = fuzz::sample_recording();
	Recording empty;
	Recording spans;
	spans.spans = full.spans;
	struct Seed {
		const char *name;
		const Recording &rec;
		const char *sql; // run on the finished file
	} seeds[] = {
		// Schema 4 (the seed-*.db without v4 are version 3's, kept: that
		// reader is still fuzzed).
		{"seed-v4-full.db", full, ""},
		{"seed-v4-empty.db", empty, ""},
		{"seed-v4-spans.db", spans, ""},
		{"seed-v4-untimed-anomalies.db", full, "ALTER TABLE anomalies DROP COLUMN detected_ns"},
		{"seed-v4-incomplete.db", full, "INSERT INTO meta VALUES('incomplete', 'killed')"},
		{"seed-v4-version2.db", empty, "UPDATE meta SET value = '2' WHERE key = 'schema_version'"},
	};
	for (const Seed &s : seeds) {
		const std::string path = dir + "/" + s.name;
		if (!fuzz::write_recording(s.rec, path) || !shrink(path, s.sql)) {
			std::fprintf(stderr, "%s: cannot write\n", path.c_str());
			return 1;
		}
		std::printf("%s\n", path.c_str());
	}
	return 0;
}
