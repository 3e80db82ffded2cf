// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sqlite3.h>
#include <tuple>

#include "sinks/store.h"
#include "store/sqlite_error.h"
#include "store/sqlmod.h"
#include "store/store.h"
#include "recording_writer.h"

using namespace eacgm;
namespace fs = std::filesystem;

namespace {

class StoreTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/eacgm_store_XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir = tmpl;
	}
	void TearDown() override { fs::remove_all(dir); }

	std::string file(const std::string &name) const { return (fs::path(dir) / name).string(); }

	std::string dir;
};

Recording sample()
{
	Recording r;
	r.meta = {{"command", "python3 train.py --epochs 1"}, {"version", "0.1.0"}};
	r.wall_offset_ns = 1700000000123456789;
	r.processes = {
		{.pid = 100,
		 .ppid = 1,
		 .comm = "python3",
		 .cmdline = "python3 train.py",
		 .start_ns = 1000,
		 .end_ns = 900000,
		 .exit_code = 0},
		{.pid = 200,
		 .ppid = 100,
		 .comm = "pt_worker",
		 .cmdline = "",
		 .start_ns = 5000,
		 .end_ns = 0,
		 .exit_code = -1},
	};
	r.threads = {{100, 100, "python3"}, {100, 101, "pt_autograd_0"}, {200, 200, "pt_worker"}};
	r.spans = {
		{.start_ns = 1500,
		 .dur_ns = 10000,
		 .pid = 100,
		 .tid = 100,
		 .depth = 0,
		 .layer = "torch",
		 .name = "aten::matmul",
		 .ret = 0,
		 .ret_name = "",
		 .bytes = 0,
		 .args = {{"shapes", "[[2,3],[3,4]]"}}},
		{.start_ns = 2000,
		 .dur_ns = 500,
		 .pid = 100,
		 .tid = 100,
		 .depth = 1,
		 .layer = "cuda",
		 .name = "cudaMalloc",
		 .ret = 2,
		 .ret_name = "cudaErrorMemoryAllocation",
		 .bytes = 1ULL << 40,
		 .args = {{"size", 1099511627776ULL}, {"ptr", "0x7f00deadbeef"}}},
		{.start_ns = 2600,
		 .dur_ns = 0,
		 .pid = 100,
		 .tid = 101,
		 .depth = 0,
		 .layer = "cuda",
		 .name = "cudaLaunchKernel",
		 .ret = 0,
		 .ret_name = "cudaSuccess",
		 .bytes = 0,
		 .args = {{"grid", {1, 2, 3}}, {"kernel", "gemm_µkernel"}}},
		{.start_ns = 9000,
		 .dur_ns = 123,
		 .pid = 200,
		 .tid = 200,
		 .depth = 0,
		 .layer = "nccl",
		 .name = "ncclAllReduce",
		 .ret = -1,
		 .ret_name = "",
		 .bytes = 4096,
		 .args = nlohmann::json::object()},
	};
	r.drops = {{"cuda", "ringbuf_full", 12}, {"host", "ringbuf_full", 3}};
	r.metrics = {
		{.ts_ns = 100, .layer = "gpu", .name = "power_w", .key = "gpu0", .pid = 0, .value = 312.5},
		{.ts_ns = 100,
		 .layer = "gpu",
		 .name = "proc_mem_used_bytes",
		 .key = "gpu0",
		 .pid = 100,
		 .value = 8589934592.0},
		{.ts_ns = 200, .layer = "host", .name = "sched_delay_ns", .key = "", .pid = 100, .value = 1.25e6},
	};
	r.events = {
		{.ts_ns = 150, .layer = "gpu", .name = "xid", .key = "gpu1", .pid = 0, .tid = 0, .args = {{"xid", 79}}},
	};
	r.anomalies = {
		{.ts_ns = 1500,
		 .dur_ns = 10000,
		 .pid = 100,
		 .tid = 100,
		 .layer = "torch",
		 .name = "aten::matmul",
		 .score = -41.25,
		 .threshold = -7.5,
		 .features = {{"log_duration",
			       {{"value", 10000.0}, {"typical", 20.0}, {"z", 31.5}, {"contribution", 0.97}}}},
		 .causes = {{{"kind", "feature"}, {"feature", "log_duration"}, {"strength", 0.97}}},
		 .detected_ns = 250'000'000},
	};
	return r;
}

// Writes rec the way a recording does: the later spans first.
void write(const Recording &rec, const std::string &path)
{
	test::write_recording(rec, path,
			      {std::vector<Span>(rec.spans.begin() + 2, rec.spans.end()),
			       std::vector<Span>(rec.spans.begin(), rec.spans.begin() + 2)});
}

