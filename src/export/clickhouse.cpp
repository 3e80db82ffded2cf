#include "export/clickhouse.h"

#include <chrono>
#include <cstdio>
#include <regex>
#include <sys/random.h>
#include <zlib.h>
#include <httplib.h>

#include "common/clock.h"
#include "common/units.h"
#include "probe/spec.h"

namespace eacgm {

Result<ClickHouseTarget> parse_clickhouse_url(const std::string &url, const std::string &cluster)
{
	static const std::regex identifier(R"(^[A-Za-z_][A-Za-z0-9_]*$)");
	if (!cluster.empty() && !std::regex_match(cluster, identifier))
		return make_error("ClickHouse cluster '" + cluster +
				  "' is not a name of letters, digits and underscores, as remote_servers names it");
	// scheme, user, password, host, port, database
	static const std::regex form(
		R"(^http://(?:([^:@/]+)(?::([^@/]*))?@)?([^:/@]+)(?::(\d{1,5}))?(?:/([A-Za-z_][A-Za-z0-9_]*)?)?/?$)");
	std::smatch m;
	std::string what = "ClickHouse address '" + url + "'";
	if (url.rfind("https://", 0) == 0)
		return make_error(what +
				  ": https is not supported; give the server's plain HTTP port (8123) on a "
				  "trusted network, or a local proxy that adds TLS");
	if (!std::regex_match(url, m, form))
		return make_error(what +
				  " is not of the form http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] "
				  "(e.g. http://ch.example:8123/prod)");
	ClickHouseTarget t;
	t.url = url;
	t.user = m[1];
	t.password = m[2];
	t.host = m[3];
	if (m[4].matched) {
		t.port = std::stoi(m[4]);
		if (t.port < 1 || t.port > 65535)
			return make_error(what + ": the port must be a number from 1 to 65535");
	}
	if (m[5].matched && m[5].length())
		t.database = m[5];
	t.cluster = cluster;
	return t;
}

namespace {

std::string gzip(const std::string &in)
{
	z_stream z = {};
	// 15 + 16: a gzip wrapper, which ClickHouse takes as Content-Encoding: gzip.
	deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	std::string out(deflateBound(&z, in.size()), '\0');
	z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in.data()));
	z.avail_in = uInt(in.size());
	z.next_out = reinterpret_cast<Bytef *>(out.data());
	z.avail_out = uInt(out.size());
	deflate(&z, Z_FINISH);
	out.resize(z.total_out);
	deflateEnd(&z);
	return out;
}

uint64_t random_u64()
{
	uint64_t v = 0;
	while (getrandom(&v, sizeof v, 0) != sizeof v) {
	}
	return v;
}

} // namespace

Result<std::string> ClickHouseClient::query(const std::string &sql, const std::string &body, uint64_t *sent_bytes) const
{
	httplib::Client c(t_.host, t_.port);
	c.set_connection_timeout(2);
	c.set_read_timeout(30);
	c.set_write_timeout(30);
	if (!t_.user.empty())
		c.set_basic_auth(t_.user.c_str(), t_.password.c_str());
	httplib::Headers h;
	if (!body.empty())
		h.emplace("Content-Encoding", "gzip");
	std::string packed = body.empty() ? "" : gzip(body);
	if (sent_bytes)
		*sent_bytes = packed.size();
	httplib::Result r = body.empty()
		? c.Post("/", h, sql, "text/plain")
		: c.Post("/?query=" + httplib::detail::encode_query_param(sql), h, packed, "application/octet-stream");
	if (!r)
		return make_error("ClickHouse at " + t_.url + " did not answer (" + httplib::to_string(r.error()) +
				  ")");
	if (r->status != 200) {
		std::string said = r->body.substr(0, r->body.find('\n'));
		return make_error("ClickHouse at " + t_.url + " answered " + std::to_string(r->status) + ": " + said);
	}
	return r->body;
}

