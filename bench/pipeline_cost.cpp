// SPDX-License-Identifier: Apache-2.0
// Records per second through eacgm's user-space pipeline on one core: the
// decode of a raw span record (name, arguments, return, bytes) and the
// store (schema 4: a compressed block per batch of 4,096, as the record loop
// writes them, docs/store.md), by the two paths a record can take: decoded
// to a Span (its arguments as text in a JSON object, which the store takes
// apart again) or kept typed (pipeline/span.h; the store looks each probe's
// shape up once: StoreWriter::add_spans with TypedSpans).
//
// With --replay NAME.raw...: the span records of real recordings (record -o
// NAME.db --raw-dump NAME.raw, pipeline/raw_dump.h; their Python stacks read
// from NAME.db), each dump replayed whole, in alternating rounds of the two
// paths, SQLite's floor measured in the same run (bench/pipeline_cost.sh
// records ResNet-18 and GPT and runs this). Without: one cudaMemcpy record
// of the built-in CUDA spec (four arguments) repeated, beside SQLite's
// ceiling and floor. No ring buffer or kernel is involved: this is the rate
// at which user space could keep up with the probes.
// Usage: bench_pipeline_cost [RECORDS (1,000,000)] [--replay DUMP... [--rounds N (5)] [--typed-only]]
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <string>
#include <unistd.h>
#include <vector>

#include "eacgm/abi/events.h"
#include "layers/torch.h"
#include "pipeline/decode.h"
#include "pipeline/raw_dump.h"
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

static long file_size(const std::string &path)
{
	long size = 0;
	if (FILE *f = fopen(path.c_str(), "rb")) {
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		fclose(f);
	}
	return size;
}

// One pass over a dump's records in batches of 4,096, decoded and stored
// into a fresh recording: seconds decoding and storing (the batches, their
// commits and checkpoints), seconds finishing the recording (its last
// checkpoint, once per recording whatever its length: apart, as creating
// it is), bytes a span.
struct Pass {
	double decode_s = 0, store_s = 0, finish_s = 0, bytes_per_span = 0;
};

// The Python stack of each record: the recording made beside the dump holds
// them (the record loop resolves them from the Python ring, which a dump does
// not keep), its spans of traced calls in the order decode saw them.
static Result<std::vector<PyStack>> stacks_of(const RawDump &d, const std::string &db)
{
	std::vector<PyStack> out;
	auto r = RecordingReader::open(db);
	if (!r)
		return r.error();
	auto visit = r->each_span(SpanOrder::as_recorded, [&](const Span &s) {
		if (s.layer != "python")
			out.push_back(s.py_stack);
	});
	if (!visit)
		return visit.error();
	if (out.size() != d.spans.size())
		return make_error(ErrorKind::BadInput,
				  db + " holds " + std::to_string(out.size()) + " spans of traced calls, its dump " +
					  std::to_string(d.spans.size()) +
					  ": not the recording the dump was made with");
	return out;
}

