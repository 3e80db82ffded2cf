// SPDX-License-Identifier: Apache-2.0
// The eacgm_spans and eacgm_metrics virtual tables (sqlmod.h). A scan walks
// the blocks in order (ids count up block after block), decodes each block
// once and hands out its rows; names, strings, stacks and series are looked
// up by id and kept for the statement. Constraints on the id (rowid) and the
// time skip the blocks outside them, and ORDER BY id costs nothing (it is
// the scan's order); SQLite checks every constraint again, so skipping only
// has to be safe.
#ifdef EACGM_SQL_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
#else
#include <sqlite3.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "store/sqlmod.h"
#include "store/span_layout.h"

namespace eacgm {

namespace {

enum VCol { vId, vPid, vTid, vLayer, vName, vStart, vDur, vDepth, vRet, vRetName, vBytes, vArgs, vStack, vStackId };
enum MCol { mTs, mLayer, mName, mKey, mPid, mValue };

struct Cursor;

// What tells the two tables apart.
struct Kind {
	const char *name; // the module's, for messages
	const char *declare;
	const char *blocks_sql;         // ?1-?2: the id range, ?3-?4: the time range
	int id_col;                     // the table's column that is the block's id (-1: the rowid only)
	int time_col;                   // the table's column of the blocks' min/max times
	size_t block_id, block_columns; // the block's id column; the fewest columns a block has
	int (*column)(Cursor *c, sqlite3_context *ctx, int col);
};

int span_column(Cursor *c, sqlite3_context *ctx, int col);
int metric_column(Cursor *c, sqlite3_context *ctx, int col);

const Kind kSpans = {"eacgm_spans",
		     "CREATE TABLE x(id INTEGER, pid INTEGER, tid INTEGER, layer TEXT, name TEXT, start_ns INTEGER,"
		     " dur_ns INTEGER, depth INTEGER, ret INTEGER, ret_name TEXT, bytes INTEGER, args TEXT,"
		     " py_stack TEXT, stack INTEGER HIDDEN)", // stacks.id, for copies that keep stacks apart
		     "SELECT data FROM span_blocks WHERE first_id + n > ?1 AND first_id <= ?2"
		     " AND max_start >= ?3 AND min_start <= ?4 ORDER BY id",
		     vId,
		     vStart,
		     kColId,
		     kColSlot0,
		     span_column};
const Kind kMetrics = {"eacgm_metrics",
		       "CREATE TABLE x(ts_ns INTEGER, layer TEXT, name TEXT, key TEXT, pid INTEGER, value REAL)",
		       "SELECT data FROM metric_blocks WHERE first_id + n > ?1 AND first_id <= ?2"
		       " AND max_ts >= ?3 AND min_ts <= ?4 ORDER BY id",
		       -1,
		       mTs,
		       kMetId,
		       kMetColumns,
		       metric_column};

struct Table : sqlite3_vtab {
	sqlite3 *db = nullptr;
	const Kind *kind = nullptr;
};

struct Series {
	std::string layer, name, key;
	int64_t pid = 0;
};

// One statement that looks a row's text up by id, and what it found.
class Lookup : public StringSource {
public:
	Lookup(sqlite3 *db, const char *sql) { sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
	~Lookup() override { sqlite3_finalize(st_); }
	// "" for id 0 (none); an id with no row is noted (take_missing).
	const std::string &text(uint64_t id) override
	{
		static const std::string none;
		if (!id)
			return none;
		if (auto it = texts_.find(id); it != texts_.end())
			return it->second;
		bool found = false;
		std::string t;
		if (st_) {
			sqlite3_bind_int64(st_, 1, static_cast<sqlite3_int64>(id));
			if ((found = sqlite3_step(st_) == SQLITE_ROW))
				t.assign(reinterpret_cast<const char *>(sqlite3_column_text(st_, 0)),
					 sqlite3_column_bytes(st_, 0));
			sqlite3_reset(st_);
		}
		if (!found) {
			missing_ = true;
			return none;
		}
		return texts_.emplace(id, std::move(t)).first->second;
	}
	// Whether a text looked up since the last call had no row.
	bool take_missing() { return std::exchange(missing_, false); }

private:
	sqlite3_stmt *st_ = nullptr;
	std::unordered_map<uint64_t, std::string> texts_;
	bool missing_ = false;
};

struct Cursor : sqlite3_vtab_cursor {
	Cursor(sqlite3 *db, const Kind &k)
		: kind(k), strings(db, "SELECT text FROM strings WHERE id = ?"),
		  stacks(db, "SELECT frames FROM stacks WHERE id = ?")
	{
		sqlite3_prepare_v2(db, kind.blocks_sql, -1, &blocks, nullptr);
		sqlite3_prepare_v2(db,
				   &kind == &kSpans ? "SELECT layer, name, args FROM functions WHERE id = ?"
						    : "SELECT layer, name, key, pid FROM series WHERE id = ?",
				   -1, &fn_st, nullptr);
	}
	~Cursor()
	{
		sqlite3_finalize(blocks);
		sqlite3_finalize(fn_st);
	}
	const Kind &kind;
	sqlite3_stmt *blocks = nullptr, *fn_st = nullptr; // fn_st: functions or series by id
	BlockDecoder dec;
	Columns cols;
	size_t row = 0;
	bool eof = true;
	int64_t id_lo = 0, id_hi = INT64_MAX;
	Lookup strings, stacks;
	std::unordered_map<uint64_t, SpanFunction> fns;
	std::unordered_map<uint64_t, Series> series;
	std::string buf;
	uint64_t id() const { return cols[kind.block_id][row]; }
	size_t rows() const { return cols.empty() ? 0 : cols[kind.block_id].size(); }
};

int set_error(sqlite3_vtab_cursor *c, const std::string &m)
{
	sqlite3_free(c->pVtab->zErrMsg);
	c->pVtab->zErrMsg = sqlite3_mprintf("%s", m.c_str());
	return SQLITE_CORRUPT;
}

int connect(sqlite3 *db, void *kind, int, const char *const *, sqlite3_vtab **out, char **err)
{
	const auto *k = static_cast<const Kind *>(kind);
	if (int rc = sqlite3_declare_vtab(db, k->declare); rc != SQLITE_OK) {
		*err = sqlite3_mprintf("%s: %s", k->name, sqlite3_errmsg(db));
		return rc;
	}
	auto *t = new Table();
	t->db = db;
	t->kind = k;
	*out = t;
	return SQLITE_OK;
}

int disconnect(sqlite3_vtab *v)
{
	delete static_cast<Table *>(v);
	return SQLITE_OK;
}

// Constraints on id and start_ns that skip blocks: idxStr holds a column
// letter ('i', 's') and an operator ('=', '>', 'g' >=, '<', 'l' <=) for each
// argument xFilter gets, in order.
int best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
	const Kind &k = *static_cast<Table *>(v)->kind;
	std::string plan;
	int arg = 0;
	for (int i = 0; i < info->nConstraint; i++) {
		const auto &c = info->aConstraint[i];
		const bool id = c.iColumn == k.id_col || c.iColumn == -1; // -1: the rowid, which is the id
		if (!c.usable || (!id && c.iColumn != k.time_col))
			continue;
		char op = c.op == SQLITE_INDEX_CONSTRAINT_EQ ? '='
			: c.op == SQLITE_INDEX_CONSTRAINT_GT ? '>'
			: c.op == SQLITE_INDEX_CONSTRAINT_GE ? 'g'
			: c.op == SQLITE_INDEX_CONSTRAINT_LT ? '<'
			: c.op == SQLITE_INDEX_CONSTRAINT_LE ? 'l'
							     : 0;
		if (!op)
			continue;
		plan += id ? 'i' : 's';
		plan += op;
		info->aConstraintUsage[i].argvIndex = ++arg;
	}
	info->idxStr = sqlite3_mprintf("%s", plan.c_str());
	info->needToFreeIdxStr = 1;
	info->estimatedCost = plan.find("i=") != std::string::npos ? 10 : 1e6 / (1 + double(plan.size()));
	const int by = info->nOrderBy == 1 ? info->aOrderBy[0].iColumn : -2;
	if ((by == k.id_col || by == -1) && !info->aOrderBy[0].desc)
		info->orderByConsumed = 1;
	return SQLITE_OK;
}

int open_cursor(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
	*out = new Cursor(static_cast<Table *>(v)->db, *static_cast<Table *>(v)->kind);
	return SQLITE_OK;
}

int close_cursor(sqlite3_vtab_cursor *c)
{
	delete static_cast<Cursor *>(c);
	return SQLITE_OK;
}

// Moves to the next block holding rows in the id range; eof past the last.
int next_block(Cursor *c)
{
	for (;;) {
		int rc = sqlite3_step(c->blocks);
		if (rc == SQLITE_DONE) {
			c->eof = true;
			return SQLITE_OK;
		}
		if (rc != SQLITE_ROW)
			return set_error(c,
					 std::string("cannot read span_blocks: ") +
						 sqlite3_errmsg(static_cast<Table *>(c->pVtab)->db));
		std::string_view blob(static_cast<const char *>(sqlite3_column_blob(c->blocks, 0)),
				      sqlite3_column_bytes(c->blocks, 0));
		auto r = c->dec.decode(blob, c->cols);
		if (!r)
			return set_error(c, r.error().message);
		if (c->cols.size() < c->kind.block_columns)
			return set_error(c, "not a valid span block: " + std::to_string(c->cols.size()) + " columns");
		for (c->row = 0; c->row < c->rows(); c->row++)
			if (int64_t(c->id()) >= c->id_lo)
				return SQLITE_OK;
	}
}

int next(sqlite3_vtab_cursor *vc)
{
	auto *c = static_cast<Cursor *>(vc);
	if (++c->row < c->rows())
		return SQLITE_OK;
	return next_block(c);
}

int filter(sqlite3_vtab_cursor *vc, int, const char *plan, int argc, sqlite3_value **argv)
{
	auto *c = static_cast<Cursor *>(vc);
	int64_t s_lo = INT64_MIN, s_hi = INT64_MAX;
	c->id_lo = INT64_MIN;
	c->id_hi = INT64_MAX;
	for (int i = 0; plan && plan[2 * i] && i < argc; i++) {
		if (sqlite3_value_numeric_type(argv[i]) != SQLITE_INTEGER)
			continue; // a bound that is no integer skips nothing; SQLite compares it
		const int64_t v = sqlite3_value_int64(argv[i]);
		int64_t &lo = plan[2 * i] == 'i' ? c->id_lo : s_lo;
		int64_t &hi = plan[2 * i] == 'i' ? c->id_hi : s_hi;
		switch (plan[2 * i + 1]) {
		case '=': lo = std::max(lo, v), hi = std::min(hi, v); break;
		case '>': lo = std::max(lo, v == INT64_MAX ? v : v + 1); break;
		case 'g': lo = std::max(lo, v); break;
		case '<': hi = std::min(hi, v == INT64_MIN ? v : v - 1); break;
		case 'l': hi = std::min(hi, v); break;
		}
	}
	sqlite3_reset(c->blocks);
	sqlite3_bind_int64(c->blocks, 1, c->id_lo);
	sqlite3_bind_int64(c->blocks, 2, c->id_hi);
	sqlite3_bind_int64(c->blocks, 3, s_lo);
	sqlite3_bind_int64(c->blocks, 4, s_hi);
	c->eof = false;
	c->cols.clear();
	return next_block(c);
}

int eof(sqlite3_vtab_cursor *vc)
{
	auto *c = static_cast<Cursor *>(vc);
	return c->eof || int64_t(c->id()) > c->id_hi;
}

const SpanFunction *function_of(Cursor *c, uint64_t id)
{
	if (auto it = c->fns.find(id); it != c->fns.end())
		return &it->second;
	sqlite3_bind_int64(c->fn_st, 1, static_cast<sqlite3_int64>(id));
	const SpanFunction *out = nullptr;
	if (sqlite3_step(c->fn_st) == SQLITE_ROW) {
		auto text = [&](int i) {
			const char *p = reinterpret_cast<const char *>(sqlite3_column_text(c->fn_st, i));
			return std::string(p ? p : "", sqlite3_column_bytes(c->fn_st, i));
		};
		if (auto f = parse_function(text(0), text(1), text(2)))
			out = &c->fns.emplace(id, std::move(*f)).first->second;
	}
	sqlite3_reset(c->fn_st);
	return out;
}

// A span that refers to a row the file does not hold (damaged, or written
// by hand): an error, never a row with a blank made up.
int missing(sqlite3_context *ctx, const char *what)
{
	const std::string m = std::string("eacgm_spans: a span names ") + what + " the recording does not hold";
	sqlite3_result_error(ctx, m.c_str(), -1);
	return SQLITE_CORRUPT;
}

void result_text(sqlite3_context *ctx, const std::string &s)
{
	sqlite3_result_text(ctx, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

int column(sqlite3_vtab_cursor *vc, sqlite3_context *ctx, int col)
{
	auto *c = static_cast<Cursor *>(vc);
	return c->kind.column(c, ctx, col);
}

const Series *series_of(Cursor *c, uint64_t id)
{
	if (auto it = c->series.find(id); it != c->series.end())
		return &it->second;
	sqlite3_bind_int64(c->fn_st, 1, static_cast<sqlite3_int64>(id));
	const Series *out = nullptr;
	if (sqlite3_step(c->fn_st) == SQLITE_ROW) {
		auto text = [&](int i) {
			const char *p = reinterpret_cast<const char *>(sqlite3_column_text(c->fn_st, i));
			return std::string(p ? p : "", sqlite3_column_bytes(c->fn_st, i));
		};
		out = &c->series.emplace(id, Series{text(0), text(1), text(2), sqlite3_column_int64(c->fn_st, 3)})
			       .first->second;
	}
	sqlite3_reset(c->fn_st);
	return out;
}

int metric_column(Cursor *c, sqlite3_context *ctx, int col)
{
	const uint64_t *row[kMetColumns];
	for (size_t k = 0; k < kMetColumns; k++)
		row[k] = &c->cols[k][c->row];
	if (col == mTs) {
		sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(*row[kMetTs]));
		return SQLITE_OK;
	}
	if (col == mValue) {
		double v;
		std::memcpy(&v, row[kMetValue], sizeof v);
		sqlite3_result_double(ctx, v);
		return SQLITE_OK;
	}
	const Series *s = series_of(c, *row[kMetSeries]);
	if (!s)
		return missing(ctx, "a series");
	if (col == mPid)
		sqlite3_result_int64(ctx, s->pid);
	else
		result_text(ctx, col == mLayer ? s->layer : col == mName ? s->name : s->key);
	return SQLITE_OK;
}

int span_column(Cursor *c, sqlite3_context *ctx, int col)
{
	auto at = [&](SpanColumn k) { return c->cols[k][c->row]; };
	auto integer = [&](uint64_t v) { sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(v)); };
	switch (col) {
	case vId: integer(at(kColId)); break;
	case vPid: integer(at(kColPid)); break;
	case vTid: integer(at(kColTid)); break;
	case vStart: integer(at(kColStart)); break;
	case vDur: integer(at(kColDur)); break;
	case vDepth: integer(at(kColDepth)); break;
	case vRet: integer(at(kColRet)); break;
	case vBytes: integer(at(kColBytes)); break;
	case vStackId: integer(at(kColStack)); break;
	case vRetName: result_text(ctx, c->strings.text(at(kColRetName))); break;
	case vStack:
		if (at(kColStack))
			result_text(ctx, c->stacks.text(at(kColStack)));
		else
			sqlite3_result_null(ctx);
		if (c->stacks.take_missing())
			return missing(ctx, "a stack");
		break;
	case vLayer:
	case vName:
	case vArgs: {
		const SpanFunction *f = function_of(c, at(kColFn));
		if (!f || kColSlot0 + f->slots > c->cols.size()) {
			sqlite3_result_error(ctx, "eacgm_spans: a span names a function the recording does not hold",
					     -1);
			return SQLITE_CORRUPT;
		}
		if (col != vArgs) {
			result_text(ctx, col == vLayer ? f->layer : f->name);
			break;
		}
		c->buf.clear();
		render_args(*f, c->cols, c->row, c->strings, c->buf);
		result_text(ctx, c->buf);
		break;
	}
	}
	if (c->strings.take_missing())
		return missing(ctx, "a string");
	return SQLITE_OK;
}

int rowid(sqlite3_vtab_cursor *vc, sqlite3_int64 *out)
{
	auto *c = static_cast<Cursor *>(vc);
	*out = static_cast<sqlite3_int64>(c->id());
	return SQLITE_OK;
}

sqlite3_module make_module()
{
	sqlite3_module m{};
	m.iVersion = 1;
	m.xCreate = connect; // the table is the recording's span_blocks: nothing to make
	m.xConnect = connect;
	m.xBestIndex = best_index;
	m.xDisconnect = disconnect;
	m.xDestroy = disconnect; // DROP TABLE spans leaves the blocks be
	m.xOpen = open_cursor;
	m.xClose = close_cursor;
	m.xFilter = filter;
	m.xNext = next;
	m.xEof = eof;
	m.xColumn = column;
	m.xRowid = rowid;
	return m;
}

const sqlite3_module kModule = make_module();

} // namespace

Result<void> register_span_module(sqlite3 *db)
{
	for (const Kind *k : {&kSpans, &kMetrics})
		// No memory, or misuse: store/sqlite_error.cpp's kind_of_sqlite is not in the extension.
		if (int rc = sqlite3_create_module_v2(db, k->name, &kModule, const_cast<Kind *>(k), nullptr);
		    rc != SQLITE_OK)
			return make_error(rc == SQLITE_NOMEM ? ErrorKind::NoSpace : ErrorKind::Other,
					  std::string("cannot register the ") + k->name +
						  " table module: " + sqlite3_errmsg(db));
	return {};
}

} // namespace eacgm

#ifdef EACGM_SQL_EXTENSION
// sqlite3's `.load eacgm_sql` and Python's load_extension() find this by
// the file's name.
extern "C" int sqlite3_eacgmsql_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
	SQLITE_EXTENSION_INIT2(api);
	auto r = eacgm::register_span_module(db);
	if (!r) {
		*err = sqlite3_mprintf("%s", r.error().message.c_str());
		return SQLITE_ERROR;
	}
	return SQLITE_OK;
}
#endif
