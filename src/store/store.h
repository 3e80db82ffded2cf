// SPDX-License-Identifier: Apache-2.0
// The recording file: one self-contained SQLite database.
//
// StoreWriter streams a recording into `path.partial` and renames it onto
// `path` in finish(). Until then its meta holds the key "incomplete": a
// recording that cannot go on (a full disk) is kept under `path` by
// keep_incomplete() with that key saying why, and one killed outright is
// left at `path.partial`, every committed batch in it. A writer destroyed
// without either (a failure before recording began) removes the partial
// file. load_recording() reads a finished file back whole.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/model.h"
#include "common/result.h"
#include "pipeline/span.h"
#include "store/span_layout.h"

struct sqlite3;
struct sqlite3_stmt;

namespace eacgm {

namespace detail {
struct DbCloser {
	void operator()(sqlite3 *db) const;
};
struct StmtFinalizer {
	void operator()(sqlite3_stmt *stmt) const;
};
} // namespace detail

using DbHandle = std::unique_ptr<sqlite3, detail::DbCloser>;
using StmtHandle = std::unique_ptr<sqlite3_stmt, detail::StmtFinalizer>;

// Version of the file's layout; load_recording() reads this one and the one
// before it. What readers query is the same in both: the tables and `spans`
// with its columns. Version 3 kept a row per span (span_rows, under a view);
// version 4 keeps spans in compressed blocks (span_blocks, span_layout.h)
// under the virtual table `spans` (module eacgm_spans, store/sqlmod.h): 13
// to 17 times smaller on ResNet-18 and GPT recordings (docs/store.md).
inline constexpr int kSchemaVersion = 4;
inline constexpr int kOldestSchemaVersion = 3;

// How long the pipeline's batches share a transaction (StoreWriter::commit_every).
inline constexpr uint64_t kPipelineCommitNs = 1'000'000'000;

class StoreWriter {
public:
	// Opens `path + ".partial"` (replacing a stale one from a crashed run)
	// and creates the schema, with 64 KiB set aside beside it
	// (`.partial-reserve`) that keep_incomplete() gives back to a full disk. Fails early if `path` cannot be
	// written. in_place (the node agent's store, read while it is written): `path` itself, kept whatever happens;
	// an existing file is moved to `path.1` first.
	static Result<StoreWriter> create(const std::string &path, bool in_place = false);

	StoreWriter(StoreWriter &&other) noexcept;
	StoreWriter &operator=(StoreWriter &&other) noexcept;
	StoreWriter(const StoreWriter &) = delete;
	StoreWriter &operator=(const StoreWriter &) = delete;
	~StoreWriter(); // without finish(): closes and removes the partial file

	// Each batch is written whole or not at all (a savepoint of its own).
	Result<void> add_spans(const std::vector<Span> &spans);
	// Spans and typed spans as one batch, the Spans first. A typed span is
	// kept as its Span would be (the same functions row, slots and text)
	// without making one: its function's shape and the text of its enums,
	// tensors and symbols are looked up once per recording, by probe and
	// value (store/typed.cpp).
	Result<void> add_spans(const std::vector<Span> &spans, const TypedSpans &typed);
	Result<void> add_metrics(const std::vector<Metric> &metrics);
	Result<void> add_events(const std::vector<Event> &events);
	Result<void> add_anomalies(const std::vector<Anomaly> &anomalies);
	// Batches share one transaction until it is this old (0, the default:
	// each batch commits at once). A commit, not a row, is what costs: the
	// pipeline's ten-odd batches a second (spans, Python spans, each host
	// interval's metrics) took a fifth of its loop's CPU in commits. A
	// reader of the file sees a batch once its transaction commits; a
	// crash, or a disk that fills, loses the open transaction at most.
	void commit_every(uint64_t ns) { commit_every_ns_ = ns; }
	// Commits the batches written so far (finish() and the bounds do too).
	Result<void> commit();
	Result<void> upsert_process(const Process &p);
	Result<void> upsert_thread(const Thread &t);
	Result<void> set_drops(const std::vector<Drop> &drops); // replaces all
	// Keys "schema_version" and "wall_offset_ns" are reserved.
	Result<void> set_meta(const std::string &key, const std::string &value);
	Result<void> set_wall_offset(int64_t wall_offset_ns);

	// Bounds on a store that is never finished (the node agent's): the
	// oldest rows go first, whole batches at a time, while writing goes on.
	struct Retention {
		uint64_t max_bytes = 0;  // the file and its WAL; 0: no bound
		uint64_t max_age_ns = 0; // rows older than this (by their time); 0: no bound
	};
	// Deletes what the bounds leave out; returns the rows deleted.
	Result<uint64_t> enforce(const Retention &r, uint64_t now_ns);
	uint64_t file_bytes() const; // the database file and its WAL, as on disk

