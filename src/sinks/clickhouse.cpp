// SPDX-License-Identifier: Apache-2.0
#include "sinks/clickhouse.h"

#include <sys/random.h>

#include "common/clock.h"
#include "common/model.h"
#include "probe/spec.h"

namespace eacgm {

namespace {

constexpr uint64_t kFlushEveryNs = 1'000'000'000;
constexpr size_t kFlushAtBytes = 8u << 20;
constexpr uint64_t kForgetAfterNs = 10'000'000'000;
// Spans::around holds at most this many bytes of span rows (at a burst's
// half a million spans a second, 4 s of them would be some 180 MB): past
// it the oldest second held is let go, as if no anomaly came near it.
constexpr size_t kMaxHeldBytes = 32u << 20;

uint64_t random_u64()
{
	uint64_t v = 0;
	while (getrandom(&v, sizeof v, 0) != sizeof v) {
	}
	return v;
}

} // namespace

ClickHouseSink::ClickHouseSink(ClickHouseShipper &shipper, Identity id, Options o)
	: shipper_(shipper), id_(std::move(id)), o_(o), agent_(random_u64())
{
	wall_minus_mono_ = int64_t(clock_ns(CLOCK_REALTIME)) - int64_t(mono_ns()) + id_.clock_shift_ns;
	last_flush_ns_ = interval_ns_ = mono_ns();
}

std::optional<ClickHouseSink::Spans> ClickHouseSink::spans_of(const std::string &word)
{
	if (word == "all")
		return Spans::all;
	if (word == "around")
		return Spans::around;
	if (word == "none")
		return Spans::none;
	return std::nullopt;
}

// --- who made it

ClickHouseSink::Who &ClickHouseSink::who(uint32_t pid)
{
	auto [it, fresh] = who_.try_emplace(pid);
	if (fresh)
		it->second.job = id_.job;
	return it->second;
}

void ClickHouseSink::forget_ended(uint64_t now_ns)
{
	for (auto it = who_.begin(); it != who_.end();)
		if (it->second.ended_ns && now_ns - it->second.ended_ns > kForgetAfterNs)
			it = who_.erase(it);
		else
			++it;
}

Result<void> ClickHouseSink::process(const Process &p)
{
	Who &w = who(p.pid);
	if (!p.job.empty())
		w.job = p.job;
	if (p.rank >= 0)
		w.rank = p.rank;
	uint64_t now = mono_ns();
	if (p.end_ns && !w.ended_ns)
		w.ended_ns = now;
	Pending &out = rows_of(ClickHouseTable::processes);
	begin_row(out, wall(p.start_ns ? p.start_ns : now), w.job);
	RowBinary &r = out.rows;
	r.fixed(int32_t(w.rank));
	r.fixed(p.pid);
	r.fixed(p.ppid);
	r.string(p.comm);
	r.string(p.cmdline);
	r.fixed(p.start_ns ? wall(p.start_ns) : uint64_t(0));
	r.fixed(p.end_ns ? wall(p.end_ns) : uint64_t(0));
	r.fixed(int32_t(p.exit_code));
	end_row(r);
	return {};
}

// --- rows

void ClickHouseSink::begin_row(Pending &p, uint64_t wall_ns, const std::string &job)
{
	p.rows.fixed(uint16_t(wall_ns / 86'400'000'000'000ull)); // day
	p.rows.string(id_.host);
	p.rows.string(job);
	p.count++;
}

void ClickHouseSink::end_row(RowBinary &r)
{
	r.fixed(agent_);
	r.fixed(row_++);
}

// The columns a call's rows (spans, rounds, anomalies) begin with after
// (day, host, job): rank, pid, tid, layer, name, start_ns, dur_ns.
void ClickHouseSink::call_columns(RowBinary &r, int64_t rank, uint32_t pid, uint32_t tid, std::string_view layer,
				  std::string_view name, uint64_t start_ns, uint64_t dur_ns) const
{
	r.fixed(int32_t(rank));
	r.fixed(pid);
	r.fixed(tid);
	r.string(layer);
	r.string(name);
	r.fixed(wall(start_ns));
	r.fixed(dur_ns);
}

void ClickHouseSink::add_span_row(Pending &p, const Call &c, const Who &w)
{
	begin_row(p, wall(c.start_ns), w.job);
	RowBinary &r = p.rows;
	call_columns(r, w.rank >= 0 ? w.rank : c.rank, c.pid, c.tid, c.layer, c.name, c.start_ns, c.dur_ns);
	r.fixed(c.seq);
	r.fixed(c.bytes);
	r.fixed(c.ret);
	r.fixed(c.weight);
	end_row(r);
}

// A call: a row of `rounds` where it is a collective's, of `spans` where
// spans are shipped, and a part of its function's aggregate.
void ClickHouseSink::add_call(const Call &c)
{
	Who &w = who(c.pid);
	if (w.rank < 0 && c.rank >= 0)
		w.rank = c.rank; // learned from a collective: the process's from now on
	aggregate(c);
	if (c.seq >= 0)
		add_span_row(rows_of(ClickHouseTable::rounds), c, w);
	if (o_.spans == Spans::none)
		return;
	add_span_row(rows_of(ClickHouseTable::spans), c, w);
	spans_first_ns_ = std::min(spans_first_ns_, c.start_ns);
	spans_last_ns_ = std::max(spans_last_ns_, c.start_ns);
}

void ClickHouseSink::aggregate(const Call &c)
{
	key_.assign(reinterpret_cast<const char *>(&c.pid), sizeof c.pid);
	key_.append(c.layer);
	key_ += '\0';
	key_.append(c.name);
	auto it = aggregates_.find(key_);
	if (it == aggregates_.end())
		it = aggregates_.emplace(key_, Aggregate{c.pid, std::string(c.layer), std::string(c.name)}).first;
	Aggregate &a = it->second;
	a.calls += c.weight;
	a.total_ns += double(c.dur_ns) * c.weight;
	a.bytes += double(c.bytes) * c.weight;
	a.max_ns = std::max(a.max_ns, c.dur_ns);
}

void ClickHouseSink::ship_aggregates(uint64_t now_ns)
{
	Pending &out = rows_of(ClickHouseTable::aggregates);
	for (auto &[key, a] : aggregates_) {
		const Who &w = who(a.pid);
		begin_row(out, wall(interval_ns_), w.job);
		RowBinary &r = out.rows;
		r.fixed(int32_t(w.rank));
		r.fixed(a.pid);
		r.string(a.layer);
		r.string(a.name);
		r.fixed(wall(interval_ns_));
		r.fixed(now_ns - interval_ns_);
		r.fixed(a.calls);
		r.fixed(a.total_ns);
		r.fixed(a.max_ns);
		r.fixed(a.bytes);
		end_row(r);
	}
	aggregates_.clear();
	interval_ns_ = now_ns;
}

void ClickHouseSink::add_anomaly(const Anomaly &a)
{
	const Who &w = who(a.pid);
	Pending &out = rows_of(ClickHouseTable::anomalies);
	begin_row(out, wall(a.ts_ns), w.job);
	RowBinary &r = out.rows;
	call_columns(r, w.rank, a.pid, a.tid, a.layer, a.name, a.ts_ns, a.dur_ns);
	r.fixed(a.score);
	r.fixed(a.threshold);
	const nlohmann::json &top = a.causes.empty() ? nlohmann::json() : a.causes[0];
	r.string(top.is_object() && top.contains("kind") ? top["kind"].get<std::string>() : std::string());
	r.string(a.causes.dump());
	r.fixed(a.detected_ns ? wall(a.detected_ns) : uint64_t(0));
	end_row(r);
	asked_around(a.ts_ns);
}

void ClickHouseSink::add_event(const Event &e)
{
	auto int_of = [&](const char *k, int64_t none) {
		auto it = e.args.find(k);
		return it != e.args.end() && it->is_number_integer() ? it->get<int64_t>() : none;
	};
	int64_t start = int_of("start_ns", 0);
	const Who &w = who(e.pid);
	Pending &out = rows_of(ClickHouseTable::events);
	begin_row(out, wall(e.ts_ns), w.job);
	RowBinary &r = out.rows;
	r.fixed(int32_t(int_of("rank", w.rank)));
	r.fixed(e.pid);
	r.fixed(e.tid);
	r.string(e.layer);
	r.string(e.name);
	r.string(e.key);
	r.fixed(wall(e.ts_ns));
	r.fixed(start ? wall(uint64_t(start)) : uint64_t(0));
	r.fixed(int_of("seq", -1));
	r.fixed(int32_t(int_of("nranks", -1)));
	r.string(e.args.dump());
	end_row(r);
	if (e.name == "hang")
		asked_around(e.ts_ns);
}

void ClickHouseSink::add_metric(const Metric &m)
{
	auto it = m.pid ? who_.find(m.pid) : who_.end(); // a metric never adds a process
	Pending &out = rows_of(ClickHouseTable::metrics);
	begin_row(out, wall(m.ts_ns), it == who_.end() ? id_.job : it->second.job);
	RowBinary &r = out.rows;
	r.fixed(m.pid);
	r.string(m.layer);
	r.string(m.name);
	r.string(m.key);
	r.fixed(wall(m.ts_ns));
	r.fixed(m.value);
	end_row(r);
}

Result<void> ClickHouseSink::measures(const std::vector<Metric> &metrics, const std::vector<Event> &events)
{
	for (const Metric &m : metrics)
		add_metric(m);
	for (const Event &e : events)
		add_event(e);
	ship_due(mono_ns());
	return {};
}

void ClickHouseSink::add_typed(const TypedSpans &ts)
{
	for (size_t i = 0; i < ts.size(); i++) {
		const TypedSpan &t = ts.spans[i];
		const ProbeSpec &p = ts.specs->probes[t.spec_id];
		int64_t seq = -1, rank = -1;
		if (auto c = collectives_.of(ts, i)) {
			seq = int64_t(c->key.seq);
			rank = c->arrival.rank;
		} else if (auto r = collectives_.rank(ts, i)) {
			rank = *r;
		}
		add_call(
			{t.pid, t.tid, p.layer, p.function, t.start_ns, t.dur_ns, seq, rank, t.bytes, t.ret, t.weight});
	}
}

Result<void> ClickHouseSink::write(SpanBatch &b)
{
	for (const Span &s : b.spans) {
		int64_t seq = -1, rank = int_arg(s, "rank").value_or(-1);
		if (auto c = collective_of(s))
			seq = int64_t(c->key.seq);
		add_call(
			{s.pid, s.tid, s.layer, s.name, s.start_ns, s.dur_ns, seq, rank, s.bytes, s.ret, weight_of(s)});
	}
	if (!b.typed.empty())
		add_typed(b.typed);
	for (const Anomaly &a : b.anomalies)
		add_anomaly(a);
	size_t pending = 0;
	for (const Pending &p : pending_)
		pending += p.rows.size();
	if (pending >= kFlushAtBytes)
		ship(mono_ns(), false);
	ship_due(mono_ns());
	return {};
}

// --- what goes when

// An anomaly or a hang at at_ns: the seconds held from `around` before it
// go now, and the ones made until `around` after it go as they are made.
void ClickHouseSink::asked_around(uint64_t at_ns)
{
	if (o_.spans != Spans::around)
		return;
	ship_until_ns_ = std::max(ship_until_ns_, at_ns + o_.around_ns);
	while (!held_.empty() && held_.front().last_ns + o_.around_ns < at_ns)
		let_go_front(); // before the window
	for (Held &h : held_)
		shipper_.push("spans", std::move(h.rows.rows.bytes()), h.rows.count);
	held_.clear();
	held_bytes_ = 0;
}

void ClickHouseSink::ship_spans(uint64_t now_ns, bool end)
{
	Pending &p = rows_of(ClickHouseTable::spans);
	if (p.count && (o_.spans == Spans::all || spans_first_ns_ <= ship_until_ns_)) {
		shipper_.push("spans", std::move(p.rows.bytes()), p.count);
	} else if (p.count) {
		held_bytes_ += p.rows.size();
		held_.push_back({std::move(p), spans_last_ns_});
	}
	p = Pending();
	spans_first_ns_ = UINT64_MAX;
	spans_last_ns_ = 0;
	// Held past any window an anomaly found now could ask for (its call
	// started before now), or at the end: let go, never asked for.
	while (!held_.empty() && (end || held_.front().last_ns + 2 * o_.around_ns < now_ns))
		let_go_front();
	while (held_bytes_ > kMaxHeldBytes)
		let_go_front();
}

void ClickHouseSink::let_go_front()
{
	let_go_ += held_.front().rows.count;
	held_bytes_ -= held_.front().rows.rows.size();
	held_.pop_front();
}

void ClickHouseSink::ship_due(uint64_t now_ns)
{
	if (now_ns - last_flush_ns_ >= kFlushEveryNs)
		ship(now_ns, false);
}

Result<void> ClickHouseSink::tick(uint64_t now_ns)
{
	ship_due(now_ns);
	return {};
}

Result<void> ClickHouseSink::finish()
{
	ship(mono_ns(), true);
	return {};
}

void ClickHouseSink::ship(uint64_t now_ns, bool end)
{
	last_flush_ns_ = now_ns;
	forget_ended(now_ns);
	if (end || now_ns - interval_ns_ >= o_.aggregate_ns)
		ship_aggregates(now_ns);
	ship_spans(now_ns, end);
	for (const ClickHouseTableDef &d : kClickHouseTables) {
		Pending &p = rows_of(d.table);
		if (d.table == ClickHouseTable::spans || !p.count)
			continue;
		shipper_.push(d.name, std::move(p.rows.bytes()), p.count);
		p = Pending();
	}
}

} // namespace eacgm
