// SPDX-License-Identifier: Apache-2.0
#include "store/store.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/text.h"
#include "store/block_reader.h"
#include "store/schema.h"
#include "store/sqlite_error.h"
#include "store/sqlmod.h"

namespace eacgm {

void detail::DbCloser::operator()(sqlite3 *db) const { sqlite3_close_v2(db); }
void detail::StmtFinalizer::operator()(sqlite3_stmt *stmt) const { sqlite3_finalize(stmt); }

namespace {

Result<StmtHandle> prepare(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *raw = nullptr;
	if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK)
		return sqlite_error(db);
	return StmtHandle(raw);
}

// Whether the database has a table of that name (asked of sqlite_master,
// not read from an error's text).
bool has_table(sqlite3 *db, const char *name)
{
	sqlite3_stmt *raw = nullptr;
	if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1, &raw,
			       nullptr) != SQLITE_OK)
		return false;
	StmtHandle st(raw);
	sqlite3_bind_text(raw, 1, name, -1, SQLITE_STATIC);
	return sqlite3_step(raw) == SQLITE_ROW;
}

// Binds integers as INTEGER and strings as TEXT; uint64 values keep their bit
// pattern (SQLite integers are signed 64-bit), load casts them back.
template <class T>
void bind_param(sqlite3_stmt *st, int i, const T &v)
{
	if constexpr (std::is_integral_v<T>)
		sqlite3_bind_int64(st, i, static_cast<sqlite3_int64>(v));
	else if constexpr (std::is_floating_point_v<T>)
		sqlite3_bind_double(st, i, v);
	else if (is_utf8(v))
		sqlite3_bind_text(st, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
	else // TEXT is UTF-8 to every reader (Python's sqlite3 refuses a row otherwise)
		bind_param(st, i, to_utf8(v));
}

// Text that outlives the statement (a row's own strings, while insert_all
// runs over them): SQLite reads it in place rather than copying it first.
void bind_row_text(sqlite3_stmt *st, int i, const std::string &v)
{
	if (!is_utf8(v))
		return bind_param(st, i, v);
	sqlite3_bind_text(st, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
}

// Prepares, binds and runs one statement that returns no rows.
template <class... A>
Result<void> run(sqlite3 *db, const char *sql, const A &...a)
{
	auto st = prepare(db, sql);
	if (!st)
		return st.error();
	int i = 0;
	(bind_param(st->get(), ++i, a), ...);
	if (sqlite3_step(st->get()) != SQLITE_DONE)
		return sqlite_error(db);
	return {};
}

std::string col_text(sqlite3_stmt *st, int i)
{
	auto *p = reinterpret_cast<const char *>(sqlite3_column_text(st, i));
	return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st, i))) : std::string();
}

int64_t col_int(sqlite3_stmt *st, int i) { return sqlite3_column_int64(st, i); }

// Calls fn on each row; a read error (a damaged file) is reported, not
// mistaken for the end of the table.
template <class F>
Result<void> each_row(sqlite3 *db, const char *sql, F fn)
{
	auto st = prepare(db, sql);
	if (!st)
		return st.error();
	int rc;
	while ((rc = sqlite3_step(st->get())) == SQLITE_ROW)
		if (auto r = fn(st->get()); !r)
			return r;
	if (rc != SQLITE_DONE)
		return sqlite_error(db);
	return {};
}

// Room set aside beside the partial file while it is written: given back
// when the disk fills, so that the recording can still say why it stopped
// (its meta row, a WAL frame) on a disk with nothing else left.
constexpr const char *kReserveSuffix = "-reserve";
constexpr size_t kReserveBytes = 64 * 1024;

void reserve_room(const std::string &path)
{
	int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return; // no reserve: the reason is then written only if there is room
	static const char zeros[kReserveBytes] = {};
	if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros)
		std::remove(path.c_str());
	close(fd);
}

// The database file plus the side files SQLite (and the reserve) may
// create next to it.
void remove_db_files(const std::string &file)
{
	for (const char *suffix : {"", "-wal", "-shm", "-journal", kReserveSuffix})
		std::remove((file + suffix).c_str());
}

bool is_reserved_meta(const std::string &key) { return key == "schema_version" || key == "wall_offset_ns"; }

constexpr const char *kSchema = "BEGIN;\n" EACGM_SCHEMA_HEAD R"(
-- Spans, in blocks (src/store/span_layout.h): a block per batch the record loop
-- wrote, a compressed column per field. Ids, times and the stacks and
-- strings each block refers to are kept beside it, so that a query by id
-- or time reads only the blocks it needs and retention can drop whole ones.
CREATE TABLE span_blocks(id INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, n INTEGER NOT NULL,
                         min_start INTEGER NOT NULL, max_start INTEGER NOT NULL,
                         stacks TEXT NOT NULL /* JSON array of the stacks.id it uses */,
                         strings TEXT NOT NULL /* JSON array of the strings.id it uses */,
                         data BLOB NOT NULL);
-- What a span's function is: its layer, name, and its arguments' keys and
-- kinds ([["count","u"],["dst","x"]]); a function whose args change shape
-- (an open span without its late arguments) has a row per shape.
CREATE TABLE functions(id INTEGER PRIMARY KEY, layer TEXT NOT NULL, name TEXT NOT NULL, args TEXT NOT NULL);
-- Text kept once: argument values that are no integer (as their JSON), return names.
CREATE TABLE strings(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
-- What a call was: its Python stack by reference, each distinct stack once
-- (a loop makes the same calls from the same lines: on a GPT step 200,000
-- calls shared 43 stacks).
CREATE TABLE stacks(id INTEGER PRIMARY KEY,
                    frames TEXT NOT NULL /* JSON array of frames, innermost first */);
-- What readers query: one row per span with its stack, as version 3's view
-- had them. Needs the module eacgm_spans: `eacgm sql`, or eacgm_sql.so
-- loaded into sqlite3 (.load) or Python (load_extension).
CREATE VIRTUAL TABLE spans USING eacgm_spans;
-- Metrics in blocks too (span_layout.h), a block per batch; each series
-- (layer, name, key, pid) once.
CREATE TABLE metric_blocks(id INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, n INTEGER NOT NULL,
                           min_ts INTEGER NOT NULL, max_ts INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE series(id INTEGER PRIMARY KEY, layer TEXT NOT NULL, name TEXT NOT NULL, key TEXT NOT NULL,
                    pid INTEGER NOT NULL);
CREATE VIRTUAL TABLE metrics USING eacgm_metrics;
)" EACGM_SCHEMA_TAIL R"(INSERT INTO meta VALUES('schema_version', '4');
INSERT INTO meta VALUES('incomplete', 'being written: eacgm did not finish it (killed, or still writing)');
COMMIT;
)";

static_assert(kSchemaVersion == 4, "update the schema_version row in kSchema");

} // namespace