void expect_equal(const Recording &a, const Recording &b)
{
	EXPECT_EQ(a.meta, b.meta);
	EXPECT_EQ(a.wall_offset_ns, b.wall_offset_ns);
	ASSERT_EQ(a.processes.size(), b.processes.size());
	for (size_t i = 0; i < a.processes.size(); i++) {
		SCOPED_TRACE("process " + std::to_string(i));
		const Process &x = a.processes[i], &y = b.processes[i];
		EXPECT_EQ(x.pid, y.pid);
		EXPECT_EQ(x.ppid, y.ppid);
		EXPECT_EQ(x.comm, y.comm);
		EXPECT_EQ(x.cmdline, y.cmdline);
		EXPECT_EQ(x.start_ns, y.start_ns);
		EXPECT_EQ(x.end_ns, y.end_ns);
		EXPECT_EQ(x.exit_code, y.exit_code);
	}
	ASSERT_EQ(a.threads.size(), b.threads.size());
	for (size_t i = 0; i < a.threads.size(); i++) {
		SCOPED_TRACE("thread " + std::to_string(i));
		EXPECT_EQ(a.threads[i].pid, b.threads[i].pid);
		EXPECT_EQ(a.threads[i].tid, b.threads[i].tid);
		EXPECT_EQ(a.threads[i].name, b.threads[i].name);
	}
	ASSERT_EQ(a.spans.size(), b.spans.size());
	for (size_t i = 0; i < a.spans.size(); i++) {
		SCOPED_TRACE("span " + std::to_string(i));
		const Span &x = a.spans[i], &y = b.spans[i];
		EXPECT_EQ(x.start_ns, y.start_ns);
		EXPECT_EQ(x.dur_ns, y.dur_ns);
		EXPECT_EQ(x.pid, y.pid);
		EXPECT_EQ(x.tid, y.tid);
		EXPECT_EQ(x.depth, y.depth);
		EXPECT_EQ(x.layer, y.layer);
		EXPECT_EQ(x.name, y.name);
		EXPECT_EQ(x.ret, y.ret);
		EXPECT_EQ(x.ret_name, y.ret_name);
		EXPECT_EQ(x.bytes, y.bytes);
		EXPECT_EQ(x.args, y.args);
	}
	ASSERT_EQ(a.metrics.size(), b.metrics.size());
	for (size_t i = 0; i < a.metrics.size(); i++) {
		SCOPED_TRACE("metric " + std::to_string(i));
		const Metric &x = a.metrics[i], &y = b.metrics[i];
		EXPECT_EQ(std::tie(x.ts_ns, x.layer, x.name, x.key, x.pid),
			  std::tie(y.ts_ns, y.layer, y.name, y.key, y.pid));
		EXPECT_EQ(x.value, y.value); // REAL keeps a double exactly
	}
	ASSERT_EQ(a.events.size(), b.events.size());
	for (size_t i = 0; i < a.events.size(); i++) {
		SCOPED_TRACE("event " + std::to_string(i));
		const Event &x = a.events[i], &y = b.events[i];
		EXPECT_EQ(std::tie(x.ts_ns, x.layer, x.name, x.key, x.pid, x.tid, x.args),
			  std::tie(y.ts_ns, y.layer, y.name, y.key, y.pid, y.tid, y.args));
	}
	ASSERT_EQ(a.anomalies.size(), b.anomalies.size());
	for (size_t i = 0; i < a.anomalies.size(); i++) {
		SCOPED_TRACE("anomaly " + std::to_string(i));
		const Anomaly &x = a.anomalies[i], &y = b.anomalies[i];
		EXPECT_EQ(std::tie(x.ts_ns, x.dur_ns, x.pid, x.tid, x.layer, x.name, x.score, x.threshold, x.features,
				   x.causes, x.detected_ns),
			  std::tie(y.ts_ns, y.dur_ns, y.pid, y.tid, y.layer, y.name, y.score, y.threshold, y.features,
				   y.causes, y.detected_ns));
	}
	ASSERT_EQ(a.drops.size(), b.drops.size());
	for (size_t i = 0; i < a.drops.size(); i++) {
		SCOPED_TRACE("drop " + std::to_string(i));
		EXPECT_EQ(a.drops[i].layer, b.drops[i].layer);
		EXPECT_EQ(a.drops[i].reason, b.drops[i].reason);
		EXPECT_EQ(a.drops[i].count, b.drops[i].count);
	}
}

void write_text(const std::string &path, const std::string &text) { std::ofstream(path, std::ios::binary) << text; }

