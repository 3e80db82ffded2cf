// SPDX-License-Identifier: Apache-2.0
// The node agent's store bounds (StoreWriter::enforce): rows past the age
// go, and when the file nears its size the oldest quarter of every table
// goes, again until it is well under. Deleted pages are reused by later
// batches, so the file stops growing rather than shrinking (a VACUUM would
// rewrite the whole file while the agent waits).
#include <algorithm>
#include <sqlite3.h>
#include <sys/stat.h>

#include "store/sqlite_error.h"
#include "store/store.h"

namespace eacgm {

namespace {

// Below this share of the bound nothing is deleted; past it, rows go until
// the data is under kLowWater: a batch (and the WAL between checkpoints)
// has room, and deleting is not a per-batch cost.
constexpr double kHighWater = 0.7, kLowWater = 0.5;

uint64_t size_of(const std::string &path)
{
	struct stat st;
	return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

} // namespace

uint64_t StoreWriter::file_bytes() const { return size_of(partial_) + size_of(partial_ + "-wal"); }

Result<uint64_t> StoreWriter::delete_rows(const std::string &table, const std::string &where)
{
	// A block's row holds n spans or metrics: those are the rows that go.
	const bool blocks = table == "span_blocks" || table == "metric_blocks";
	uint64_t spans = 0;
	if (blocks) {
		sqlite3_stmt *st = nullptr;
		std::string sql = "SELECT total(n) FROM " + table + " WHERE " + where;
		if (sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW)
			spans = uint64_t(sqlite3_column_double(st, 0));
		sqlite3_finalize(st);
	}
	if (auto r = exec(("DELETE FROM " + table + " WHERE " + where).c_str()); !r)
		return r.error();
	return blocks ? spans : uint64_t(sqlite3_changes64(db_.get()));
}

Result<uint64_t> StoreWriter::used_bytes()
{
	sqlite3_stmt *st = nullptr;
	if (sqlite3_prepare_v2(db_.get(),
			       "SELECT (SELECT page_count FROM pragma_page_count()) - "
			       "(SELECT freelist_count FROM pragma_freelist_count()), "
			       "(SELECT page_size FROM pragma_page_size())",
			       -1, &st, nullptr) != SQLITE_OK)
		return with_context(sqlite_error(db_.get()), "cannot read the size of " + partial_ + ": ");
	uint64_t used = 0;
	if (sqlite3_step(st) == SQLITE_ROW)
		used = uint64_t(sqlite3_column_int64(st, 0)) * uint64_t(sqlite3_column_int64(st, 1));
	sqlite3_finalize(st);
	return used;
}

// The table a writer's batch of `what` goes to.
static const char *table_of(const std::string &what)
{
	return what == "spans"        ? "span_blocks"
		: what == "metrics"   ? "metric_blocks"
		: what == "events"    ? "events"
		: what == "anomalies" ? "anomalies"
				      : nullptr;
}

void StoreWriter::note_batch(const char *what, int64_t first_rowid)
{
	const char *table = table_of(what);
	if (!table || !first_rowid)
		return;
	auto &starts = batch_starts_[table];
	starts.push_back(first_rowid);
	if (starts.size() > kMaxBatchStarts) {
		std::deque<int64_t> thinned;
		for (size_t i = 0; i < starts.size(); i += 2)
			thinned.push_back(starts[i]);
		starts.swap(thinned);
	}
}

// Batches are appended in time order: the first are the oldest, and they
// go whole (a share of them, at least one).
Result<uint64_t> StoreWriter::delete_oldest(double share)
{
	uint64_t n = 0;
	for (auto &[table, starts] : batch_starts_) {
		if (starts.empty())
			continue;
		size_t k = std::max<size_t>(1, size_t(double(starts.size()) * share));
		auto d = delete_rows(table, k < starts.size() ? "rowid < " + std::to_string(starts[k]) : "1");
		if (!d)
			return d;
		n += *d;
		starts.erase(starts.begin(), starts.begin() + long(k));
	}
	return n;
}

Result<uint64_t> StoreWriter::enforce(const Retention &r, uint64_t now_ns)
{
	if (auto ok = ready(); !ok)
		return ok.error();
	if (auto ok = commit(); !ok) // the batches written so far count
		return ok.error();
	uint64_t deleted = 0;
	if (r.max_age_ns && now_ns > r.max_age_ns) {
		std::string cutoff = std::to_string(now_ns - r.max_age_ns);
		// A block goes once its newest span is past the age.
		for (auto [table, time] : {std::pair{"span_blocks", "max_start"},
					   {"metric_blocks", "max_ts"},
					   {"events", "ts_ns"},
					   {"anomalies", "ts_ns"}}) {
			auto d = delete_rows(table, std::string(time) + " < " + cutoff);
			if (!d)
				return d;
			deleted += *d;
		}
	}
	if (r.max_bytes) {
		// The WAL holds what was written since the last checkpoint: folded
		// into the file, it is reused from the start.
		if (auto c = exec("PRAGMA wal_checkpoint(TRUNCATE)"); !c)
			return c.error();
		auto used = used_bytes();
		if (!used)
			return used.error();
		for (int round = 0; *used > r.max_bytes * kHighWater && round < 8; round++) {
			auto d = delete_oldest(*used > r.max_bytes * 0.9 ? 0.5 : 0.25);
			if (!d)
				return d;
			deleted += *d;
			if (!*d)
				break; // nothing left to delete: the schema and stacks alone
			if (used = used_bytes(); !used)
				return used.error();
			if (*used <= r.max_bytes * kLowWater)
				break;
		}
	}
	if (deleted) {
		// Stacks and strings no block refers to any more; the writer's ids
		// go with them (a text seen again gets a new row).
		for (const char *table : {"stacks", "strings"})
			if (auto d = delete_rows(table,
						 std::string("id NOT IN (SELECT j.value FROM span_blocks b, "
							     "json_each(b.") +
							 table + ") j)");
			    !d)
				return d;
		stacks_.clear();
		strings_.clear();
		// The deletes wrote every page they freed to the WAL: folded in
		// too, or the WAL alone can pass the bound.
		if (r.max_bytes)
			if (auto c = exec("PRAGMA wal_checkpoint(TRUNCATE)"); !c)
				return c.error();
	}
	return deleted;
}

} // namespace eacgm