Result<StoreWriter> StoreWriter::create(const std::string &path, bool in_place)
{
	if (auto w = check_writable(path); !w)
		return w.error();
	StoreWriter s;
	s.path_ = path;
	s.in_place_ = in_place;
	s.partial_ = in_place ? path : path + ".partial";
	if (in_place && access(path.c_str(), F_OK) == 0) {
		remove_db_files(path + ".1");
		if (std::rename(path.c_str(), (path + ".1").c_str()) != 0)
			return errno_error(errno, "cannot move the previous store " + path + " to " + path + ".1");
		for (const char *suffix : {"-wal", "-shm"})
			std::rename((path + suffix).c_str(), (path + ".1" + suffix).c_str());
	}
	// A partial file left by a crashed run would otherwise be appended to.
	remove_db_files(s.partial_);

	sqlite3 *raw = nullptr;
	// NOFOLLOW: a link put at this name in a shared directory must not
	// point the writer at another file.
	int rc = sqlite3_open_v2(s.partial_.c_str(), &raw,
				 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, nullptr);
	s.db_.reset(raw); // set even on failure, so the handle is closed
	if (rc != SQLITE_OK)
		return with_context(sqlite_error(raw, rc), "cannot create " + s.partial_ + ": ",
				    "; choose another output path");
	// WAL: readers (and a crash) never see a torn batch; NORMAL sync is
	// enough because the file only becomes the real output in finish().
	if (auto r = s.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !r)
		return r.error();
	if (auto r = register_span_module(s.db_.get()); !r)
		return r.error();
	if (auto r = s.exec(kSchema); !r)
		return r.error();
	if (!in_place)
		reserve_room(s.partial_ + kReserveSuffix);
	return s;
}

StoreWriter::StoreWriter(StoreWriter &&o) noexcept { *this = std::move(o); }

StoreWriter &StoreWriter::operator=(StoreWriter &&o) noexcept
{
	if (this != &o) {
		discard();
		path_ = std::move(o.path_);
		partial_ = std::exchange(o.partial_, {});
		db_ = std::move(o.db_);
		statements_ = std::move(o.statements_);
		batch_starts_ = std::move(o.batch_starts_);
		stacks_ = std::move(o.stacks_);
		strings_ = std::move(o.strings_);
		functions_ = std::move(o.functions_);
		series_ = std::move(o.series_);
		typed_ = std::move(o.typed_);
		next_span_id_ = o.next_span_id_;
		batch_first_span_ = o.batch_first_span_;
		blocks_made_ = o.blocks_made_;
		next_metric_id_ = o.next_metric_id_;
		batch_first_metric_ = o.batch_first_metric_;
		encoder_ = std::move(o.encoder_);
		txn_ = std::exchange(o.txn_, {});
		commit_every_ns_ = o.commit_every_ns_;
		in_place_ = o.in_place_;
	}
	return *this;
}

StoreWriter::~StoreWriter() { discard(); }

void StoreWriter::discard()
{
	statements_.clear();
	db_.reset();
	if (!partial_.empty() && !in_place_)
		remove_db_files(partial_);
	partial_.clear();
}

Result<void> StoreWriter::ready() const
{
	if (!db_)
		return make_error(ErrorKind::Other, "recording " + path_ + " is already finished or was not opened");
	return {};
}

Result<void> StoreWriter::exec(const char *sql)
{
	char *msg = nullptr;
	if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, &msg) != SQLITE_OK) {
		std::string m = msg ? msg : sqlite3_errmsg(db_.get());
		sqlite3_free(msg);
		return make_error(kind_of_sqlite(db_.get()),
				  "cannot write " + partial_ + ": " + m + "; check free disk space and permissions");
	}
	return {};
}

// The statement for `sql`, prepared on first use and kept: a batch a few
// times a second, each preparing its statement anew, spent more in
// SQLite's parser than in some of the inserts.
Result<sqlite3_stmt *> StoreWriter::statement(const char *sql)
{
	auto &st = statements_[sql];
	if (!st) {
		auto p = prepare(db_.get(), sql);
		if (!p)
			return p.error();
		st = std::move(*p);
	}
	return st.get();
}

Result<void> StoreWriter::step(const char *sql)
{
	auto st = statement(sql);
	if (!st)
		return with_context(st.error(), "cannot write " + partial_ + ": ");
	int rc = sqlite3_step(*st);
	sqlite3_reset(*st);
	if (rc != SQLITE_DONE)
		return with_context(sqlite_error(db_.get()), "cannot write " + partial_ + ": ",
				    "; check free disk space and permissions");
	return {};
}

// A batch opens the shared transaction if none is open, and a savepoint in
// it: a batch that fails is undone alone, the batches before it stay.
Result<void> StoreWriter::begin_batch()
{
	if (!txn_.open) {
		if (auto r = step("BEGIN"); !r)
			return r;
		txn_.open = true;
		txn_.began_ns = mono_ns();
		txn_.first_span = next_span_id_;
		txn_.first_metric = next_metric_id_;
	}
	batch_first_span_ = next_span_id_;
	batch_first_metric_ = next_metric_id_;
	return step("SAVEPOINT batch");
}

// What a transaction wrote is gone: so are its dictionary rows and span ids.
void StoreWriter::undo_transaction(const Open &lost)
{
	for (Dictionary *d : {&stacks_, &strings_, &functions_, &series_})
		d->undo_transaction();
	next_span_id_ = lost.first_span;
	next_metric_id_ = lost.first_metric;
}

void StoreWriter::undo_batch()
{
	if (sqlite3_get_autocommit(db_.get())) {
		// SQLite rolled the whole transaction back itself (a full disk, an
		// I/O error): the batches before this one went with it.
		undo_transaction(std::exchange(txn_, {}));
		return;
	}
	for (Dictionary *d : {&stacks_, &strings_, &functions_, &series_})
		d->undo_batch();
	next_span_id_ = batch_first_span_;
	next_metric_id_ = batch_first_metric_;
	(void)step("ROLLBACK TO batch");
	(void)step("RELEASE batch");
}

Result<void> StoreWriter::end_batch(const char *what, int64_t first_rowid)
{
	if (auto r = step("RELEASE batch"); !r) {
		undo_batch();
		return r;
	}
	for (Dictionary *d : {&stacks_, &strings_, &functions_, &series_})
		d->batch_done();
	txn_.batches.emplace_back(what, first_rowid);
	if (mono_ns() - txn_.began_ns >= commit_every_ns_)
		return commit();
	return {};
}