static Result<Pass> replay_pass(const RawDump &d, const std::vector<PyStack> &d_stacks, bool typed_path, size_t repeat)
{
	const std::string path = "/tmp/eacgm-replay-" + std::to_string(getpid()) + ".db";
	auto store = StoreWriter::create(path);
	if (!store)
		return store.error();
	store->commit_every(kPipelineCommitNs);
	const std::vector<PyStack> &stacks = d_stacks;
	Interner names;
	Pass p;
	std::vector<Span> batch;
	TypedSpans typed{&d.specs, &names, format_tensor, {}, {}};
	std::vector<DecodePlan> plans; // as the record loop keeps them, one per probe
	for (const ProbeSpec &spec : d.specs.probes)
		plans.push_back(decode_plan(spec));
	const size_t kBatch = 4096;
	for (size_t r = 0; r < repeat; r++)
		for (size_t at = 0; at < d.spans.size(); at += kBatch) {
			const size_t to = std::min(d.spans.size(), at + kBatch);
			auto t0 = clk::now();
			batch.clear();
			typed.clear();
			for (size_t i = at; i < to; i++) {
				const eacgm_span_event &e = d.spans[i];
				const PyStack &stack = stacks[i];
				const ProbeSpec &spec = d.specs.probes[e.spec_id];
				if (typed_path) {
					typed.push_back(
						decode_typed(e, spec, plans[e.spec_id], d.specs, nullptr, names),
						stack);
				} else {
					batch.push_back(decode_span(e, spec, d.specs, nullptr, names, format_tensor));
					batch.back().py_stack = stack;
				}
			}
			auto t1 = clk::now();
			if (auto w = typed_path ? store->add_spans({}, typed) : store->add_spans(batch); !w)
				return w.error();
			p.store_s += secs(t1, clk::now());
			p.decode_s += secs(t0, t1);
		}
	// The last batches' commit is the store's work (a pass is shorter than
	// the record loop's commit interval: its one commit, WAL and checkpoint,
	// comes here); what finish does past it is the recording's.
	auto t0 = clk::now();
	if (auto c = store->commit(); !c)
		return c.error();
	auto t1 = clk::now();
	if (auto f = store->finish(); !f)
		return f.error();
	p.store_s += secs(t0, t1);
	p.finish_s = secs(t1, clk::now());
	p.bytes_per_span = double(file_size(path)) / double(d.spans.size() * repeat);
	unlink(path.c_str());
	return p;
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Rounds alternate today's path and the typed one (A B A B ...); medians.
static bool typed_only = false;

static int replay(const std::vector<std::string> &dumps, int rounds)
{
	printf("replayed recordings (record --raw-dump), one core, batches of 4,096, %d alternating rounds,\n"
	       "medians (range); each round replays the dump to at least 5,000,000 records on the typed path\n"
	       "(at the target's rate, a second: the record loop commits once a second, so its commits and\n"
	       "checkpoints weigh as they would) and 1,000,000 on the Span path:\n",
	       rounds);
	for (const std::string &path : dumps) {
		auto d = read_raw_dump(path);
		if (!d) {
			fprintf(stderr, "bench_pipeline_cost: %s\n", d.error().message.c_str());
			return 1;
		}
		if (d->spans.empty()) {
			fprintf(stderr, "bench_pipeline_cost: %s holds no records\n", path.c_str());
			return 1;
		}
		const std::string db = path.substr(0, path.rfind('.')) + ".db";
		auto stacks = stacks_of(*d, db);
		if (!stacks) {
			fprintf(stderr, "bench_pipeline_cost: %s: %s (record it with -o NAME.db --raw-dump NAME.raw)\n",
				path.c_str(), stacks.error().message.c_str());
			return 1;
		}
		auto repeat_to = [&](size_t n) { return (n + d->spans.size() - 1) / d->spans.size(); };
		const size_t repeat[2] = {repeat_to(1'000'000), repeat_to(5'000'000)};
		std::vector<double> rate[2], with_finish[2], finish_ms[2], decode[2], bytes[2];
		for (int r = 0; r < rounds; r++)
			for (int typed = typed_only; typed < 2; typed++) {
				auto p = replay_pass(*d, *stacks, typed, repeat[typed]);
				if (!p) {
					fprintf(stderr, "bench_pipeline_cost: %s: %s\n", path.c_str(),
						p.error().message.c_str());
					return 1;
				}
				const double n = double(d->spans.size() * repeat[typed]);
				rate[typed].push_back(n / (p->decode_s + p->store_s) / 1e6);
				with_finish[typed].push_back(n / (p->decode_s + p->store_s + p->finish_s) / 1e6);
				finish_ms[typed].push_back(p->finish_s * 1e3);
				decode[typed].push_back(n / p->decode_s / 1e6);
				bytes[typed].push_back(p->bytes_per_span);
			}
		std::map<std::string, size_t> layers;
		for (const auto &e : d->spans)
			layers[d->specs.probes[e.spec_id].layer]++;
		std::string mix;
		for (auto &[l, n] : layers)
			mix += (mix.empty() ? "" : ", ") + l + " " + std::to_string(n);
		auto range = [](const std::vector<double> &v) {
			auto [lo, hi] = std::minmax_element(v.begin(), v.end());
			char buf[64];
			snprintf(buf, sizeof buf, "%.2f-%.2f", *lo, *hi);
			return std::string(buf);
		};
		printf("  %s: %zu records (%s), %zu probes\n", path.c_str(), d->spans.size(), mix.c_str(),
		       d->specs.probes.size());
		for (int typed = typed_only; typed < 2; typed++)
			printf("    %s decode + store %6.2f M/s (%s), decode %6.2f M/s, %5.1f bytes a span;\n"
			       "                with the recording's finish %.2f M/s (finish %.0f ms)\n",
			       typed ? "typed path " : "Span path  ", median(rate[typed]), range(rate[typed]).c_str(),
			       median(decode[typed]), median(bytes[typed]), median(with_finish[typed]),
			       median(finish_ms[typed]));
		if (!typed_only)
			printf("    typed / Span: %.2fx  (target: 5 M/s)\n", median(rate[1]) / median(rate[0]));
	}
	printf("  SQLite's floor    %6.2f M rows/s  (one integer column, in memory, one transaction, this run:\n"
	       "                                    the most rows SQLite inserts here, whatever a row holds)\n",
	       sqlite_floor(1'000'000));
	return 0;
}

int main(int argc, char **argv)
{
	size_t n = 1'000'000;
	std::vector<std::string> dumps;
	int rounds = 5;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (a == "--rounds" && i + 1 < argc)
			rounds = std::max(1, atoi(argv[++i]));
		else if (a == "--typed-only") // for a profiler
			typed_only = true;
		else if (a == "--replay")
			while (i + 1 < argc && argv[i + 1][0] != '-')
				dumps.push_back(argv[++i]);
		else if (!a.empty() && isdigit(a[0]))
			n = std::strtoul(a.c_str(), nullptr, 10);
		else {
			fprintf(stderr,
				"usage: bench_pipeline_cost [RECORDS] [--replay DUMP... [--rounds N] "
				"[--typed-only]]\n");
			return 2;
		}
	}
	if (!dumps.empty())
		return replay(dumps, rounds);
	auto specs = load_builtin_spec("cuda");
	if (!specs) {
		fprintf(stderr, "bench_pipeline_cost: %s\n", specs.error().message.c_str());
		return 1;
	}
	const uint32_t id = probe_index(*specs, "cudaMemcpy");
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
	// Both paths through replay_pass, the records repeated (no Python stack).
	const RawDump d{*specs, raw};
	const std::vector<PyStack> no_stacks(raw.size());
	const size_t repeat = std::max<size_t>(1, (n + raw.size() - 1) / raw.size()), total = repeat * raw.size();
	auto span_path = replay_pass(d, no_stacks, false, repeat);
	auto typed_path = replay_pass(d, no_stacks, true, repeat);
	if (!span_path || !typed_path) {
		fprintf(stderr, "bench_pipeline_cost: %s\n",
			(span_path ? typed_path.error() : span_path.error()).message.c_str());
		return 1;
	}
	auto rate = [&](double s) { return double(total) / s / 1e6; };
	printf("user-space pipeline, one core, %zu cudaMemcpy records (4 arguments, one record repeated), batches of "
	       "%zu:\n",
	       total, raw.size());
	printf("  decode to a Span  %8.2f M records/s  (name, arguments as text in a JSON object)\n",
	       rate(span_path->decode_s));
	printf("  typed decode      %8.2f M records/s  (no text: the typed span, %zu bytes)\n",
	       rate(typed_path->decode_s), sizeof(TypedSpan));
	printf("  store, Spans      %8.2f M records/s  (each span's args object taken apart)\n",
	       rate(span_path->store_s + span_path->finish_s));
	printf("  store, typed      %8.2f M records/s  (the probe's shape looked up once; %.1f bytes a span)\n",
	       rate(typed_path->store_s + typed_path->finish_s), typed_path->bytes_per_span);
	printf("  decode + store    %8.2f M records/s  Span path; %.2f typed path (target 5)\n",
	       rate(span_path->decode_s + span_path->store_s + span_path->finish_s),
	       rate(typed_path->decode_s + typed_path->store_s + typed_path->finish_s));
	printf("  SQLite alone      %8.2f M rows/s     (schema 3's row bound once, inserted in the same batches:\n"
	       "                                        the ceiling of a store that keeps a SQLite row per span)\n",
	       sqlite_ceiling(total, raw.size()));
	printf("  SQLite's floor    %8.2f M rows/s     (one integer column, in memory, one transaction: the most\n"
	       "                                        rows SQLite inserts here, whatever a row holds)\n",
	       sqlite_floor(total));
	return 0;
}
