// SPDX-License-Identifier: Apache-2.0
#include "merge/merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/text.h"
#include "pipeline/collectives.h"
#include "store/store.h"

namespace eacgm {

using nlohmann::json;

std::vector<std::string> host_labels(const std::vector<std::string> &hostnames, const std::vector<std::string> &paths)
{
	size_t n = paths.size();
	std::vector<std::string> stems(n), first(n);
	for (size_t i = 0; i < n; i++) {
		stems[i] = std::filesystem::path(paths[i]).stem().string();
		first[i] = hostnames[i].empty() ? stems[i] : hostnames[i];
	}
	auto shared = [](const std::vector<std::string> &v, size_t i) {
		return std::count(v.begin(), v.end(), v[i]) > 1;
	};
	std::vector<std::string> second = first;
	for (size_t i = 0; i < n; i++)
		if (shared(first, i))
			second[i] = hostnames[i].empty() ? stems[i] : hostnames[i] + "/" + stems[i];
	std::vector<std::string> out = second;
	for (size_t i = 0; i < n; i++)
		if (shared(second, i))
			out[i] = paths[i];
	return out;
}

namespace {

// The median; of an even count, the mean of the middle two.
int64_t median(std::vector<int64_t> v)
{
	std::sort(v.begin(), v.end());
	size_t m = v.size() / 2;
	return v.size() % 2 ? v[m] : v[m - 1] + (v[m] - v[m - 1]) / 2;
}

// Per round that more than one input saw: per input, the median end of
// its ranks' spans.
using RoundEnds = std::map<size_t, int64_t>;

std::vector<RoundEnds> round_ends(const std::vector<std::vector<Span>> &collectives)
{
	CollectiveMatcher matcher;
	std::vector<Round> rounds;
	for (size_t i = 0; i < collectives.size(); i++)
		for (const Span &s : collectives[i])
			if (auto c = collective_of(s)) {
				c->arrival.pid = static_cast<uint32_t>(i); // which input, not which process
				matcher.add(*c, rounds);
			}
	matcher.finish(rounds);
	std::vector<RoundEnds> out;
	for (const Round &r : rounds) {
		std::map<size_t, std::vector<int64_t>> ends;
		for (const Arrival &a : r.arrivals)
			ends[a.pid].push_back(static_cast<int64_t>(a.end_ns));
		if (ends.size() < 2)
			continue; // one input's own: says nothing of clocks
		RoundEnds e;
		for (auto &[input, v] : ends)
			e[input] = median(std::move(v));
		out.push_back(std::move(e));
	}
	return out;
}

// Over the rounds input k shares with the inputs aligned so far: their
// ends (corrected) less k's.
std::vector<int64_t> differences(const std::vector<RoundEnds> &rounds, size_t k,
				 const std::vector<std::optional<int64_t>> &aligned)
{
	std::vector<int64_t> d;
	for (const RoundEnds &r : rounds) {
		auto own = r.find(k);
		if (own == r.end())
			continue;
		std::vector<int64_t> ref;
		for (auto [input, end] : r)
			if (aligned[input])
				ref.push_back(end + *aligned[input]);
		if (!ref.empty())
			d.push_back(median(std::move(ref)) - own->second);
	}
	return d;
}

} // namespace

std::vector<Residual> estimate_residuals(const std::vector<std::vector<Span>> &collectives)
{
	size_t n = collectives.size();
	auto rounds = round_ends(collectives);
	std::vector<std::optional<int64_t>> aligned(n);
	std::vector<Residual> out(n);
	if (n)
		aligned[0] = 0;
	for (;;) {
		size_t best = n;
		std::vector<int64_t> best_d;
		for (size_t k = 0; k < n; k++)
			if (!aligned[k])
				if (auto d = differences(rounds, k, aligned); d.size() > best_d.size()) {
					best = k;
					best_d = std::move(d);
				}
		if (best == n)
			return out; // the rest share no round with the aligned: wall clocks only
		aligned[best] = median(best_d);
		out[best] = {.ns = *aligned[best], .rounds = best_d.size()};
	}
}

namespace {

// One input being merged: its reader, what it holds besides its spans,
// its collective spans (on the first input's clock by wall offsets), and
// what is done with it.
struct Input {
	RecordingReader reader;
	Recording rec;
	std::vector<Span> collectives;
	MergedInput out;
};

// Moves one input's records onto the merge's clock and pids; the first
// record that cannot be moved is the error (result()).
class Mover {
public:
	explicit Mover(const MergedInput &in) : in_(in), shift_(in.clock_shift_ns + in.residual.ns) {}
	uint32_t pid(uint32_t p)
	{
		if (p == 0) // about no process (a machine's metric)
			return 0;
		if (p >= kPidStride)
			fail(in_.path + " has pid " + std::to_string(p) +
			     ", too large for a recording of one machine " +
			     "(is it a merged one?); merge the recordings it was made from");
		return p + in_.pid_offset;
	}
	uint64_t time(uint64_t t)
	{
		int64_t v = static_cast<int64_t>(t) + shift_;
		if (v < 0)
			fail(in_.path + "'s times fall before the first input's clock began (its machine booted " +
			     "earlier); give the recording of the machine up longest first");
		return static_cast<uint64_t>(std::max<int64_t>(v, 0));
	}
	// The key of a measure about no process names its host: the hosts'
	// NICs and PSI are not one track.
	std::string key(uint32_t pid, const std::string &key) const
	{
		return pid ? key : key.empty() ? in_.host : in_.host + " " + key;
	}
	void span(Span &s)
	{
		s.start_ns = time(s.start_ns);
		s.pid = pid(s.pid);
		s.tid = pid(s.tid);
		// The issuing call a span ran the work of (pipeline/issues.h).
		if (auto it = s.args.find("issued_ns"); it != s.args.end() && it->is_number_integer())
			*it = time(it->get<uint64_t>());
		if (auto it = s.args.find("issued_tid"); it != s.args.end() && it->is_number_integer())
			*it = pid(it->get<uint32_t>());
	}
	Result<void> result() const
	{
		if (error_.empty())
			return {};
		return make_error(ErrorKind::BadInput, error_); // an input that cannot be merged as it is
	}

private:
	void fail(const std::string &e)
	{
		if (error_.empty())
			error_ = e;
	}
	const MergedInput &in_;
	int64_t shift_;
	std::string error_;
};

Result<std::vector<Input>> open_inputs(const std::vector<std::string> &paths)
{
	std::vector<Input> ins;
	std::vector<std::string> hostnames;
	for (size_t k = 0; k < paths.size(); k++) {
		auto reader = RecordingReader::open(paths[k]);
		if (!reader)
			return reader.error();
		auto rec = reader->read(false);
		if (!rec)
			return rec.error();
		if (rec->meta.count("merged_from"))
			return make_error(ErrorKind::BadInput,
					  paths[k] + " is already a merge of recordings; merge the recordings it was " +
						  "made from (its meta merged_from names them)");
		Input in{std::move(*reader), std::move(*rec), {}, {}};
		if (auto r = in.reader.each_span_with_int_args(kCollectiveArgs,
							       [&](const Span &s) { in.collectives.push_back(s); });
		    !r)
			return r.error();
		in.out.path = paths[k];
		in.out.pid_offset = static_cast<uint32_t>(k) * kPidStride;
		in.out.wall_offset_ns = in.rec.wall_offset_ns;
		in.out.clock_shift_ns = in.rec.wall_offset_ns - (k ? ins[0].rec.wall_offset_ns : in.rec.wall_offset_ns);
		auto host = in.rec.meta.find("hostname");
		hostnames.push_back(host == in.rec.meta.end() ? "" : host->second);
		ins.push_back(std::move(in));
	}
	auto labels = host_labels(hostnames, paths);
	for (size_t k = 0; k < ins.size(); k++)
		ins[k].out.host = labels[k];
	return ins;
}

// Each input's residual, from its collectives moved by wall offsets.
void align(std::vector<Input> &ins)
{
	std::vector<std::vector<Span>> shifted;
	for (const Input &in : ins) {
		shifted.push_back(in.collectives);
		for (Span &s : shifted.back())
			s.start_ns = static_cast<uint64_t>(static_cast<int64_t>(s.start_ns) + in.out.clock_shift_ns);
	}
	auto residuals = estimate_residuals(shifted);
	for (size_t k = 0; k < ins.size(); k++)
		ins[k].out.residual = residuals[k];
}

json input_meta(const Input &in)
{
	const MergedInput &o = in.out;
	return {{"file", o.path},
		{"host", o.host},
		{"pid_offset", o.pid_offset},
		{"wall_offset_ns", o.wall_offset_ns},
		{"clock_shift_ns", o.clock_shift_ns},
		{"residual_ns", o.residual.ns},
		{"residual_rounds", o.residual.rounds},
		{"meta", in.rec.meta}};
}

// The merge's meta: what was merged and how, where each process came
// from, and what readers of any recording look up (the sampler's period,
// whether spans measure their wait to run).
Result<void> write_meta(StoreWriter &w, const std::vector<Input> &ins)
{
	json from = json::array(), origins = json::object();
	std::vector<std::string> files;
	uint64_t period = 0;
	bool runq = true; // every input's spans measure their wait to run
	std::vector<std::string> incomplete;
	for (size_t k = 0; k < ins.size(); k++) {
		const Input &in = ins[k];
		from.push_back(input_meta(in));
		files.push_back(in.out.path);
		for (const Process &p : in.rec.processes)
			origins[std::to_string(p.pid + in.out.pid_offset)] = {
				{"host", in.out.host}, {"pid", p.pid}, {"input", k}};
		if (auto it = in.rec.meta.find("python_sample_period_ns"); it != in.rec.meta.end())
			period = std::max<uint64_t>(period, std::strtoull(it->second.c_str(), nullptr, 10));
		runq = runq && in.rec.meta.count("runq_measured");
		if (auto it = in.rec.meta.find("incomplete"); it != in.rec.meta.end())
			incomplete.push_back(in.out.path + ": " + it->second);
	}
	std::map<std::string, std::string> meta = {
		{"command", "eacgm merge " + join(files, " ")},
		{"eacgm_version", EACGM_VERSION},
		{"merged_from", from.dump(-1, ' ', false, json::error_handler_t::replace)},
		{kProcessOriginsMeta, origins.dump(-1, ' ', false, json::error_handler_t::replace)},
	};
	if (period)
		meta["python_sample_period_ns"] = std::to_string(period);
	// A span without runq_ns waited 0 only where its input measured it.
	if (runq)
		meta["runq_measured"] = "1";
	if (!incomplete.empty())
		meta["incomplete"] = "an input is incomplete (" + join(incomplete, "; ") + ")";
	for (const auto &[k, v] : meta)
		if (auto r = w.set_meta(k, v); !r)
			return r;
	return w.set_wall_offset(ins[0].rec.wall_offset_ns);
}

// An input's processes, threads, metrics, events and anomalies, moved.
Result<void> write_records(StoreWriter &w, Input &in, Mover &mv)
{
	for (Process p : in.rec.processes) {
		p.pid = mv.pid(p.pid);
		p.ppid = mv.pid(p.ppid);
		p.start_ns = p.start_ns ? mv.time(p.start_ns) : 0; // 0: not known
		p.end_ns = p.end_ns ? mv.time(p.end_ns) : 0;
		if (auto r = w.upsert_process(p); !r)
			return r;
	}
	for (Thread t : in.rec.threads) {
		t.pid = mv.pid(t.pid);
		t.tid = mv.pid(t.tid);
		if (auto r = w.upsert_thread(t); !r)
			return r;
	}
	for (Metric &m : in.rec.metrics) {
		m.ts_ns = mv.time(m.ts_ns);
		m.key = mv.key(m.pid, m.key);
		m.pid = mv.pid(m.pid);
	}
	for (Event &e : in.rec.events) {
		e.ts_ns = mv.time(e.ts_ns);
		e.key = mv.key(e.pid, e.key);
		e.pid = mv.pid(e.pid);
		e.tid = mv.pid(e.tid);
	}
	for (Anomaly &a : in.rec.anomalies) {
		a.ts_ns = mv.time(a.ts_ns);
		a.detected_ns = a.detected_ns ? mv.time(a.detected_ns) : 0;
		a.pid = mv.pid(a.pid);
		a.tid = mv.pid(a.tid);
	}
	if (auto r = mv.result(); !r)
		return r;
	if (auto r = w.add_metrics(in.rec.metrics); !r)
		return r;
	if (auto r = w.add_events(in.rec.events); !r)
		return r;
	return w.add_anomalies(in.rec.anomalies);
}

// An input's spans, read one at a time and written in batches.
Result<void> write_spans(StoreWriter &w, Input &in, Mover &mv)
{
	constexpr size_t kBatch = 8192;
	std::vector<Span> batch;
	Result<void> written;
	auto flush = [&] {
		if (written)
			written = mv.result();
		if (written)
			written = w.add_spans(batch);
		batch.clear();
	};
	auto r = in.reader.each_span(SpanOrder::as_recorded, [&](const Span &s) {
		batch.push_back(s);
		mv.span(batch.back());
		in.out.spans++;
		if (batch.size() == kBatch)
			flush();
	});
	if (!r)
		return r;
	flush();
	return written;
}

} // namespace

Result<std::vector<MergedInput>> merge_recordings(const std::vector<std::string> &inputs, const std::string &output)
{
	auto ins = open_inputs(inputs);
	if (!ins)
		return ins.error();
	align(*ins);
	auto w = StoreWriter::create(output);
	if (!w)
		return w.error();
	if (auto r = write_meta(*w, *ins); !r)
		return r.error();
	std::vector<Drop> drops;
	std::vector<MergedInput> out;
	for (Input &in : *ins) {
		Mover mv(in.out);
		if (auto r = write_records(*w, in, mv); !r)
			return r.error();
		if (auto r = write_spans(*w, in, mv); !r)
			return r.error();
		drops.insert(drops.end(), in.rec.drops.begin(), in.rec.drops.end());
		in.out.processes = in.rec.processes.size();
		out.push_back(in.out);
	}
	if (auto r = w->set_drops(drops); !r)
		return r.error();
	if (auto r = w->finish(); !r)
		return r.error();
	return out;
}

} // namespace eacgm
