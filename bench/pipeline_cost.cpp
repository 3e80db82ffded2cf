// Records per second through eacgm's user-space pipeline on one core: the
// decode of a raw span record (name, arguments, return, bytes) and the
// store (SQLite, one transaction per batch of 4,096, as the recorder does).
// Fed with cudaMemcpy records of the built-in CUDA spec (four arguments:
// the decode does its real work), so no ring buffer or kernel is involved:
// this is the rate at which user space could keep up with the probes.
// Usage: bench_pipeline_cost [RECORDS (1,000,000)]
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
		raw[i] = {.start_ns = 1'000'000 + i * 1000, .dur_ns = 700, .tgid = 42, .tid = 42, .spec_id = id,
			  .args = {0x7f0000001000, 0x7f0000002000, 4096 + i, 1}};
	std::string path = "/tmp/eacgm-pipeline-" + std::to_string(getpid()) + ".db";
	auto store = StoreWriter::create(path);
	if (!store) {
		fprintf(stderr, "bench_pipeline_cost: %s\n", store.error().message.c_str());
		return 1;
	}
	double decode_s = 0, store_s = 0;
	std::vector<Span> batch;
	for (size_t done = 0; done < n; done += raw.size()) {
		auto t0 = clk::now();
		batch.clear();
		for (const auto &e : raw)
			batch.push_back(decode_span(e, specs->probes[id], *specs, nullptr));
		auto t1 = clk::now();
		if (auto r = store->add_spans(batch); !r) {
			fprintf(stderr, "bench_pipeline_cost: %s\n", r.error().message.c_str());
			return 1;
		}
		store_s += secs(t1, clk::now());
		decode_s += secs(t0, t1);
	}
	(void)store->finish();
	size_t total = (n + raw.size() - 1) / raw.size() * raw.size();
	long size = 0;
	if (FILE *f = fopen(path.c_str(), "rb")) {
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		fclose(f);
	}
	unlink(path.c_str());
	printf("user-space pipeline, one core, %zu cudaMemcpy records (4 arguments), batches of %zu:\n", total, raw.size());
	printf("  decode            %8.2f M records/s\n", total / decode_s / 1e6);
	printf("  store (SQLite)    %8.2f M records/s  (%.0f bytes a span on disk)\n", total / store_s / 1e6,
	       double(size) / double(total));
	printf("  decode + store    %8.2f M records/s  (target 5)\n", total / (decode_s + store_s) / 1e6);
	return 0;
}