Result<void> StoreWriter::commit()
{
	if (!txn_.open)
		return {};
	Open done = std::exchange(txn_, {});
	if (auto r = step("COMMIT"); !r) {
		(void)exec("ROLLBACK");
		undo_transaction(done);
		return r;
	}
	for (Dictionary *d : {&stacks_, &strings_, &functions_, &series_})
		d->committed();
	for (auto [what, first] : done.batches)
		note_batch(what, first);
	return {};
}

// Writes rows with one prepared statement, as one batch (begin_batch).
// bind returns false when it failed (SQLite's message says why); the batch
// is then rolled back whole.
template <class T, class Bind>
Result<void> StoreWriter::insert_all(const char *sql, const std::vector<T> &rows, const char *what, Bind bind)
{
	if (auto r = ready(); !r)
		return r;
	if (rows.empty())
		return {};
	auto st = statement(sql);
	if (!st)
		return with_context(st.error(), "cannot write " + std::string(what) + " to " + partial_ + ": ");
	if (auto r = begin_batch(); !r)
		return r;
	auto fail = [&]() -> Result<void> {
		Error e = sqlite_error(db_.get()); // before the rollback clears it
		sqlite3_reset(*st);
		undo_batch();
		return with_context(e, "cannot write " + std::string(what) + " to " + partial_ + ": ",
				    "; check free disk space");
	};
	int64_t first = 0;
	for (const T &row : rows) {
		if (!bind(*st, row))
			return fail();
		int rc = sqlite3_step(*st);
		sqlite3_reset(*st);
		if (rc != SQLITE_DONE)
			return fail();
		if (!first)
			first = sqlite3_last_insert_rowid(db_.get());
	}
	return end_batch(what, first);
}

int64_t StoreWriter::Dictionary::find(std::string_view text) const
{
	auto it = ids_.find(text);
	return it == ids_.end() ? 0 : it->second;
}

void StoreWriter::Dictionary::add(std::string text, int64_t id)
{
	// Bounded: past the cap a text seen again gets a second row, which
	// readers cannot tell from the first.
	if (ids_.size() >= kMaxDictionaryIds)
		clear();
	batch_.push_back(ids_.emplace(std::move(text), id).first->first);
}

void StoreWriter::Dictionary::batch_done() { txn_.insert(txn_.end(), batch_.begin(), batch_.end()), batch_.clear(); }
void StoreWriter::Dictionary::undo_batch() { forget(batch_); }
void StoreWriter::Dictionary::committed() { txn_.clear(); }
void StoreWriter::Dictionary::undo_transaction()
{
	forget(batch_);
	forget(txn_);
}
void StoreWriter::Dictionary::clear()
{
	ids_.clear();
	batch_.clear(); // views of the keys just dropped
	txn_.clear();
	epoch_++;
}

void StoreWriter::Dictionary::forget(std::vector<std::string_view> &keys)
{
	if (!keys.empty())
		epoch_++;
	for (std::string_view k : std::exchange(keys, {}))
		if (auto it = ids_.find(k); it != ids_.end())
			ids_.erase(it);
}

int64_t StoreWriter::intern(Dictionary &d, const char *insert_sql, const std::string &text)
{
	if (int64_t id = d.find(text))
		return id;
	auto st = statement(insert_sql);
	if (!st)
		return 0;
	bind_row_text(*st, 1, text);
	int rc = sqlite3_step(*st);
	sqlite3_reset(*st);
	if (rc != SQLITE_DONE)
		return 0;
	int64_t id = sqlite3_last_insert_rowid(db_.get());
	d.add(text, id);
	return id;
}

// The functions row of a span (its layer, name and the keys and kinds of its
// args), and the args' slot values; the strings rows it uses appended to
// `strings`. 0 where a row could not be written.
int64_t StoreWriter::function_id(const Span &s, std::vector<uint64_t> &slots, std::vector<int64_t> &strings)
{
	static thread_local std::vector<ArgDef> defs;
	defs.clear();
	slots.clear();
	if (s.args.is_object())
		for (const auto &[k, v] : s.args.items()) {
			ArgDef d = classify_arg(k, v, slots);
			if (d.kind == ArgKind::Text) {
				int64_t id = value_string(v);
				if (!id)
					return 0;
				slots.push_back(static_cast<uint64_t>(id));
				strings.push_back(id);
			}
			defs.push_back(std::move(d));
		}
	if (slots.size() > kMaxSlots)
		return 0; // the caller says why
	return function_row(s.layer, s.name, defs);
}