// Runs SQL on a fresh SQLite file, to build files that are not recordings.
void make_sqlite(const std::string &path, const char *sql)
{
	sqlite3 *db = nullptr;
	ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
	EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
	sqlite3_close(db);
}

std::string load_error(const std::string &path)
{
	auto r = load_recording(path);
	EXPECT_FALSE(r.ok());
	return r.ok() ? "" : r.error().message;
}

// The kind of load_recording's error (Other when it did not fail).
ErrorKind load_kind(const std::string &path)
{
	auto r = load_recording(path);
	return r.ok() ? ErrorKind::Other : r.error().kind;
}

} // namespace

TEST_F(StoreTest, RoundTripKeepsEveryField)
{
	Recording rec = sample();
	std::string path = file("run.db");
	write(rec, path);

	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	// sample() lists spans in start order already; the writer got them
	// out of order, so this also checks ORDER BY start_ns.
	expect_equal(rec, *loaded);
}

TEST_F(StoreTest, FinishedFileIsOneSelfContainedFile)
{
	std::string path = file("run.db");
	write(sample(), path);
	EXPECT_TRUE(fs::exists(path));
	for (const char *suffix : {".partial", "-wal", "-shm", "-journal", ".partial-wal", ".partial-shm"})
		EXPECT_FALSE(fs::exists(path + suffix)) << suffix;
	// SQLite header bytes 18/19 are the write/read format: 1 = rollback
	// journal, 2 = WAL. A WAL-format file would need its -wal to be whole.
	std::ifstream in(path, std::ios::binary);
	char header[20];
	ASSERT_TRUE(in.read(header, sizeof header));
	EXPECT_EQ(std::string(header, 16), std::string("SQLite format 3\0", 16));
	EXPECT_EQ(header[18], 1);
	EXPECT_EQ(header[19], 1);
}

TEST_F(StoreTest, PartialFileIsRemovedWithoutFinish)
{
	std::string path = file("run.db");
	{
		auto w = StoreWriter::create(path);
		ASSERT_TRUE(w.ok()) << w.error().message;
		ASSERT_TRUE(w->add_spans(sample().spans).ok());
		EXPECT_TRUE(fs::exists(path + ".partial"));
		EXPECT_FALSE(fs::exists(path));
	}
	EXPECT_FALSE(fs::exists(path));
	EXPECT_FALSE(fs::exists(path + ".partial"));
	EXPECT_FALSE(fs::exists(path + ".partial-wal"));
	EXPECT_FALSE(fs::exists(path + ".partial-shm"));
	EXPECT_TRUE(fs::is_empty(dir));
}

// A recording that cannot go on keeps what it committed under its name,
// marked incomplete; the open transaction's batches go with the failure.
TEST_F(StoreTest, KeptIncompleteRecordingHoldsItsCommittedBatches)
{
	std::string path = file("run.db");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	ASSERT_TRUE(w->add_spans(sample().spans).ok());
	auto kept = w->keep_incomplete("the disk filled");
	ASSERT_TRUE(kept.ok()) << kept.error().message;
	EXPECT_EQ(*kept, path);
	EXPECT_FALSE(w->is_open());
	EXPECT_FALSE(fs::exists(path + ".partial"));
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	EXPECT_EQ(loaded->spans.size(), 4u);
	EXPECT_EQ(loaded->meta, (std::map<std::string, std::string>{{"incomplete", "the disk filled"}}));
}

