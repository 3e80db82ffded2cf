// SPDX-License-Identifier: Apache-2.0
// A small recording with a row of every kind, written the way `eacgm record`
// writes one: the store fuzzers' seeds (gen/store_seeds.cpp) and store_rows'
// template.
#pragma once
#include <string>

#include "common/model.h"
#include "store/store.h"

namespace eacgm::fuzz {

inline Recording sample_recording()
{
	Recording rec;
	rec.meta = {{"command", "python3 train.py"}, {"version", "0.1.0"}, {"runq_measured", "1"}};
	rec.wall_offset_ns = 1'700'000'000'000'000'000;
	rec.processes = {{.pid = 100,
			  .ppid = 1,
			  .comm = "python3",
			  .cmdline = "python3 train.py",
			  .start_ns = 1000,
			  .end_ns = 9000,
			  .exit_code = 0}};
	rec.threads = {{100, 100, "python3"}, {100, 101, "pt_autograd_0"}};
	rec.spans = {
		{.start_ns = 2000,
		 .dur_ns = 500,
		 .pid = 100,
		 .tid = 100,
		 .layer = "cuda",
		 .name = "cudaMalloc",
		 .ret = 0,
		 .ret_name = "cudaSuccess",
		 .bytes = 4096,
		 .args = {{"size", 4096}, {"runq_ns", 20}},
		 .py_stack = PyStack{"Model.forward (model.py:42)", "<module> (train.py:7)"}},
		{.start_ns = 2100,
		 .dur_ns = 100,
		 .pid = 100,
		 .tid = 100,
		 .depth = 1,
		 .layer = "nccl",
		 .name = "ncclAllReduce",
		 .ret = 0,
		 .args = {{"count", 1000}, {"datatype", "ncclFloat32"}, {"seq", 3}}},
		{.start_ns = 3000, .dur_ns = 10, .pid = 100, .tid = 101, .layer = "python", .name = "step"},
	};
	rec.metrics = {{.ts_ns = 2000, .layer = "gpu", .name = "util_gpu_pct", .key = "gpu0", .value = 97.5},
		       {.ts_ns = 2000, .layer = "host", .name = "sched_delay_ns", .pid = 100, .value = 1e6}};
	rec.events = {{.ts_ns = 2500, .layer = "gpu", .name = "xid", .key = "gpu0", .args = {{"code", 79}}}};
	rec.anomalies = {{.ts_ns = 2000,
			  .dur_ns = 500,
			  .pid = 100,
			  .tid = 100,
			  .layer = "cuda",
			  .name = "cudaMalloc",
			  .score = -12.5,
			  .threshold = -9,
			  .features = {{"dur_ns", {{"value", 500}, {"typical", 50}}}},
			  .causes = nlohmann::json::array({{{"cause", "cpu"}, {"evidence", "runq"}}}),
			  .detected_ns = 2600}};
	rec.drops = {{"cuda", "ringbuf_full", 3}};
	return rec;
}

// Writes rec to path (replaced); false when the writer fails.
inline bool write_recording(const Recording &rec, const std::string &path)
{
	auto w = StoreWriter::create(path);
	if (!w)
		return false;
	StoreWriter &s = *w;
	bool ok = true;
	for (const auto &[k, v] : rec.meta)
		ok = ok && s.set_meta(k, v);
	ok = ok && s.set_wall_offset(rec.wall_offset_ns);
	for (const Process &p : rec.processes)
		ok = ok && s.upsert_process(p);
	for (const Thread &t : rec.threads)
		ok = ok && s.upsert_thread(t);
	ok = ok && s.add_spans(rec.spans) && s.add_metrics(rec.metrics) && s.add_events(rec.events) &&
		s.add_anomalies(rec.anomalies) && s.set_drops(rec.drops);
	return ok && s.finish();
}

} // namespace eacgm::fuzz