	// Checkpoints the WAL, switches back to a single-file journal and renames
	// the partial file onto the final path. The writer is closed afterwards.
	Result<void> finish();
	// Ends a recording that cannot be finished (the disk filled, the
	// pipeline failed): every committed batch is kept under the final path
	// (with its WAL beside it when the disk has no room to fold it in),
	// meta "incomplete" set to why where the disk still takes that row.
	// Returns the path the recording is at; the writer is closed.
	Result<std::string> keep_incomplete(const std::string &why);
	bool is_open() const { return db_ != nullptr; }

	const std::string &path() const { return path_; }

private:
	StoreWriter() = default;
	Result<void> exec(const char *sql);
	Result<sqlite3_stmt *> statement(const char *sql);
	template <class T, class Bind>
	Result<void> insert_all(const char *sql, const std::vector<T> &rows, const char *what, Bind bind);
	// Rows written once each and known by their text afterwards (stacks,
	// strings, functions), with the ones the open batch and transaction
	// added: forgotten if those roll back, as their rows are.
	struct TextHash {
		using is_transparent = void;
		size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
	};
	class Dictionary {
	public:
		int64_t find(std::string_view text) const; // 0: not written
		void add(std::string text, int64_t id);    // written by the open batch
		void batch_done();                         // the batch's entries join the transaction's
		void undo_batch();
		void committed();
		void undo_transaction(); // the batch's and the transaction's
		void clear();
		size_t size() const { return ids_.size(); }
		// Counts up whenever ids were forgotten (undone, collected, or the
		// cap cleared): what remembers ids of its own starts over then.
		uint64_t epoch() const { return epoch_; }

	private:
		uint64_t epoch_ = 0;
		std::unordered_map<std::string, int64_t, TextHash, std::equal_to<>> ids_;
		std::vector<std::string_view> batch_, txn_;
		void forget(std::vector<std::string_view> &keys);
	};
	static constexpr size_t kMaxDictionaryIds = 16384;
	// The row of `text` in a dictionary table (one TEXT column besides id),
	// written the first time it is seen. 0: the insert failed.
	int64_t intern(Dictionary &d, const char *insert_sql, const std::string &text);
	int64_t function_id(const Span &s, std::vector<uint64_t> &slots, std::vector<int64_t> &strings);
	// The functions row of a shape (layer, name, each argument's key, kind
	// and width), written the first time.
	int64_t function_row(const std::string &layer, const std::string &name, const std::vector<ArgDef> &defs);
	// The strings row of an args value kept as text (its JSON). 0: the
	// insert failed.
	int64_t value_string(const nlohmann::json &v);
	static constexpr const char *kInsertString = "INSERT INTO strings(text) VALUES(?)";
	int64_t series_id(const Metric &m);
	// A span block being filled, row by row: a row's slots go straight into
	// their columns (added as the widest row needs them, 0 for the rows
	// before; a row writes 0 to the slots it does not use). Its columns are
	// the writer's, lent for the block (their memory is reused block after
	// block: zeroing or copying a fresh column per block was 3% of the
	// store's time), and written through plain pointers: a store through a
	// vector's data may alias the vector itself, so the compiler would
	// reload every column's pointer per value.
	struct BlockRows {
		Columns &cols;
		std::vector<int64_t> stacks, strings; // the dictionary rows the block refers to
		uint64_t serial;                      // counts the writer's blocks, from 1
		size_t rows = 0;                      // added so far, of the columns' size
		// lent: the columns; spare: slot columns of earlier blocks, to reuse.
		BlockRows(Columns &lent, Columns &spare, uint64_t n, size_t capacity);
		// A row's fixed columns but its id (write_block numbers the rows).
		struct Head {
			uint64_t pid, tid, fn, start_ns, dur_ns, depth, ret, ret_name, bytes, stack;
		};
		void add(const Head &h, const uint64_t *slots, size_t n);
		// The row just added's id.
		void set_id(uint64_t id) { col_[kColId][rows - 1] = id; }

	private:
		void widen(size_t slots);
		Columns &spare_;
		size_t capacity_;
		uint64_t *col_[kMaxBlockColumns] = {};
	};
	// One row of a Span, one of a typed span (store/typed.cpp); an error: a
	// dictionary row could not be written (db_failure), or the span cannot
	// be kept (too many argument values).
	Result<void> span_row(const Span &s, BlockRows &b);
	Result<void> typed_row(const TypedSpans &t, size_t i, BlockRows &b);
	// Writes rows [from, to) of spans then typed, as one block; its row id.
	Result<int64_t> write_block(const std::vector<Span> &spans, const TypedSpans &typed, size_t from, size_t to);
	int64_t stack_id(const PyStack &stack); // 0: none, or the insert failed
	// A failed write: SQLite's message and kind, and the likeliest cause.
	Error db_failure() const;
	// What the typed rows remember per recording (store/typed.cpp).
	struct TypedCache;
	struct TypedCacheDeleter {
		void operator()(TypedCache *c) const;
	};
	std::unique_ptr<TypedCache, TypedCacheDeleter> typed_;
	// A prepared statement without arguments (BEGIN, SAVEPOINT, ...).
	Result<void> step(const char *sql);
	Result<void> begin_batch();
	Result<void> end_batch(const char *what, int64_t first_rowid);
	void undo_batch();
	Result<void> ready() const;
	void discard();
	Result<uint64_t> delete_rows(const std::string &table, const std::string &where); // rows (spans) deleted
	Result<uint64_t> delete_oldest(double share); // of each table's rows, by insertion order
	Result<uint64_t> used_bytes();                // pages in use (the free ones are reused)
	// Where each batch of a table begins (its first rowid), oldest first:
	// retention deletes whole batches. Thinned to every other boundary
	// past kMaxBatchStarts (batches then count double).
	void note_batch(const char *what, int64_t first_rowid);
	static constexpr size_t kMaxBatchStarts = 8192;
	std::map<std::string, std::deque<int64_t>> batch_starts_; // by table