std::vector<std::string> clickhouse_schema(const ClickHouseTarget &t)
{
	const std::string &db = t.database;
	// Where a cluster is named, each table is the Distributed one over its
	// shards' `<table>_local`, which hold the rows; a row's shard is a hash
	// of its (agent, row), so a batch sent twice lands where it did the
	// first time and is folded there.
	std::string suffix = t.cluster.empty() ? "" : "_local";
	auto table = [&](const std::string &name, const std::string &columns, const std::string &order) {
		std::vector<std::string> out = {
			"CREATE TABLE IF NOT EXISTS " + db + "." + name + suffix + " (" + columns +
			") ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY (" + order + ")"};
		if (!t.cluster.empty())
			out.push_back("CREATE TABLE IF NOT EXISTS " + db + "." + name + " AS " + db + "." + name +
				      suffix + " ENGINE = Distributed(" + t.cluster + ", " + db + ", " + name + suffix +
				      ", cityHash64(agent, row))");
		return out;
	};
	// Ordered for the cluster's questions (a job's spans over time); a
	// partition a day, which the agent drops past its age (18.16 has no
	// TTL); ReplacingMergeTree folds a batch sent twice by its (agent, row).
	std::vector<std::string> out = {"CREATE DATABASE IF NOT EXISTS " + db};
	for (auto &sql : table("spans",
			       "day Date, host String, job String, rank Int32, pid UInt32, tid UInt32, "
			       "layer String, name String, start_ns UInt64, dur_ns UInt64, seq Int64, bytes UInt64, "
			       "ret Int64, weight Float64, agent UInt64, row UInt64",
			       "job, host, start_ns, agent, row"))
		out.push_back(sql);
	// kind: the event's name ("hang", "hang_over", "xid", ...); key: what
	// it is about (the call in flight, "gpu0"); start_ns, seq and nranks:
	// a hang's call (0, -1, -1 elsewhere); args: all of it, JSON.
	for (auto &sql : table("events",
			       "day Date, host String, job String, rank Int32, pid UInt32, tid UInt32, "
			       "layer String, kind String, key String, ts_ns UInt64, start_ns UInt64, seq Int64, "
			       "nranks Int32, args String, agent UInt64, row UInt64",
			       "job, host, ts_ns, agent, row"))
		out.push_back(sql);
	return out;
}

void RowBinary::string(std::string_view s)
{
	uint64_t n = s.size();
	do {
		uint8_t b = n & 0x7f;
		n >>= 7;
		buf_.push_back(char(n ? b | 0x80 : b));
	} while (n);
	buf_.append(s);
}

// --- the shipper

ClickHouseShipper::ClickHouseShipper(ClickHouseTarget t, Options o) : client_(std::move(t)), o_(o)
{
	thread_ = std::thread([this] { run(); });
}

ClickHouseShipper::~ClickHouseShipper()
{
	if (thread_.joinable())
		finish(0);
}

void ClickHouseShipper::push(std::string table, std::string rows, uint64_t nrows)
{
	std::lock_guard<std::mutex> l(mu_);
	queued_bytes_ += rows.size();
	queue_.push_back({std::move(table), std::move(rows), nrows});
	// The oldest waiting batch goes: the newest rows are the ones an
	// operator asks about (what hangs now). The one being sent is not here.
	while (queued_bytes_ > o_.max_queued_bytes && queue_.size() > 1) {
		queued_bytes_ -= queue_.front().rows.size();
		counts_.rows_dropped += queue_.front().nrows;
		queue_.pop_front();
	}
	cv_.notify_all();
}

ClickHouseShipper::Counts ClickHouseShipper::counts() const
{
	std::lock_guard<std::mutex> l(mu_);
	return counts_;
}

ClickHouseShipper::Counts ClickHouseShipper::finish(double deadline_s)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
	{
		std::unique_lock<std::mutex> l(mu_);
		stopping_ = true;
		cv_.notify_all();
		cv_.wait_until(l, deadline, [&] { return queue_.empty() && !sending_; });
		abandon_ = true;
	}
	cv_.notify_all();
	thread_.join();
	std::lock_guard<std::mutex> l(mu_);
	for (auto &b : queue_)
		counts_.rows_dropped += b.nrows;
	queue_.clear();
	queued_bytes_ = 0;
	return counts_;
}