int64_t StoreWriter::value_string(const nlohmann::json &v)
{
	// replace: captured strings may hold bytes that are not UTF-8, and one
	// odd argument must not cost the batch.
	return intern(strings_, kInsertString, v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

int64_t StoreWriter::function_row(const std::string &layer, const std::string &name, const std::vector<ArgDef> &defs)
{
	// Its key in functions_: the layer, the name, each argument's key, kind
	// and width.
	static thread_local std::string key;
	key.assign(layer).append(1, '\0').append(name);
	for (const ArgDef &d : defs)
		key.append(1, '\0').append(d.key).append(1, '\1').append(1, char(d.kind)).append(1, char(d.n));
	if (int64_t id = functions_.find(key))
		return id;
	auto st = statement("INSERT INTO functions(layer, name, args) VALUES(?,?,?)");
	if (!st)
		return 0;
	bind_row_text(*st, 1, layer);
	bind_row_text(*st, 2, name);
	bind_param(*st, 3, args_schema_json(defs));
	int rc = sqlite3_step(*st);
	sqlite3_reset(*st);
	if (rc != SQLITE_DONE)
		return 0;
	int64_t id = sqlite3_last_insert_rowid(db_.get());
	functions_.add(key, id);
	return id;
}

// A JSON array of distinct ids.
static std::string id_list(std::vector<int64_t> &ids)
{
	std::sort(ids.begin(), ids.end());
	ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
	std::string out = "[";
	for (size_t i = 0; i < ids.size(); i++)
		out += (i ? "," : "") + std::to_string(ids[i]);
	return out + "]";
}

StoreWriter::BlockRows::BlockRows(Columns &lent, Columns &spare, uint64_t n, size_t capacity)
	: cols(lent), serial(n), spare_(spare), capacity_(capacity)
{
	// The last block's slot columns wait in spare; the fixed columns stay:
	// every row writes each, so their old values need no zeroing.
	while (cols.size() > kColSlot0) {
		spare_.push_back(std::move(cols.back()));
		cols.pop_back();
	}
	cols.resize(kColSlot0);
	for (size_t c = 0; c < kColSlot0; c++) {
		cols[c].resize(capacity);
		col_[c] = cols[c].data();
	}
}

void StoreWriter::BlockRows::widen(size_t slots)
{
	// A slot column holds 0 for the rows before the first that used it;
	// its rows from there on are written by add. Moving a column keeps its
	// memory where it is: the pointers taken stay good.
	for (size_t c = cols.size(); c < kColSlot0 + slots; c++) {
		std::vector<uint64_t> col;
		if (!spare_.empty()) {
			col = std::move(spare_.back());
			spare_.pop_back();
		}
		col.resize(capacity_);
		std::fill_n(col.begin(), rows, 0);
		cols.push_back(std::move(col));
		col_[c] = cols[c].data();
	}
}

void StoreWriter::BlockRows::add(const Head &h, const uint64_t *slots, size_t n)
{
	static_assert(kColSlot0 == 11 && kColStack == 10, "a Head field per fixed column but the id");
	if (cols.size() < kColSlot0 + n)
		widen(n);
	const size_t r = rows++;
	for (size_t k = kColSlot0 + n; k < cols.size(); k++)
		col_[k][r] = 0; // a slot this row's function does not use
	col_[kColPid][r] = h.pid, col_[kColTid][r] = h.tid, col_[kColFn][r] = h.fn;
	col_[kColStart][r] = h.start_ns, col_[kColDur][r] = h.dur_ns, col_[kColDepth][r] = h.depth;
	col_[kColRet][r] = h.ret, col_[kColRetName][r] = h.ret_name, col_[kColBytes][r] = h.bytes;
	col_[kColStack][r] = h.stack;
	for (size_t k = 0; k < n; k++)
		col_[kColSlot0 + k][r] = slots[k];
}

Error StoreWriter::db_failure() const { return with_context(sqlite_error(db_.get()), "", "; check free disk space"); }

int64_t StoreWriter::stack_id(const PyStack &stack)
{
	return stack.empty() ? 0 : intern(stacks_, "INSERT INTO stacks(frames) VALUES(?)", stack.json());
}

Result<void> StoreWriter::span_row(const Span &s, BlockRows &b)
{
	static thread_local std::vector<uint64_t> slots;
	int64_t fn = function_id(s, slots, b.strings);
	if (slots.size() > kMaxSlots)
		return make_error(ErrorKind::BadInput,
				  "a span of " + s.layer + "/" + s.name + " has " + std::to_string(slots.size()) +
					  " argument values, more than the " + std::to_string(kMaxSlots) +
					  " a block keeps");
	int64_t ret_name = s.ret_name.empty() ? 0 : intern(strings_, kInsertString, s.ret_name);
	int64_t stack = stack_id(s.py_stack);
	if (!fn || (!s.ret_name.empty() && !ret_name) || (!s.py_stack.empty() && !stack))
		return db_failure();
	if (ret_name)
		b.strings.push_back(ret_name);
	if (stack)
		b.stacks.push_back(stack);
	b.add({s.pid, s.tid, uint64_t(fn), s.start_ns, s.dur_ns, s.depth, uint64_t(s.ret), uint64_t(ret_name), s.bytes,
	       uint64_t(stack)},
	      slots.data(), slots.size());
	return {};
}

Result<int64_t> StoreWriter::write_block(const std::vector<Span> &spans, const TypedSpans &typed, size_t from,
					 size_t to)
{
	const size_t rows = to - from;
	BlockRows b(block_cols_, spare_cols_, ++blocks_made_, rows);
	Columns &cols = b.cols;
	for (size_t i = from; i < to; i++) {
		auto r = i < spans.size() ? span_row(spans[i], b) : typed_row(typed, i - spans.size(), b);
		if (!r)
			return r.error();
		b.set_id(uint64_t(next_span_id_++));
	}
	const size_t width = cols.size() - kColSlot0;
	auto blob = encoder_->encode(cols, span_codings(width));
	if (!blob)
		return blob.error();
	auto [lo, hi] = std::minmax_element(cols[kColStart].begin(), cols[kColStart].end());
	auto st = statement("INSERT INTO span_blocks(first_id, n, min_start, max_start, stacks, strings, data)"
			    " VALUES(?,?,?,?,?,?,?)");
	if (!st)
		return st.error();
	bind_param(*st, 1, cols[kColId][0]);
	bind_param(*st, 2, rows);
	bind_param(*st, 3, *lo);
	bind_param(*st, 4, *hi);
	bind_param(*st, 5, id_list(b.stacks));
	bind_param(*st, 6, id_list(b.strings));
	sqlite3_bind_blob(*st, 7, blob->data(), static_cast<int>(blob->size()), SQLITE_STATIC);
	int rc = sqlite3_step(*st);
	sqlite3_reset(*st);
	if (rc != SQLITE_DONE)
		return db_failure();
	return sqlite3_last_insert_rowid(db_.get());
}

// A batch of spans is a block (or several, past kMaxBlockRows), with the
// dictionary rows they need, in one savepoint.
Result<void> StoreWriter::add_spans(const std::vector<Span> &spans) { return add_spans(spans, TypedSpans{}); }

Result<void> StoreWriter::add_spans(const std::vector<Span> &spans, const TypedSpans &typed)
{
	if (auto r = ready(); !r)
		return r;
	const size_t total = spans.size() + typed.size();
	if (!total)
		return {};
	if (auto r = begin_batch(); !r)
		return r;
	int64_t first = 0;
	for (size_t at = 0; at < total; at += kMaxBlockRows) {
		auto block = write_block(spans, typed, at, std::min(total, at + kMaxBlockRows));
		if (!block) {
			undo_batch();
			return with_context(block.error(), "cannot write spans to " + partial_ + ": ");
		}
		first = first ? first : *block;
	}
	return end_batch("spans", first);
}

// The series row of a metric, written the first time it is seen; 0 where
// the insert failed.
int64_t StoreWriter::series_id(const Metric &m)
{
	static thread_local std::string key;
	key.assign(m.layer).append(1, '\0').append(m.name).append(1, '\0').append(m.key).append(1, '\0');
	key += std::to_string(m.pid);
	if (int64_t id = series_.find(key))
		return id;
	auto st = statement("INSERT INTO series(layer, name, key, pid) VALUES(?,?,?,?)");
	if (!st)
		return 0;
	bind_row_text(*st, 1, m.layer);
	bind_row_text(*st, 2, m.name);
	bind_row_text(*st, 3, m.key);
	bind_param(*st, 4, m.pid);
	int rc = sqlite3_step(*st);
	sqlite3_reset(*st);
	if (rc != SQLITE_DONE)
		return 0;
	int64_t id = sqlite3_last_insert_rowid(db_.get());
	series_.add(key, id);
	return id;
}

// A batch of metrics is a block (or several), with the series rows it
// needs, in one savepoint.
Result<void> StoreWriter::add_metrics(const std::vector<Metric> &metrics)
{
	if (auto r = ready(); !r)
		return r;
	if (metrics.empty())
		return {};
	if (auto r = begin_batch(); !r)
		return r;
	auto fail = [&](const Error &e) -> Result<void> {
		undo_batch();
		return with_context(e, "cannot write metrics to " + partial_ + ": ", "; check free disk space");
	};
	int64_t first = 0;
	for (size_t at = 0; at < metrics.size(); at += kMaxBlockRows) {
		const size_t to = std::min(metrics.size(), at + kMaxBlockRows);
		Columns cols(kMetColumns);
		for (size_t i = at; i < to; i++) {
			const Metric &m = metrics[i];
			int64_t series = series_id(m);
			if (!series)
				return fail(sqlite_error(db_.get()));
			uint64_t bits;
			std::memcpy(&bits, &m.value, sizeof bits);
			cols[kMetId].push_back(uint64_t(next_metric_id_++));
			cols[kMetSeries].push_back(uint64_t(series));
			cols[kMetTs].push_back(m.ts_ns);
			cols[kMetValue].push_back(bits);
		}
		auto blob = encoder_->encode(cols, metric_codings());
		if (!blob)
			return fail(blob.error());
		auto [lo, hi] = std::minmax_element(cols[kMetTs].begin(), cols[kMetTs].end());
		auto st = statement("INSERT INTO metric_blocks(first_id, n, min_ts, max_ts, data) VALUES(?,?,?,?,?)");
		if (!st)
			return fail(st.error());
		bind_param(*st, 1, cols[kMetId][0]);
		bind_param(*st, 2, to - at);
		bind_param(*st, 3, *lo);
		bind_param(*st, 4, *hi);
		sqlite3_bind_blob(*st, 5, blob->data(), static_cast<int>(blob->size()), SQLITE_STATIC);
		int rc = sqlite3_step(*st);
		sqlite3_reset(*st);
		if (rc != SQLITE_DONE)
			return fail(sqlite_error(db_.get()));
		first = first ? first : sqlite3_last_insert_rowid(db_.get());
	}
	return end_batch("metrics", first);
}

Result<void> StoreWriter::add_events(const std::vector<Event> &events)
{
	return insert_all(
		"INSERT INTO events VALUES(?,?,?,?,?,?,?)", events, "events", [](sqlite3_stmt *st, const Event &e) {
			bind_param(st, 1, e.ts_ns);
			bind_param(st, 2, e.layer);
			bind_param(st, 3, e.name);
			bind_param(st, 4, e.key);
			bind_param(st, 5, e.pid);
			bind_param(st, 6, e.tid);
			bind_param(st, 7, e.args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
			return true;
		});
}

constexpr const char *kInsertAnomaly = "INSERT INTO anomalies VALUES(?,?,?,?,?,?,?,?,?,?,?)";

static bool bind_anomaly(sqlite3_stmt *st, const Anomaly &a)
{
	bind_param(st, 1, a.ts_ns);
	bind_param(st, 2, a.dur_ns);
	bind_param(st, 3, a.pid);
	bind_param(st, 4, a.tid);
	bind_param(st, 5, a.layer);
	bind_param(st, 6, a.name);
	bind_param(st, 7, a.score);
	bind_param(st, 8, a.threshold);
	bind_param(st, 9, a.features.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
	bind_param(st, 10, a.causes.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
	bind_param(st, 11, a.detected_ns);
	return true;
}

Result<void> StoreWriter::add_anomalies(const std::vector<Anomaly> &anomalies)
{
	return insert_all(kInsertAnomaly, anomalies, "anomalies", bind_anomaly);
}

Result<void> StoreWriter::upsert_process(const Process &p)
{
	if (auto r = ready(); !r)
		return r;
	auto r = run(db_.get(), "INSERT OR REPLACE INTO processes VALUES(?,?,?,?,?,?,?)", p.pid, p.ppid, p.comm,
		     p.cmdline, p.start_ns, p.end_ns, p.exit_code);
	if (!r)
		return with_context(r.error(),
				    "cannot write process " + std::to_string(p.pid) + " to " + partial_ + ": ");
	return {};
}

Result<void> StoreWriter::upsert_thread(const Thread &t)
{
	if (auto r = ready(); !r)
		return r;
	auto r = run(db_.get(), "INSERT OR REPLACE INTO threads VALUES(?,?,?)", t.pid, t.tid, t.name);
	if (!r)
		return with_context(r.error(),
				    "cannot write thread " + std::to_string(t.tid) + " to " + partial_ + ": ");
	return {};
}

Result<void> StoreWriter::set_drops(const std::vector<Drop> &drops)
{
	if (auto r = ready(); !r)
		return r;
	if (auto r = commit(); !r)
		return r;
	if (auto r = exec("BEGIN"); !r)
		return r;
	if (auto r = exec("DELETE FROM drops"); !r) {
		(void)exec("ROLLBACK");
		return r;
	}
	for (const Drop &d : drops) {
		auto r = run(db_.get(), "INSERT INTO drops VALUES(?,?,?)", d.layer, d.reason, d.count);
		if (!r) {
			(void)exec("ROLLBACK");
			return with_context(r.error(), "cannot write drops to " + partial_ + ": ");
		}
	}
	if (auto r = exec("COMMIT"); !r) {
		(void)exec("ROLLBACK");
		return r;
	}
	return {};
}

Result<void> StoreWriter::set_meta(const std::string &key, const std::string &value)
{
	if (auto r = ready(); !r)
		return r;
	if (is_reserved_meta(key))
		return make_error(ErrorKind::BadInput,
				  "meta key '" + key + "' is reserved by the store" +
					  (key == "wall_offset_ns" ? "; use set_wall_offset()" : ""));
	auto r = run(db_.get(), "INSERT OR REPLACE INTO meta VALUES(?,?)", key, value);
	if (!r)
		return with_context(r.error(), "cannot write meta to " + partial_ + ": ");
	return {};
}

Result<void> StoreWriter::set_wall_offset(int64_t wall_offset_ns)
{
	if (auto r = ready(); !r)
		return r;
	auto r = run(db_.get(), "INSERT OR REPLACE INTO meta VALUES('wall_offset_ns', ?)",
		     std::to_string(wall_offset_ns));
	if (!r)
		return with_context(r.error(), "cannot write meta to " + partial_ + ": ");
	return {};
}

Result<void> StoreWriter::finish()
{
	if (auto r = ready(); !r)
		return r;
	if (auto r = commit(); !r)
		return r;
	// The writer's own mark goes; one a caller set (merge, of an incomplete
	// input) stays.
	if (auto r = exec("DELETE FROM meta WHERE key = 'incomplete' AND value LIKE 'being written:%'"); !r)
		return r;
	statements_.clear(); // a connection closes only without them
	// Leaving WAL mode checkpoints and deletes the -wal file, so the result
	// is one self-contained file that can be copied or mailed as is.
	auto st = prepare(db_.get(), "PRAGMA journal_mode=DELETE");
	if (!st)
		return with_context(st.error(), "cannot finish " + partial_ + ": ");
	std::string mode = sqlite3_step(st->get()) == SQLITE_ROW ? col_text(st->get(), 0) : "";
	st->reset();
	if (mode != "delete")
		return make_error(ErrorKind::Other,
				  "cannot finish " + partial_ + ": SQLite kept journal mode '" + mode +
					  "' (is another process reading it?)");
	int rc = sqlite3_close(db_.get());
	if (rc != SQLITE_OK)
		return with_context(sqlite_error(nullptr, rc), "cannot close " + partial_ + ": ");
	(void)db_.release(); // closed above
	std::remove((partial_ + kReserveSuffix).c_str());
	if (!in_place_ && std::rename(partial_.c_str(), path_.c_str()) != 0) {
		// Keep the complete data rather than deleting it with the writer.
		std::string kept = std::exchange(partial_, {});
		return errno_error(errno, "cannot rename " + kept + " to " + path_,
				   "; the recording is kept at " + kept);
	}
	partial_.clear();
	return {};
}

Result<std::string> StoreWriter::keep_incomplete(const std::string &why)
{
	if (auto r = ready(); !r)
		return r.error();
	// Each step may fail on a full disk; what was committed stays either way.
	std::remove((partial_ + kReserveSuffix).c_str()); // the room for what follows
	(void)commit();
	(void)set_meta("incomplete", why);
	statements_.clear();
	(void)exec("PRAGMA wal_checkpoint(TRUNCATE)");
	db_.reset(); // the last connection: SQLite folds the WAL in if it can
	std::string kept = std::exchange(partial_, {});
	if (in_place_)
		return kept;
	std::remove((kept + "-shm").c_str()); // rebuilt from the WAL by the next reader
	if (std::rename(kept.c_str(), path_.c_str()) != 0)
		return errno_error(errno, "cannot rename " + kept + " to " + path_,
				   "; the recording so far is kept at " + kept);
	// A WAL the checkpoint could not fold in holds committed batches: it
	// must sit beside the file under its new name, or they are lost.
	std::remove((path_ + "-wal").c_str());
	std::rename((kept + "-wal").c_str(), (path_ + "-wal").c_str());
	return path_;
}

// Opens a recording and checks that it is one this eacgm reads.
static Result<DbHandle> open_recording(const std::string &path, int flags);

Result<DbHandle> open_recording_read_only(const std::string &path)
{
	return open_recording(path, SQLITE_OPEN_READONLY);
}

static Result<DbHandle> open_recording(const std::string &path, int flags)
{
	struct stat sb;
	if (stat(path.c_str(), &sb) != 0)
		return errno_error(errno, "cannot open recording " + path,
				   "; check the path, or record one with `eacgm record -o " + path + " -- CMD`");
	if (S_ISDIR(sb.st_mode))
		return make_error(ErrorKind::BadInput,
				  "cannot open recording " + path + ": it is a directory; give the .db file");

	sqlite3 *raw = nullptr;
	int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
	DbHandle db(raw);
	if (rc != SQLITE_OK)
		return with_context(sqlite_error(raw, rc), "cannot open recording " + path + ": ");

	// SQLite opens any file lazily; the first query tells what it really is.
	auto ver = prepare(db.get(), "SELECT value FROM meta WHERE key = 'schema_version'");
	if (!ver) {
		if (sqlite3_errcode(db.get()) == SQLITE_NOTADB)
			return make_error(ErrorKind::BadInput,
					  path +
						  " is not an eacgm recording: it is not a SQLite "
						  "database; give the file written by `eacgm record -o`");
		if (!has_table(db.get(), "meta"))
			return make_error(ErrorKind::BadInput,
					  path +
						  " is a SQLite database but not an eacgm recording "
						  "(it has no meta table); give the file written by "
						  "`eacgm record -o`");
		return with_context(ver.error(), "cannot read recording " + path + ": ");
	}
	if (sqlite3_step(ver->get()) != SQLITE_ROW)
		return make_error(ErrorKind::BadInput,
				  path +
					  " is a SQLite database but not an eacgm recording (no "
					  "schema_version in its meta table)");
	std::string version = col_text(ver->get(), 0);
	if (version != std::to_string(kSchemaVersion) && version != std::to_string(kOldestSchemaVersion))
		return make_error(ErrorKind::BadInput,
				  "recording " + path + " has schema version " + version +
					  ", this eacgm reads versions " + std::to_string(kOldestSchemaVersion) +
					  " and " + std::to_string(kSchemaVersion) +
					  "; use the eacgm release that recorded it");
	if (auto r = register_span_module(db.get()); !r)
		return r.error();

	return db;
}

Result<RecordingReader> RecordingReader::open(const std::string &path)
{
	auto db = open_recording(path, SQLITE_OPEN_READONLY);
	if (!db)
		return db.error();
	RecordingReader reader;
	reader.path_ = path;
	reader.db_ = std::move(*db);
	auto st = prepare(reader.db_.get(), "SELECT value FROM meta WHERE key = 'schema_version'");
	if (st && sqlite3_step(st->get()) == SQLITE_ROW)
		reader.version_ = std::atoi(col_text(st->get(), 0).c_str());
	return reader;
}

template <class F>
Result<void> RecordingReader::rows(const char *sql, F fn) const
{
	if (auto r = each_row(db_.get(), sql, fn); !r)
		return with_context(r.error(), "recording " + path_ + " is damaged: ");
	return {};
}

Result<void> RecordingReader::read_meta(Recording &rec) const
{
	return rows("SELECT key, value FROM meta", [&](sqlite3_stmt *st) -> Result<void> {
		std::string key = col_text(st, 0), value = col_text(st, 1);
		if (key == "wall_offset_ns") {
			auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), rec.wall_offset_ns);
			if (ec != std::errc() || end != value.data() + value.size())
				return make_error(ErrorKind::BadInput,
						  "wall_offset_ns '" + value + "' is not an integer");
		} else if (!is_reserved_meta(key)) {
			rec.meta[key] = value;
		}
		return {};
	});
}

Result<void> RecordingReader::read_tasks(Recording &rec) const
{
	auto r = rows("SELECT pid, ppid, comm, cmdline, start_ns, end_ns, exit_code FROM processes ORDER BY pid",
		      [&](sqlite3_stmt *st) -> Result<void> {
			      rec.processes.push_back(Process{
				      .pid = static_cast<uint32_t>(col_int(st, 0)),
				      .ppid = static_cast<uint32_t>(col_int(st, 1)),
				      .comm = col_text(st, 2),
				      .cmdline = col_text(st, 3),
				      .start_ns = static_cast<uint64_t>(col_int(st, 4)),
				      .end_ns = static_cast<uint64_t>(col_int(st, 5)),
				      .exit_code = static_cast<int>(col_int(st, 6)),
			      });
			      return {};
		      });
	if (!r)
		return r;
	return rows("SELECT pid, tid, name FROM threads ORDER BY pid, tid", [&](sqlite3_stmt *st) -> Result<void> {
		rec.threads.push_back(Thread{
			.pid = static_cast<uint32_t>(col_int(st, 0)),
			.tid = static_cast<uint32_t>(col_int(st, 1)),
			.name = col_text(st, 2),
		});
		return {};
	});
}

// The stack of a row: a few distinct stacks stand behind many calls, so
// each is parsed once and shared by its spans (PyStack), as when they were
// recorded.
static Result<PyStack> row_stack(std::unordered_map<std::string, PyStack> &stacks, std::string text)
{
	auto [it, fresh] = stacks.try_emplace(std::move(text));
	if (fresh) {
		auto stack = nlohmann::json::parse(it->first, nullptr, false);
		if (!stack.is_array() ||
		    !std::all_of(stack.begin(), stack.end(), [](auto &f) { return f.is_string(); })) {
			std::string bad = it->first;
			stacks.erase(it);
			return make_error(ErrorKind::BadInput, "span py_stack is not a JSON array of strings: " + bad);
		}
		it->second = PyStack(stack.get<std::vector<std::string>>());
	}
	return it->second;
}

// The columns a span is made of (RecordingReader::spans), in its order.
#define SPAN_COLUMNS "SELECT pid, tid, layer, name, start_ns, dur_ns, depth, ret, ret_name, bytes, args, py_stack"

// by_thread is how a trace nests spans (see perfetto.h): the
// spans_by_thread index of version 3 gives that order but for ties; version
// 4's blocks are read in that order by read_spans_by_thread.
static const char *span_query(SpanOrder order)
{
	switch (order) {
	case SpanOrder::as_recorded: return SPAN_COLUMNS " FROM spans ORDER BY id";
	case SpanOrder::by_start: return SPAN_COLUMNS " FROM spans ORDER BY start_ns, id";
	case SpanOrder::by_thread: break;
	}
	return SPAN_COLUMNS " FROM spans ORDER BY pid, tid, start_ns, dur_ns DESC, depth, id";
}

template <class F>
Result<void> RecordingReader::spans(const char *sql, F take) const
{
	std::unordered_map<std::string, PyStack> stacks;
	return rows(sql, [&](sqlite3_stmt *st) -> Result<void> {
		std::string args = col_text(st, 10);
		Span s{
			.start_ns = static_cast<uint64_t>(col_int(st, 4)),
			.dur_ns = static_cast<uint64_t>(col_int(st, 5)),
			.pid = static_cast<uint32_t>(col_int(st, 0)),
			.tid = static_cast<uint32_t>(col_int(st, 1)),
			.depth = static_cast<uint32_t>(col_int(st, 6)),
			.layer = col_text(st, 2),
			.name = col_text(st, 3),
			.ret = col_int(st, 7),
			.ret_name = col_text(st, 8),
			.bytes = static_cast<uint64_t>(col_int(st, 9)),
			.args = args.empty() ? nlohmann::json::object() : nlohmann::json::parse(args, nullptr, false),
		};
		if (s.args.is_discarded())
			return make_error(ErrorKind::BadInput, "span args are not valid JSON: " + args);
		if (std::string py = col_text(st, 11); !py.empty()) {
			auto stack = row_stack(stacks, std::move(py));
			if (!stack)
				return stack.error();
			s.py_stack = *stack;
		}
		take(std::move(s));
		return {};
	});
}

// A schema 4 file's spans from its blocks (block_reader.h): in id order, of
// the functions keep accepts; by start time, sorted in memory as SQLite
// would (ties by id); by thread, in parts of bounded size
// (read_spans_by_thread). keep: in id order only (null otherwise).
Result<void> RecordingReader::from_blocks(SpanOrder order, const std::function<bool(const SpanFunction &)> &keep,
					  const SpanTake &take) const
{
	std::vector<Span> all;
	auto r = order == SpanOrder::by_thread ? read_spans_by_thread(db_.get(), take)
					       : read_span_blocks(db_.get(), keep, [&](Span &&s) {
							 if (order == SpanOrder::by_start)
								 all.push_back(std::move(s));
							 else
								 take(std::move(s));
						 });
	if (!r)
		return with_context(r.error(), "recording " + path_ + " is damaged: ");
	std::stable_sort(all.begin(), all.end(), [](const Span &a, const Span &b) { return a.start_ns < b.start_ns; });
	for (Span &s : all)
		take(std::move(s));
	return {};
}

Result<void> RecordingReader::take_spans(SpanOrder order, const SpanTake &take) const
{
	if (version_ >= 4)
		return from_blocks(order, nullptr, take);
	return spans(span_query(order), take);
}

Result<void> RecordingReader::each_span(SpanOrder order, const SpanVisit &visit) const
{
	return take_spans(order, [&](Span &&s) { visit(s); });
}

Result<void> RecordingReader::each_span_with_int_args(const std::vector<std::string> &keys,
						      const SpanVisit &visit) const
{
	// Spliced into a query's text below: only a plain name may be, in
	// either layout.
	for (const std::string &k : keys)
		if (k.empty() ||
		    !std::all_of(k.begin(), k.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; }))
			return make_error(ErrorKind::BadInput, "not an argument name: '" + k + "'");
	if (version_ >= 4) // a function's argument list says which of its spans have them
		return from_blocks(
			SpanOrder::as_recorded,
			[&](const SpanFunction &f) {
				return std::all_of(keys.begin(), keys.end(), [&](const std::string &k) {
					return std::any_of(f.args.begin(), f.args.end(), [&](const ArgDef &a) {
						return a.key == k &&
							(a.kind == ArgKind::Int || a.kind == ArgKind::Uint);
					});
				});
			},
			[&](Span &&s) { visit(s); });
	// A damaged args text is not a match (the full reading reports it):
	// SQLite's AND need not skip json_type on it, CASE does.
	std::string sql = SPAN_COLUMNS " FROM spans WHERE 1";
	for (const std::string &k : keys)
		sql += " AND CASE WHEN json_valid(args) THEN json_type(args, '$." + k + "') END = 'integer'";
	return spans((sql + " ORDER BY id").c_str(), [&](Span &&s) { visit(s); });
}
#undef SPAN_COLUMNS

Result<void> RecordingReader::read_measures(Recording &rec) const
{
	auto r = rows("SELECT ts_ns, layer, name, key, pid, value FROM metrics ORDER BY ts_ns, rowid",
		      [&](sqlite3_stmt *st) -> Result<void> {
			      rec.metrics.push_back(Metric{
				      .ts_ns = static_cast<uint64_t>(col_int(st, 0)),
				      .layer = col_text(st, 1),
				      .name = col_text(st, 2),
				      .key = col_text(st, 3),
				      .pid = static_cast<uint32_t>(col_int(st, 4)),
				      .value = sqlite3_column_double(st, 5),
			      });
			      return {};
		      });
	if (!r)
		return r;
	r = rows("SELECT ts_ns, layer, name, key, pid, tid, args FROM events ORDER BY ts_ns, rowid",
		 [&](sqlite3_stmt *st) -> Result<void> {
			 std::string args = col_text(st, 6);
			 Event e{
				 .ts_ns = static_cast<uint64_t>(col_int(st, 0)),
				 .layer = col_text(st, 1),
				 .name = col_text(st, 2),
				 .key = col_text(st, 3),
				 .pid = static_cast<uint32_t>(col_int(st, 4)),
				 .tid = static_cast<uint32_t>(col_int(st, 5)),
				 .args = args.empty() ? nlohmann::json::object()
						      : nlohmann::json::parse(args, nullptr, false),
			 };
			 if (e.args.is_discarded())
				 return make_error(ErrorKind::BadInput, "event args are not valid JSON: " + args);
			 rec.events.push_back(std::move(e));
			 return {};
		 });
	if (!r)
		return r;
	return rows("SELECT layer, reason, count FROM drops ORDER BY rowid", [&](sqlite3_stmt *st) -> Result<void> {
		rec.drops.push_back(Drop{
			.layer = col_text(st, 0),
			.reason = col_text(st, 1),
			.count = static_cast<uint64_t>(col_int(st, 2)),
		});
		return {};
	});
}

// Whether a recording's anomalies table has detected_ns: recordings made
// before the live detector's flags were timed do not (they read 0).
static bool anomalies_timed(sqlite3 *db)
{
	auto st = prepare(db, "SELECT count(*) FROM pragma_table_info('anomalies') WHERE name = 'detected_ns'");
	return st && sqlite3_step(st->get()) == SQLITE_ROW && sqlite3_column_int(st->get(), 0) == 1;
}

Result<void> RecordingReader::read_anomalies(Recording &rec) const
{
	return rows(anomalies_timed(db_.get())
			    ? "SELECT ts_ns, dur_ns, pid, tid, layer, name, score, threshold, features, causes,"
			      " detected_ns FROM anomalies ORDER BY ts_ns, rowid"
			    : "SELECT ts_ns, dur_ns, pid, tid, layer, name, score, threshold, features, causes,"
			      " 0 FROM anomalies ORDER BY ts_ns, rowid",
		    [&](sqlite3_stmt *st) -> Result<void> {
			    Anomaly a{
				    .ts_ns = static_cast<uint64_t>(col_int(st, 0)),
				    .dur_ns = static_cast<uint64_t>(col_int(st, 1)),
				    .pid = static_cast<uint32_t>(col_int(st, 2)),
				    .tid = static_cast<uint32_t>(col_int(st, 3)),
				    .layer = col_text(st, 4),
				    .name = col_text(st, 5),
				    .score = sqlite3_column_double(st, 6),
				    .threshold = sqlite3_column_double(st, 7),
				    .features = nlohmann::json::parse(col_text(st, 8), nullptr, false),
				    .causes = nlohmann::json::parse(col_text(st, 9), nullptr, false),
				    .detected_ns = static_cast<uint64_t>(col_int(st, 10)),
			    };
			    if (!a.features.is_object() || !a.causes.is_array())
				    return make_error(ErrorKind::BadInput,
						      "anomaly features or causes are not valid JSON");
			    rec.anomalies.push_back(std::move(a));
			    return {};
		    });
}

Result<Recording> RecordingReader::read(bool with_spans) const
{
	Recording rec;
	for (auto part : {&RecordingReader::read_meta, &RecordingReader::read_tasks, &RecordingReader::read_measures,
			  &RecordingReader::read_anomalies})
		if (auto r = (this->*part)(rec); !r)
			return r.error();
	if (with_spans)
		if (auto r = take_spans(SpanOrder::by_start, [&](Span &&s) { rec.spans.push_back(std::move(s)); }); !r)
			return r.error();
	return rec;
}

Result<Recording> load_recording(const std::string &path)
{
	auto reader = RecordingReader::open(path);
	if (!reader)
		return reader.error();
	return reader->read(true);
}

Result<void> replace_anomalies(const std::string &path, const std::vector<Anomaly> &anomalies)
{
	// Only a recording of this version is written to.
	auto opened = open_recording(path, SQLITE_OPEN_READWRITE);
	if (!opened)
		return opened.error();
	DbHandle db = std::move(*opened);
	auto fail = [&](const Error &e) {
		(void)sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
		return with_context(e, "cannot write anomalies to " + path + ": ",
				    "; check that the file is writable (or pass --no-store)");
	};
	int rc;
	sqlite3_busy_timeout(db.get(), 5000);
	if (sqlite3_exec(db.get(), "BEGIN IMMEDIATE; DELETE FROM anomalies;", nullptr, nullptr, nullptr) != SQLITE_OK)
		return fail(sqlite_error(db.get()));
	if (!anomalies_timed(db.get()) &&
	    sqlite3_exec(db.get(), "ALTER TABLE anomalies ADD COLUMN detected_ns INTEGER", nullptr, nullptr, nullptr) !=
		    SQLITE_OK)
		return fail(sqlite_error(db.get()));
	auto st = prepare(db.get(), kInsertAnomaly);
	if (!st)
		return fail(st.error());
	for (const Anomaly &a : anomalies) {
		bind_anomaly(st->get(), a);
		rc = sqlite3_step(st->get());
		sqlite3_reset(st->get());
		if (rc != SQLITE_DONE)
			return fail(sqlite_error(db.get()));
	}
	if (sqlite3_exec(db.get(), "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK)
		return fail(sqlite_error(db.get()));
	return {};
}

} // namespace eacgm