	std::string path_;
	std::string partial_;
	DbHandle db_;
	// Prepared statements by their SQL text's address (each a literal),
	// finalized before db_ is closed.
	std::unordered_map<const char *, StmtHandle> statements_;
	Dictionary stacks_, strings_, functions_, series_;
	// The id the next span (metric) gets; where the open batch's and
	// transaction's began (a rollback gives their ids back).
	int64_t next_span_id_ = 1, batch_first_span_ = 1;
	uint64_t blocks_made_ = 0;
	Columns block_cols_, spare_cols_; // lent to each block's BlockRows
	int64_t next_metric_id_ = 1, batch_first_metric_ = 1;
	std::unique_ptr<BlockEncoder> encoder_ = std::make_unique<BlockEncoder>();
	// The transaction batches share (commit_every): when it began, the
	// batches in it (noted for retention once it commits).
	struct Open {
		bool open = false;
		uint64_t began_ns = 0;
		int64_t first_span = 1, first_metric = 1;
		std::vector<std::pair<const char *, int64_t>> batches; // what, first rowid
	} txn_;
	void undo_transaction(const Open &lost);
	uint64_t commit_every_ns_ = 0;
	bool in_place_ = false;
};

// Reads a finished recording: what every reader wants whole (meta,
// processes, threads, metrics, events, anomalies, drops) with read(), and
// the spans, the bulk of it, either with them or one at a time
// (each_span): a summary or a trace need not hold a long recording's
// spans at once (they took eacgm from 120 MB to 220 MB at the end of a
// 30 s GPT recording).
class RecordingReader {
public:
	// Fails with a message for the user when path is not a recording this
	// eacgm reads.
	static Result<RecordingReader> open(const std::string &path);
	// meta holds the free-form keys only. With spans: ordered by start_ns,
	// ties in the order they were written.
	Result<Recording> read(bool with_spans = false) const;
	// Each span, in order (common/model.h); stacks are parsed once each and
	// shared, as in read().
	Result<void> each_span(SpanOrder order, const SpanVisit &visit) const;
	// Each span whose args hold every one of keys (names of letters,
	// digits and '_') as an integer, as recorded: SQLite tells them apart,
	// so the others are never made (a trace's collectives, read before
	// its spans, cost a scan, not a second reading of every span).
	Result<void> each_span_with_int_args(const std::vector<std::string> &keys, const SpanVisit &visit) const;
	// The file's layout version (kOldestSchemaVersion .. kSchemaVersion).
	int schema_version() const { return version_; }

private:
	RecordingReader() = default;
	template <class F>
	Result<void> rows(const char *sql, F fn) const;
	template <class F>
	Result<void> spans(const char *sql, F take) const; // take(Span &&) for each row of a span query
	using SpanTake = std::function<void(Span &&)>;
	Result<void> from_blocks(SpanOrder order, const std::function<bool(const SpanFunction &)> &keep,
				 const SpanTake &take) const;
	// each_span, handing each span over (read() keeps them without a copy).
	Result<void> take_spans(SpanOrder order, const SpanTake &take) const;
	Result<void> read_meta(Recording &rec) const;
	Result<void> read_tasks(Recording &rec) const;    // processes and threads
	Result<void> read_measures(Recording &rec) const; // metrics, events and drops
	Result<void> read_anomalies(Recording &rec) const;

	std::string path_;
	DbHandle db_;
	int version_ = kSchemaVersion;
};

// A read-only connection to a recording this eacgm reads, the spans module
// registered on it (`eacgm sql`).
Result<DbHandle> open_recording_read_only(const std::string &path);

// The whole of a finished recording, spans included (RecordingReader::read).
Result<Recording> load_recording(const std::string &path);

// `eacgm export --sqlite`: a new file `out` holding the recording with a row
// per span, in schema version 3's layout (indexed, with the `spans` view),
// which any SQLite reader (and eacgm) reads without the spans module.
Result<void> write_flat_copy(const std::string &recording, const std::string &out);

// Replaces the anomalies of a finished recording (what `eacgm detect`
// found), in one transaction: the rest of the file is left as it is.
Result<void> replace_anomalies(const std::string &path, const std::vector<Anomaly> &anomalies);

} // namespace eacgm