void ClickHouseShipper::wait_before_retry(double s)
{
	std::unique_lock<std::mutex> l(mu_);
	cv_.wait_for(l, std::chrono::duration<double>(s), [&] { return abandon_; });
}

bool ClickHouseShipper::ensure_schema()
{
	if (schema_ok_)
		return true;
	for (auto &sql : clickhouse_schema(client_.target()))
		if (auto r = client_.query(sql); !r) {
			std::lock_guard<std::mutex> l(mu_);
			counts_.last_error = r.error().message;
			return false;
		}
	return schema_ok_ = true;
}

bool ClickHouseShipper::send(const Batch &b)
{
	uint64_t wire = 0;
	auto r = client_.query("INSERT INTO " + client_.target().database + "." + b.table + " FORMAT RowBinary", b.rows,
			       &wire);
	std::lock_guard<std::mutex> l(mu_);
	if (!r) {
		counts_.last_error = r.error().message;
		return false;
	}
	counts_.last_error.clear();
	counts_.bytes_sent += wire;
	return true;
}

std::string ClickHouseShipper::Counts::describe(const std::string &url) const
{
	auto n = [&](const char *table) {
		auto it = sent.find(table);
		return it == sent.end() ? uint64_t(0) : it->second;
	};
	std::string out = std::to_string(n("spans")) + " spans";
	if (n("events"))
		out += " and " + std::to_string(n("events")) + " events";
	out += " shipped to " + url + " (" + format_bytes(bytes_sent) + " sent";
	if (rows_sent) {
		char per[32];
		snprintf(per, sizeof per, ", %.1f B a row", double(bytes_sent) / double(rows_sent));
		out += per;
	}
	out += ")";
	if (rows_dropped)
		out += ", " + std::to_string(rows_dropped) + " dropped (" + last_error + ")";
	return out;
}

// Batches go in order, one at a time: taken off the queue, then tried
// until they go (a failure waits first_retry_s, doubling up to
// max_retry_s), or finish()'s deadline abandons them (their rows counted
// as dropped).
void ClickHouseShipper::run()
{
	// The tables from the start, not from the first row: an agent whose
	// node is idle still makes its shard's tables, which queries through a
	// Distributed table over every shard need. Tried again with each batch.
	ensure_schema();
	double backoff = o_.first_retry_s;
	while (true) {
		Batch b;
		{
			std::unique_lock<std::mutex> l(mu_);
			cv_.wait(l, [&] { return abandon_ || !queue_.empty() || stopping_; });
			if (abandon_ || queue_.empty())
				return;
			b = std::move(queue_.front());
			queue_.pop_front();
			queued_bytes_ -= b.rows.size();
			sending_ = true;
		}
		while (!(ensure_schema() && send(b))) {
			{
				std::lock_guard<std::mutex> l(mu_);
				counts_.retries++;
				if (abandon_) {
					counts_.rows_dropped += b.nrows;
					sending_ = false;
					return;
				}
			}
			wait_before_retry(backoff);
			backoff = std::min(backoff * 2, o_.max_retry_s);
		}
		std::lock_guard<std::mutex> l(mu_);
		counts_.rows_sent += b.nrows;
		counts_.sent[b.table] += b.nrows;
		counts_.batches_sent++;
		sending_ = false;
		backoff = o_.first_retry_s;
		cv_.notify_all(); // finish() waits for an empty queue
	}
}

// --- the sink

namespace {
constexpr uint64_t kFlushEveryNs = 1'000'000'000;
constexpr size_t kFlushAtBytes = 8u << 20;
} // namespace

ClickHouseSink::ClickHouseSink(ClickHouseShipper &shipper, Identity id)
	: shipper_(shipper), id_(std::move(id)), agent_(random_u64())
{
	wall_minus_mono_ = int64_t(clock_ns(CLOCK_REALTIME)) - int64_t(mono_ns()) + id_.clock_shift_ns;
	last_flush_ns_ = mono_ns();
}

