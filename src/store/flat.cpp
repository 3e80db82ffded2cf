// SPDX-License-Identifier: Apache-2.0
// `eacgm export --sqlite`: a recording as a plain SQLite file with a row
// per span (schema version 3's layout, which this eacgm and older ones
// read), for tools that cannot load the spans module.
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "store/schema.h"
#include "store/sqlite_error.h"
#include "store/sqlmod.h"
#include "store/store.h"

namespace eacgm {

namespace {

// Version 3's layout, indexes included.
constexpr const char *kFlatSchema = EACGM_SCHEMA_HEAD R"(
CREATE TABLE span_rows(id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, layer TEXT, name TEXT,
                       start_ns INTEGER, dur_ns INTEGER, depth INTEGER, ret INTEGER,
                       ret_name TEXT, bytes INTEGER, args TEXT /* JSON object */,
                       stack INTEGER /* stacks.id; NULL outside Python */);
CREATE TABLE stacks(id INTEGER PRIMARY KEY,
                    frames TEXT NOT NULL /* JSON array of frames, innermost first */);
CREATE VIEW spans AS
  SELECT r.id AS id, r.pid AS pid, r.tid AS tid, r.layer AS layer, r.name AS name,
         r.start_ns AS start_ns, r.dur_ns AS dur_ns, r.depth AS depth, r.ret AS ret,
         r.ret_name AS ret_name, r.bytes AS bytes, r.args AS args, s.frames AS py_stack
  FROM span_rows r LEFT JOIN stacks s ON s.id = r.stack;
CREATE TABLE metrics(ts_ns INTEGER, layer TEXT, name TEXT, key TEXT, pid INTEGER, value REAL);
)" EACGM_SCHEMA_TAIL;

constexpr const char *kFlatCopy = R"(
INSERT INTO meta SELECT key, value FROM rec.meta WHERE key != 'schema_version';
INSERT INTO meta VALUES('schema_version', '3');
INSERT INTO processes SELECT * FROM rec.processes;
INSERT INTO threads SELECT * FROM rec.threads;
INSERT INTO stacks SELECT id, frames FROM rec.stacks;
INSERT INTO span_rows SELECT id, pid, tid, layer, name, start_ns, dur_ns, depth, ret, ret_name, bytes, args,
                             NULLIF(stack, 0) FROM rec.spans ORDER BY id;
INSERT INTO drops SELECT * FROM rec.drops;
INSERT INTO metrics SELECT * FROM rec.metrics ORDER BY rowid;
INSERT INTO events SELECT * FROM rec.events;
INSERT INTO anomalies SELECT ts_ns, dur_ns, pid, tid, layer, name, score, threshold, features, causes, detected_ns
  FROM rec.anomalies;
CREATE INDEX spans_by_function ON span_rows(layer, name);
CREATE INDEX spans_by_thread ON span_rows(pid, tid, start_ns);
CREATE INDEX metrics_by_name ON metrics(layer, name, key, ts_ns);
)";

} // namespace

Result<void> write_flat_copy(const std::string &recording, const std::string &out)
{
	auto in = RecordingReader::open(recording);
	if (!in)
		return in.error();
	if (in->schema_version() != kSchemaVersion)
		return make_error(ErrorKind::BadInput,
				  recording + " already keeps a row per span (schema version " +
					  std::to_string(in->schema_version()) + "): copy the file as it is");
	if (access(out.c_str(), F_OK) == 0)
		return make_error(ErrorKind::BadInput, out + " exists; remove it or give another path to --sqlite");
	sqlite3 *raw = nullptr;
	int rc = sqlite3_open_v2(out.c_str(), &raw,
				 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_URI,
				 nullptr);
	DbHandle db(raw);
	auto fail = [&](const Error &why) {
		Error e = with_context(why, "cannot write " + out + ": ", "; check the path and free disk space");
		db.reset();
		unlink(out.c_str());
		return e;
	};
	if (rc != SQLITE_OK)
		return fail(sqlite_error(raw, rc));
	if (auto r = register_span_module(db.get()); !r)
		return fail(r.error());
	sqlite3_stmt *attach = nullptr;
	if (sqlite3_prepare_v2(db.get(), "ATTACH ? AS rec", -1, &attach, nullptr) != SQLITE_OK)
		return fail(sqlite_error(db.get()));
	const std::string uri = "file:" + recording + "?mode=ro";
	sqlite3_bind_text(attach, 1, uri.c_str(), -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(attach);
	sqlite3_finalize(attach);
	if (rc != SQLITE_DONE)
		return fail(sqlite_error(db.get()));
	char *msg = nullptr;
	const std::string sql = std::string("BEGIN;") + kFlatSchema + kFlatCopy + "COMMIT;";
	if (sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
		Error e = make_error(kind_of_sqlite(db.get()), msg ? msg : sqlite3_errmsg(db.get()));
		sqlite3_free(msg);
		return fail(e);
	}
	(void)sqlite3_exec(db.get(), "DETACH rec", nullptr, nullptr, nullptr);
	return {};
}

} // namespace eacgm
