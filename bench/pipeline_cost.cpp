// Records per second through eacgm's user-space pipeline on one core: the
// decode of a raw span record (name, arguments, return, bytes) and the
// store (schema 4: a compressed block per batch of 4,096, as the recorder
// writes them, docs/store.md).
// Fed with cudaMemcpy records of the built-in CUDA spec (four arguments:
// the decode does its real work), so no ring buffer or kernel is involved:
// this is the rate at which user space could keep up with the probes.
// Usage: bench_pipeline_cost [RECORDS (1,000,000)]
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "eacgm/abi/events.h"
#include "ingest/decode.h"
#include "probe/spec.h"
#include "store/store.h"

using namespace eacgm;
using clk = std::chrono::steady_clock;

static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// SQLite alone, as a ceiling for any store that keeps a row per span:
// schema 3's table (a row per span, as recordings had it before the
// blocks), the writer's pragmas and batches, one fixed row of the same
// values bound once, no eacgm code between the inserts. M rows/s; < 0 on
// error.
static double sqlite_ceiling(size_t n, size_t batch)
{
	const std::string path = "/tmp/eacgm-ceiling-" + std::to_string(getpid()) + ".db";
	unlink(path.c_str());
	sqlite3 *db = nullptr;
	sqlite3_stmt *st = nullptr;
	double rate = -1;
	const char *args = R"({"count":4096,"dst":"0x7f0000001000","kind":1,"src":"0x7f0000002000"})";
	if (sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
	    sqlite3_exec(
		    db,
		    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
		    "CREATE TABLE span_rows(id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, layer TEXT, name TEXT,"
		    " start_ns INTEGER, dur_ns INTEGER, depth INTEGER, ret INTEGER, ret_name TEXT, bytes INTEGER,"
		    " args TEXT, stack INTEGER)",
		    nullptr, nullptr, nullptr) == SQLITE_OK &&
	    sqlite3_prepare_v2(db,
			       "INSERT INTO span_rows(pid, tid, layer, name, start_ns, dur_ns, depth, ret, ret_name,"
			       " bytes, args, stack) VALUES(42, 42, 'cuda', 'cudaMemcpy', ?, 700, 0, 0, 'cudaSuccess', "
			       "4096, ?, NULL)",
			       -1, &st, nullptr) == SQLITE_OK) {
		sqlite3_bind_text(st, 2, args, -1, SQLITE_STATIC);
		auto t0 = clk::now();
		for (size_t done = 0; done < n; done += batch) {
			sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
			for (size_t i = 0; i < batch; i++) {
				sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(done + i));
				sqlite3_step(st);
				sqlite3_reset(st);
			}
			sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
		}
		rate = double((n + batch - 1) / batch * batch) / secs(t0, clk::now()) / 1e6;
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	for (const char *side : {"", "-wal", "-shm"})
		unlink((path + side).c_str());
	return rate;
}

// The most rows SQLite inserts a second on this machine, whatever a row
// holds: one integer column, an in-memory database (no file, no journal), one
// transaction, a prepared statement. No store that keeps a SQLite row per
// span can be faster than this. M rows/s; < 0 on error.
static double sqlite_floor(size_t n)
{
	sqlite3 *db = nullptr;
	sqlite3_stmt *st = nullptr;
	double rate = -1;
	if (sqlite3_open(":memory:", &db) == SQLITE_OK &&
	    sqlite3_exec(db, "CREATE TABLE t(v INTEGER); BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?)", -1, &st, nullptr) == SQLITE_OK) {
		auto t0 = clk::now();
		for (size_t i = 0; i < n; i++) {
			sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(i));
			if (sqlite3_step(st) != SQLITE_DONE)
				break;
			sqlite3_reset(st);
		}
		if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK)
			rate = double(n) / secs(t0, clk::now()) / 1e6;
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rate;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1'000'000;
	auto specs = load_builtin_spec("cuda");
	if (!specs) {
		fprintf(stderr, "bench_pipeline_cost: %s\n", specs.error().message.c_str());
		return 1;
	}
	uint32_t id = 0;
	while (id < specs->probes.size() && specs->probes[id].function != "cudaMemcpy")
		id++;
	if (id == specs->probes.size()) {
		fprintf(stderr, "bench_pipeline_cost: no cudaMemcpy in the CUDA spec\n");
		return 1;
	}
	std::vector<eacgm_span_event> raw(4096);
	for (size_t i = 0; i < raw.size(); i++)
		raw[i] = {.start_ns = 1'000'000 + i * 1000,
			  .dur_ns = 700,
			  .tgid = 42,
			  .tid = 42,
			  .spec_id = id,
			  .args = {0x7f0000001000, 0x7f0000002000, 4096 + i, 1}};
	std::string path = "/tmp/eacgm-pipeline-" + std::to_string(getpid()) + ".db";
	auto store = StoreWriter::create(path);
	if (!store) {
		fprintf(stderr, "bench_pipeline_cost: %s\n", store.error().message.c_str());
		return 1;
	}
	double decode_s = 0, store_s = 0;
	Interner names;
	std::vector<Span> batch;
	for (size_t done = 0; done < n; done += raw.size()) {
		auto t0 = clk::now();
		batch.clear();
		for (const auto &e : raw)
			batch.push_back(decode_span(e, specs->probes[id], *specs, nullptr, names));
		auto t1 = clk::now();
		if (auto r = store->add_spans(batch); !r) {
			fprintf(stderr, "bench_pipeline_cost: %s\n", r.error().message.c_str());
			return 1;
		}
		store_s += secs(t1, clk::now());
		decode_s += secs(t0, t1);
	}
	(void)store->finish();
	// The typed decode alone (pipeline/span.h): the fields, no text, into a
	// reused batch, as the span path is to carry them.
	std::vector<TypedSpan> typed(raw.size());
	auto t0 = clk::now();
	for (size_t done = 0; done < n; done += raw.size())
		for (size_t i = 0; i < raw.size(); i++)
			typed[i] = decode_typed(raw[i], specs->probes[id], *specs, nullptr, names);
	const double typed_s = secs(t0, clk::now());
	size_t total = (n + raw.size() - 1) / raw.size() * raw.size();
	long size = 0;
	if (FILE *f = fopen(path.c_str(), "rb")) {
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		fclose(f);
	}
	unlink(path.c_str());
	printf("user-space pipeline, one core, %zu cudaMemcpy records (4 arguments), batches of %zu:\n", total,
	       raw.size());
	printf("  decode            %8.2f M records/s\n", total / decode_s / 1e6);
	printf("  typed decode      %8.2f M records/s  (no text: the typed span, %zu bytes)\n", total / typed_s / 1e6,
	       sizeof(TypedSpan));
	printf("  store (blocks)    %8.2f M records/s  (%.1f bytes a span on disk; each span's args still\n"
	       "                                        taken apart from its JSON: the typed path is to end that)\n",
	       total / store_s / 1e6, double(size) / double(total));
	printf("  decode + store    %8.2f M records/s  (target 5)\n", total / (decode_s + store_s) / 1e6);
	printf("  SQLite alone      %8.2f M rows/s     (schema 3's row bound once, inserted in the same batches:\n"
	       "                                        the ceiling of a store that keeps a SQLite row per span)\n",
	       sqlite_ceiling(total, raw.size()));
	printf("  SQLite's floor    %8.2f M rows/s     (one integer column, in memory, one transaction: the most\n"
	       "                                        rows SQLite inserts here, whatever a row holds)\n",
	       sqlite_floor(total));
	return 0;
}