Result<void> ClickHouseSink::process(const Process &p)
{
	Who &w = who(p.pid);
	if (!p.job.empty())
		w.job = p.job;
	if (p.rank >= 0)
		w.rank = p.rank;
	if (p.end_ns && !w.ended_ns)
		w.ended_ns = mono_ns();
	return {};
}

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
		if (it->second.ended_ns && now_ns - it->second.ended_ns > 10'000'000'000ull)
			it = who_.erase(it);
		else
			++it;
}

// The columns every table begins with: day, host, job.
void ClickHouseSink::begin_row(Pending &p, uint64_t wall_ns, const Who &w)
{
	p.rows.fixed(uint16_t(wall_ns / 86'400'000'000'000ull)); // day
	p.rows.string(id_.host);
	p.rows.string(w.job);
	p.count++;
}

void ClickHouseSink::add_row(uint32_t pid, uint32_t tid, std::string_view layer, std::string_view name,
			     uint64_t start_ns, uint64_t dur_ns, int64_t seq, int64_t rank, uint64_t bytes, int64_t ret,
			     double weight)
{
	Who &w = who(pid);
	if (w.rank < 0 && rank >= 0)
		w.rank = rank; // learned from a collective: the process's from now on
	uint64_t wall = uint64_t(int64_t(start_ns) + wall_minus_mono_);
	begin_row(spans_, wall, w);
	RowBinary &r = spans_.rows;
	r.fixed(int32_t(w.rank >= 0 ? w.rank : rank));
	r.fixed(pid);
	r.fixed(tid);
	r.string(layer);
	r.string(name);
	r.fixed(wall);
	r.fixed(dur_ns);
	r.fixed(seq);
	r.fixed(bytes);
	r.fixed(ret);
	r.fixed(weight);
	r.fixed(agent_);
	r.fixed(row_++);
}

Result<void> ClickHouseSink::measures(const std::vector<Metric> &, const std::vector<Event> &events)
{
	for (const Event &e : events) {
		auto int_of = [&](const char *k, int64_t none) {
			auto it = e.args.find(k);
			return it != e.args.end() && it->is_number_integer() ? it->get<int64_t>() : none;
		};
		int64_t start = int_of("start_ns", 0);
		uint64_t wall = uint64_t(int64_t(e.ts_ns) + wall_minus_mono_);
		const Who &w = who(e.pid);
		begin_row(events_, wall, w);
		RowBinary &r = events_.rows;
		r.fixed(int32_t(int_of("rank", w.rank)));
		r.fixed(e.pid);
		r.fixed(e.tid);
		r.string(e.layer);
		r.string(e.name);
		r.string(e.key);
		r.fixed(wall);
		r.fixed(uint64_t(start ? start + wall_minus_mono_ : 0));
		r.fixed(int_of("seq", -1));
		r.fixed(int32_t(int_of("nranks", -1)));
		r.string(e.args.dump());
		r.fixed(agent_);
		r.fixed(row_++);
	}
	tick();
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
		add_row(t.pid, t.tid, p.layer, p.function, t.start_ns, t.dur_ns, seq, rank, t.bytes, t.ret, t.weight);
	}
}

Result<void> ClickHouseSink::write(SpanBatch &b)
{
	for (const Span &s : b.spans) {
		int64_t seq = -1, rank = int_arg(s, "rank").value_or(-1);
		if (auto c = collective_of(s))
			seq = int64_t(c->key.seq);
		add_row(s.pid, s.tid, s.layer, s.name, s.start_ns, s.dur_ns, seq, rank, s.bytes, s.ret, weight_of(s));
	}
	if (!b.typed.empty())
		add_typed(b.typed);
	if (spans_.rows.size() >= kFlushAtBytes)
		flush();
	tick();
	return {};
}

void ClickHouseSink::tick()
{
	if (mono_ns() - last_flush_ns_ >= kFlushEveryNs)
		flush();
}

void ClickHouseSink::flush()
{
	last_flush_ns_ = mono_ns();
	forget_ended(last_flush_ns_);
	for (auto [table, p] : {std::pair{"spans", &spans_}, std::pair{"events", &events_}}) {
		if (!p->count)
			continue;
		shipper_.push(table, std::move(p->rows.bytes()), p->count);
		*p = Pending();
	}
}

} // namespace eacgm