// Until finish() the file says it is not whole (a reader of a killed run's
// partial file learns it); finish() takes the writer's own mark away.
TEST_F(StoreTest, OnlyAFinishedRecordingIsComplete)
{
	std::string path = file("run.db");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	ASSERT_TRUE(w->commit().ok());
	auto partial = load_recording(path + ".partial");
	ASSERT_TRUE(partial.ok()) << partial.error().message;
	EXPECT_EQ(partial->meta.count("incomplete"), 1u);
	ASSERT_TRUE(w->finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	EXPECT_TRUE(loaded->meta.empty());
}

// A process may name itself with any bytes: the store's TEXT stays UTF-8
// (each bad byte one U+FFFD), for every reader.
TEST_F(StoreTest, TextThatIsNotUtf8IsStoredReplaced)
{
	std::string path = file("run.db");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	Process p;
	p.pid = 7;
	p.comm = "tl\xFF";
	p.cmdline = "/tmp/d\xFF\xFE/tl\xFF noop 3";
	ASSERT_TRUE(w->upsert_process(p).ok());
	ASSERT_TRUE(w->set_meta("command", p.cmdline).ok());
	ASSERT_TRUE(w->finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	ASSERT_EQ(loaded->processes.size(), 1u);
	const std::string r = "\xEF\xBF\xBD";
	EXPECT_EQ(loaded->processes[0].comm, "tl" + r);
	EXPECT_EQ(loaded->processes[0].cmdline, "/tmp/d" + r + r + "/tl" + r + " noop 3");
	EXPECT_EQ(loaded->meta.at("command"), loaded->processes[0].cmdline);
}

TEST_F(StoreTest, MovedWriterOwnsThePartialFile)
{
	std::string path = file("run.db");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok());
	StoreWriter a = std::move(w).value();
	StoreWriter b = std::move(a);
	{
		StoreWriter gone = std::move(a); // moved-from: must not delete b's file
	}
	EXPECT_TRUE(fs::exists(path + ".partial"));
	ASSERT_TRUE(b.add_spans(sample().spans).ok());
	ASSERT_TRUE(b.finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	EXPECT_EQ(loaded->spans.size(), 4u);
}

TEST_F(StoreTest, ExistingFileIsReplacedOnlyAtFinish)
{
	std::string path = file("run.db");
	write_text(path, "previous recording");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok());
	ASSERT_TRUE(w->add_spans(sample().spans).ok());
	std::ifstream before(path);
	EXPECT_EQ(std::string(std::istreambuf_iterator<char>(before), {}), "previous recording");
	ASSERT_TRUE(w->finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	EXPECT_EQ(loaded->spans.size(), 4u);
}

TEST_F(StoreTest, StalePartialFileIsReplaced)
{
	std::string path = file("run.db");
	write_text(path + ".partial", "garbage from a crashed run");
	write_text(path + ".partial-wal", "garbage");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	ASSERT_TRUE(w->finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	EXPECT_TRUE(loaded->spans.empty());
	EXPECT_TRUE(loaded->meta.empty());
	EXPECT_EQ(loaded->wall_offset_ns, 0);
}

TEST_F(StoreTest, WriterErrors)
{
	auto bad = StoreWriter::create(file("no/such/dir/run.db"));
	ASSERT_FALSE(bad.ok());
	EXPECT_NE(bad.error().message.find("no/such/dir"), std::string::npos) << bad.error().message;

	auto w = StoreWriter::create(file("run.db"));
	ASSERT_TRUE(w.ok());
	auto reserved = w->set_meta("schema_version", "2");
	ASSERT_FALSE(reserved.ok());
	EXPECT_NE(reserved.error().message.find("reserved"), std::string::npos);
	ASSERT_TRUE(w->finish().ok());
	auto again = w->finish();
	ASSERT_FALSE(again.ok());
	EXPECT_NE(again.error().message.find("already finished"), std::string::npos);
	EXPECT_FALSE(w->add_spans(sample().spans).ok());
	EXPECT_FALSE(w->set_meta("k", "v").ok());
}

TEST_F(StoreTest, LoadMissingFile)
{
	std::string path = file("missing.db");
	std::string msg = load_error(path);
	EXPECT_NE(msg.find(path), std::string::npos) << msg;
	EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
	EXPECT_NE(msg.find("eacgm record"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(path), ErrorKind::NotFound);
}

TEST_F(StoreTest, LoadDirectory)
{
	std::string msg = load_error(dir);
	EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(dir), ErrorKind::BadInput);
}

TEST_F(StoreTest, LoadFileThatIsNotSqlite)
{
	std::string path = file("trace.json");
	write_text(path,
		   "{\"traceEvents\": []} and some more text to fill a page header....."
		   "................................................................");
	std::string msg = load_error(path);
	EXPECT_NE(msg.find(path), std::string::npos) << msg;
	EXPECT_NE(msg.find("not an eacgm recording"), std::string::npos) << msg;
	EXPECT_NE(msg.find("not a SQLite database"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(path), ErrorKind::BadInput);
}

TEST_F(StoreTest, LoadSqliteThatIsNotARecording)
{
	std::string path = file("other.db");
	make_sqlite(path, "CREATE TABLE users(id INTEGER)");
	std::string msg = load_error(path);
	EXPECT_NE(msg.find("is a SQLite database but not an eacgm recording"), std::string::npos) << msg;
	EXPECT_NE(msg.find("no meta table"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(path), ErrorKind::BadInput);

	std::string nover = file("nover.db");
	make_sqlite(nover, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)");
	msg = load_error(nover);
	EXPECT_NE(msg.find("no schema_version"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(nover), ErrorKind::BadInput);
}

// SQLite's own failures, each from a real cause, give the kind of what
// failed: the directory missing (its errno), the database full.
TEST_F(StoreTest, SqliteFailuresHaveTheirKind)
{
	sqlite3 *raw = nullptr;
	const std::string nowhere = file("no-such-dir/run.db");
	int rc = sqlite3_open_v2(nowhere.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
	DbHandle missing(raw);
	ASSERT_EQ(rc, SQLITE_CANTOPEN);
	EXPECT_EQ(sqlite_error(raw, rc).kind, ErrorKind::NotFound);
	EXPECT_EQ(sqlite_error(raw, rc).message, "unable to open database file");

	// A database held to two pages is full as a full disk leaves it.
	ASSERT_EQ(sqlite3_open(file("small.db").c_str(), &raw), SQLITE_OK);
	DbHandle small(raw);
	ASSERT_EQ(sqlite3_exec(raw, "PRAGMA max_page_count = 2; CREATE TABLE t(b BLOB)", nullptr, nullptr, nullptr),
		  SQLITE_OK);
	ASSERT_EQ(sqlite3_exec(raw, "INSERT INTO t VALUES(zeroblob(100000))", nullptr, nullptr, nullptr), SQLITE_FULL);
	EXPECT_EQ(sqlite_error(raw).kind, ErrorKind::NoSpace);
	EXPECT_EQ(sqlite_error(raw).message, "database or disk is full");

	EXPECT_EQ(kind_of_sqlite(SQLITE_NOTADB), ErrorKind::BadInput);
	EXPECT_EQ(kind_of_sqlite(SQLITE_READONLY), ErrorKind::Permission);
	EXPECT_EQ(kind_of_sqlite(SQLITE_IOERR_WRITE, ENOSPC), ErrorKind::NoSpace);
	EXPECT_EQ(kind_of_sqlite(SQLITE_BUSY), ErrorKind::Other);
}

// The writer's own refusals: a key the store keeps to itself is bad input.
TEST_F(StoreTest, WriterRefusalsHaveTheirKind)
{
	auto w = StoreWriter::create(file("run.db"));
	ASSERT_TRUE(w.ok()) << w.error().message;
	auto reserved = w->set_meta("wall_offset_ns", "1");
	ASSERT_FALSE(reserved.ok());
	EXPECT_EQ(reserved.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(reserved.error().message,
		  "meta key 'wall_offset_ns' is reserved by the store; use set_wall_offset()");
	auto nowhere = StoreWriter::create(file("no-such-dir/run.db"));
	ASSERT_FALSE(nowhere.ok());
	EXPECT_EQ(nowhere.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(nowhere.error().message,
		  "cannot write " + file("no-such-dir/run.db") + ": directory " + file("no-such-dir") +
			  ": No such file or directory; choose another output path");
}

TEST_F(StoreTest, LoadNewerSchema)
{
	std::string path = file("future.db");
	make_sqlite(path,
		    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
		    "INSERT INTO meta VALUES('schema_version', '5')");
	std::string msg = load_error(path);
	EXPECT_NE(msg.find("schema version 5"), std::string::npos) << msg;
	EXPECT_NE(msg.find("reads versions 3 and 4"), std::string::npos) << msg;
	EXPECT_EQ(load_kind(path), ErrorKind::BadInput);
}

TEST_F(StoreTest, ReplaceAnomaliesRewritesOnlyThem)
{
	Recording rec = sample();
	std::string path = file("run.db");
	write(rec, path);
	Anomaly b = rec.anomalies[0];
	b.ts_ns = 9000;
	b.name = "ncclAllReduce";
	ASSERT_TRUE(replace_anomalies(path, {b, rec.anomalies[0]}).ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	rec.anomalies = {rec.anomalies[0], b}; // loaded by time
	expect_equal(rec, loaded.value());
	ASSERT_TRUE(replace_anomalies(path, {}).ok());
	EXPECT_TRUE(load_recording(path)->anomalies.empty());
	auto missing = replace_anomalies(file("missing.db"), {});
	ASSERT_FALSE(missing.ok());
	EXPECT_NE(missing.error().message.find("eacgm record"), std::string::npos) << missing.error().message;
	EXPECT_EQ(missing.error().kind, ErrorKind::NotFound);
}

// Each distinct Python stack is one row of `stacks`, however many spans
// (and however many PyStack objects of the same frames) stand on it; the
// spans view shows every span with its stack's text, NULL without one.
TEST_F(StoreTest, StacksAreWrittenOncePerDistinctStack)
{
	PyStack a{"step (train.py:10)", "<module> (train.py:40)"};
	PyStack a_again{"step (train.py:10)", "<module> (train.py:40)"}; // same frames, another object
	PyStack b{"forward (model.py:7)", "step (train.py:11)", "<module> (train.py:40)"};
	auto span = [](uint64_t start, PyStack st) {
		return Span{.start_ns = start,
			    .dur_ns = 10,
			    .pid = 1,
			    .tid = 1,
			    .layer = "torch",
			    .name = "aten::mm",
			    .py_stack = std::move(st)};
	};
	std::string path = file("stacks.db");
	{
		auto w = StoreWriter::create(path);
		ASSERT_TRUE(w.ok()) << w.error().message;
		ASSERT_TRUE(w->add_spans({span(1, a), span(2, b), span(3, {})}).ok());
		ASSERT_TRUE(w->add_spans({span(4, a_again), span(5, b), span(6, a)}).ok());
		ASSERT_TRUE(w->finish().ok());
	}
	sqlite3 *db = nullptr;
	ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
	ASSERT_TRUE(register_span_module(db));
	auto count = [&](const char *sql) {
		sqlite3_stmt *st = nullptr;
		EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
		int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
		sqlite3_finalize(st);
		return n;
	};
	EXPECT_EQ(count("SELECT count(*) FROM stacks"), 2);
	EXPECT_EQ(count("SELECT count(*) FROM spans"), 6);
	EXPECT_EQ(count("SELECT count(*) FROM spans WHERE py_stack IS NULL"), 1);
	EXPECT_EQ(count("SELECT count(*) FROM spans WHERE json_extract(py_stack, '$[0]') = 'step (train.py:10)'"), 3);
	sqlite3_close(db);

	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	std::vector<PyStack> want = {a, b, {}, a, b, a};
	ASSERT_EQ(loaded->spans.size(), want.size());
	for (size_t i = 0; i < want.size(); i++)
		EXPECT_EQ(loaded->spans[i].py_stack, want[i]) << "span " << i;
}

// A recording made before stacks had a table of their own (spans a table
// with the stack's text in each row) reads the same.
TEST_F(StoreTest, LoadsSpansKeptAsOneTable)
{
	std::string path = file("one_table.db");
	make_sqlite(path,
		    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
		    "INSERT INTO meta VALUES('schema_version', '3');"
		    "CREATE TABLE processes(pid INTEGER PRIMARY KEY, ppid INTEGER, comm TEXT, cmdline TEXT,"
		    " start_ns INTEGER, end_ns INTEGER, exit_code INTEGER);"
		    "CREATE TABLE threads(pid INTEGER, tid INTEGER, name TEXT, PRIMARY KEY(pid, tid));"
		    "CREATE TABLE spans(id INTEGER PRIMARY KEY, pid INTEGER, tid INTEGER, layer TEXT, name TEXT,"
		    " start_ns INTEGER, dur_ns INTEGER, depth INTEGER, ret INTEGER, ret_name TEXT, bytes INTEGER,"
		    " args TEXT, py_stack TEXT);"
		    "CREATE TABLE drops(layer TEXT, reason TEXT, count INTEGER);"
		    "CREATE TABLE metrics(ts_ns INTEGER, layer TEXT, name TEXT, key TEXT, pid INTEGER, value REAL);"
		    "CREATE TABLE events(ts_ns INTEGER, layer TEXT, name TEXT, key TEXT, pid INTEGER, tid INTEGER,"
		    " args TEXT);"
		    "CREATE TABLE anomalies(ts_ns INTEGER, dur_ns INTEGER, pid INTEGER, tid INTEGER, layer TEXT,"
		    " name TEXT, score REAL, threshold REAL, features TEXT, causes TEXT);"
		    "INSERT INTO spans VALUES(1, 7, 7, 'torch', 'aten::mm', 100, 5, 0, 0, '', 0, '{}',"
		    " '[\"step (train.py:10)\"]');"
		    "INSERT INTO anomalies VALUES(100, 5, 7, 7, 'torch', 'aten::mm', -30, -7, '{}', '[]');");
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	ASSERT_EQ(loaded->spans.size(), 1u);
	EXPECT_EQ(loaded->spans[0].name, "aten::mm");
	EXPECT_EQ(loaded->spans[0].py_stack, PyStack{"step (train.py:10)"});
	// Its anomalies table predates detected_ns: read as 0 (found after the
	// fact), and eacgm detect adds the column when it writes there.
	ASSERT_EQ(loaded->anomalies.size(), 1u);
	EXPECT_EQ(loaded->anomalies[0].detected_ns, 0u);
	Anomaly a = loaded->anomalies[0];
	a.detected_ns = 12345;
	ASSERT_TRUE(replace_anomalies(path, {a}).ok());
	auto again = load_recording(path);
	ASSERT_TRUE(again.ok()) << again.error().message;
	ASSERT_EQ(again->anomalies.size(), 1u);
	EXPECT_EQ(again->anomalies[0].detected_ns, 12345u);
}

// The node agent's store over a long run under a small bound: never past it,
// the newest batches all there, the oldest gone, the file sound.
TEST(StoreRetention, StaysUnderItsBoundAndKeepsTheNewest)
{
	std::string path = testing::TempDir() + "/retention.db";
	auto w = StoreWriter::create(path, true);
	ASSERT_TRUE(w) << w.error().message;
	const uint64_t bound = 512 << 10;   // a fraction of what 300 batches take (300,000 spans)
	w->commit_every(kPipelineCommitNs); // as the agent writes it
	StoreSink sink(*w, {bound, 0});
	uint64_t batches = 300, per = 1000, ns = 0, peak = 0, rand = 1;
	for (uint64_t b = 0; b < batches; b++) {
		SpanBatch batch;
		for (uint64_t i = 0; i < per; i++) {
			Span s;
			s.start_ns = (ns += 10'000'000); // 100 spans a second of data
			// Durations and grids as random as a real run's, so that blocks
			// compress as they would (a repeated value costs next to nothing).
			rand = rand * 6364136223846793005ull + 1442695040888963407ull;
			s.dur_ns = rand >> 44;
			s.pid = 7;
			s.tid = 7;
			s.layer = "cuda";
			s.name = "cudaLaunchKernel";
			s.args = {{"kernel", "void k" + std::to_string(i % 50) + "(float*, int)"},
				  {"grid", {b, rand >> 48, 1}}};
			s.py_stack = PyStack({"train (t.py:" + std::to_string(i % 7) + ")", "<module> (t.py:1)"});
			batch.spans.push_back(std::move(s));
		}
		ASSERT_TRUE(sink.write(batch));
		peak = std::max(peak, w->file_bytes());
		ASSERT_LE(w->file_bytes(), bound) << "batch " << b;
	}
	EXPECT_GT(sink.rows_expired(), 0u);
	EXPECT_GT(peak, bound / 2); // the bound was what held it
	ASSERT_TRUE(w->finish());
	sqlite3 *db = nullptr;
	ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
	ASSERT_TRUE(register_span_module(db));
	auto one = [&](const char *sql) {
		sqlite3_stmt *st = nullptr;
		EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
		std::string v = sqlite3_step(st) == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : "";
		sqlite3_finalize(st);
		return v;
	};
	EXPECT_EQ(one("PRAGMA integrity_check"), "ok");
	// The newest batch whole, the oldest gone, and no gap: what is kept is
	// the most recent run of batches.
	EXPECT_EQ(one("SELECT max(start_ns) FROM spans"), std::to_string(ns));
	uint64_t kept = std::stoull(one("SELECT count(*) FROM spans"));
	EXPECT_EQ(one("SELECT min(start_ns) FROM spans"), std::to_string(ns - (kept - 1) * 10'000'000));
	EXPECT_LT(kept, batches * per);
	EXPECT_EQ(kept % per, 0u);                                                // whole batches
	EXPECT_EQ(one("SELECT count(*) FROM spans WHERE py_stack IS NULL"), "0"); // no stack lost under a kept call
	sqlite3_close(db);
}

TEST(StoreRetention, RowsPastTheAgeGo)
{
	std::string path = testing::TempDir() + "/retention-age.db";
	auto w = StoreWriter::create(path, true);
	ASSERT_TRUE(w) << w.error().message;
	const uint64_t age = 30'000'000'000ull, s = 1'000'000'000ull;
	StoreSink sink(*w, {0, age});
	uint64_t ns = 0;
	for (int b = 0; b < 300; b++) { // a batch a second: 5 minutes of data
		SpanBatch batch;
		for (int i = 0; i < 10; i++) {
			Span sp;
			sp.start_ns = (ns += s / 10);
			sp.layer = "torch";
			sp.name = "aten::mm";
			batch.spans.push_back(sp);
		}
		std::vector<Metric> m = {{ns, "host", "cpu_pct", "", 0, 1}};
		ASSERT_TRUE(sink.write(batch));
		ASSERT_TRUE(sink.measures(m, {}));
	}
	ASSERT_TRUE(w->finish());
	auto spans = load_recording(path);
	ASSERT_TRUE(spans) << spans.error().message;
	// Looked at once a minute of data: at most a minute past the age is left.
	ASSERT_FALSE(spans->spans.empty());
	EXPECT_GE(spans->spans.front().start_ns + age + 60 * s, ns);
	EXPECT_LE(spans->spans.front().start_ns + age, ns);
	EXPECT_EQ(spans->spans.back().start_ns, ns);
	EXPECT_GE(spans->metrics.front().ts_ns + age + 60 * s, ns);
	EXPECT_EQ(spans->metrics.back().ts_ns, ns);
}

// The pipeline's batches share a transaction (commit_every): another reader
// sees them once it commits; a batch that fails inside it is undone alone,
// the stacks it wrote with it (a later batch writes them again).
TEST_F(StoreTest, BatchesShareATransactionAndFailAlone)
{
	std::string path = file("shared.db");
	auto w = StoreWriter::create(path);
	ASSERT_TRUE(w.ok()) << w.error().message;
	w->commit_every(3'600'000'000'000ull);
	sqlite3 *other = nullptr;
	ASSERT_EQ(sqlite3_open_v2((path + ".partial").c_str(), &other, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
	ASSERT_TRUE(register_span_module(other));
	auto one = [&](const char *sql) {
		sqlite3_stmt *st = nullptr;
		EXPECT_EQ(sqlite3_prepare_v2(other, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(other);
		int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
		sqlite3_finalize(st);
		return n;
	};
	// What the failing batches hit: rows SQLite refuses by name.
	ASSERT_EQ(sqlite3_exec(other,
			       "CREATE TRIGGER refuse_span BEFORE INSERT ON functions WHEN NEW.name = 'bad' "
			       "BEGIN SELECT RAISE(ABORT, 'refused'); END;"
			       "CREATE TRIGGER refuse_metric BEFORE INSERT ON series WHEN NEW.name = 'bad' "
			       "BEGIN SELECT RAISE(ABORT, 'refused'); END;",
			       nullptr, nullptr, nullptr),
		  SQLITE_OK);
	auto span = [](uint64_t start, const std::string &name, PyStack st) {
		return Span{.start_ns = start,
			    .dur_ns = 10,
			    .pid = 1,
			    .tid = 1,
			    .layer = "torch",
			    .name = name,
			    .py_stack = std::move(st)};
	};
	PyStack a{"step (train.py:10)"}, c{"forward (model.py:7)", "step (train.py:11)"};
	auto metric = [](const std::string &name) {
		return Metric{.ts_ns = 5, .layer = "host", .name = name, .key = "", .pid = 1, .value = 1};
	};
	ASSERT_TRUE(w->add_spans({span(1, "aten::mm", a), span(2, "aten::mm", a)}).ok());
	EXPECT_FALSE(w->add_spans({span(3, "aten::mm", c), span(4, "bad", {})}).ok());
	EXPECT_FALSE(w->add_metrics({metric("sched_delay_ns"), metric("bad")}).ok());
	ASSERT_TRUE(w->add_metrics({metric("offcpu_ns")}).ok());
	ASSERT_TRUE(w->add_spans({span(5, "aten::bmm", c)}).ok());
	EXPECT_EQ(one("SELECT count(*) FROM spans"), 0); // not committed yet
	ASSERT_TRUE(w->commit().ok());
	EXPECT_EQ(one("SELECT count(*) FROM spans"), 3);
	// The failed batch gave its ids back: the calls kept are 1, 2 and 3.
	EXPECT_EQ(one("SELECT max(id) FROM spans"), 3);
	EXPECT_EQ(one("SELECT sum(id) FROM spans"), 6);
	EXPECT_EQ(one("SELECT count(*) FROM metrics"), 1);
	EXPECT_EQ(one("SELECT count(*) FROM metrics WHERE name = 'offcpu_ns'"), 1);
	EXPECT_EQ(one("SELECT count(*) FROM stacks"), 2);
	// The stack the failed batch wrote went with it; the later batch's call stands on it.
	EXPECT_EQ(one("SELECT count(*) FROM spans WHERE name = 'aten::bmm' AND "
		      "json_extract(py_stack, '$[0]') = 'forward (model.py:7)'"),
		  1);
	EXPECT_EQ(
		sqlite3_exec(other, "DROP TRIGGER refuse_span; DROP TRIGGER refuse_metric;", nullptr, nullptr, nullptr),
		SQLITE_OK);
	sqlite3_close(other);
	ASSERT_TRUE(w->finish().ok());
	auto loaded = load_recording(path);
	ASSERT_TRUE(loaded.ok()) << loaded.error().message;
	ASSERT_EQ(loaded->spans.size(), 3u);
	EXPECT_EQ(loaded->spans[2].py_stack, c);
}
