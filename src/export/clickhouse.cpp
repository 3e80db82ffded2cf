// SPDX-License-Identifier: Apache-2.0
#include "export/clickhouse.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <regex>
#include <sstream>
#include <zlib.h>
#include <httplib.h>

#include "common/text.h"
#include "common/units.h"

namespace eacgm {

Result<ClickHouseTarget> parse_clickhouse_url(const std::string &url, const std::string &cluster)
{
	static const std::regex identifier(R"(^[A-Za-z_][A-Za-z0-9_]*$)");
	if (!cluster.empty() && !std::regex_match(cluster, identifier))
		return make_error(
			ErrorKind::BadInput,
			"ClickHouse cluster '" + cluster +
				"' is not a name of letters, digits and underscores, as remote_servers names it");
	// scheme, user, password, host, port, database
	static const std::regex form(
		R"(^http://(?:([^:@/]+)(?::([^@/]*))?@)?([^:/@]+)(?::(\d{1,5}))?(?:/([A-Za-z_][A-Za-z0-9_]*)?)?/?$)");
	std::smatch m;
	std::string what = "ClickHouse address '" + url + "'";
	if (url.rfind("https://", 0) == 0)
		return make_error(ErrorKind::BadInput,
				  what +
					  ": https is not supported; give the server's plain HTTP port (8123) on a "
					  "trusted network, or a local proxy that adds TLS");
	if (!std::regex_match(url, m, form))
		return make_error(ErrorKind::BadInput,
				  what +
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
			return make_error(ErrorKind::BadInput, what + ": the port must be a number from 1 to 65535");
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

// The kind of an HTTP error status, as ClickHouse answers them (an unknown
// table or database is 404, a bad query 400, a full disk 507).
ErrorKind kind_of_http_status(int status)
{
	switch (status) {
	case 400: return ErrorKind::BadInput;
	case 401:
	case 403: return ErrorKind::Permission;
	case 404: return ErrorKind::NotFound;
	case 507: return ErrorKind::NoSpace;
	default: return ErrorKind::Other;
	}
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
		return make_error(ErrorKind::Other,
				  "ClickHouse at " + t_.url + " did not answer (" + httplib::to_string(r.error()) +
					  ")");
	if (r->status != 200) {
		std::string said = r->body.substr(0, r->body.find('\n'));
		return make_error(kind_of_http_status(r->status),
				  "ClickHouse at " + t_.url + " answered " + std::to_string(r->status) + ": " + said);
	}
	return r->body;
}

namespace {
// The columns every row begins and ends with.
#define EACGM_CH_HEAD "day Date, host String, job String, "
#define EACGM_CH_TAIL ", agent UInt64, row UInt64"
// spans and rounds: a traced call each.
constexpr const char *kSpanColumns =
	EACGM_CH_HEAD "rank Int32, pid UInt32, tid UInt32, layer String, name String, start_ns UInt64, dur_ns UInt64, "
		      "seq Int64, bytes UInt64, ret Int64, weight Float64" EACGM_CH_TAIL;
} // namespace

// In ClickHouseTable's order (the static_assert below checks it; the sink
// indexes its pending rows by the enum); docs/clickhouse.md has each
// column's meaning.
extern constexpr std::array<ClickHouseTableDef, kClickHouseTableCount> kClickHouseTables = {{
	{ClickHouseTable::spans, "spans", kSpanColumns, "job, host, start_ns, agent, row"},
	{ClickHouseTable::rounds, "rounds", kSpanColumns, "job, seq, rank, agent, row"},
	{ClickHouseTable::aggregates, "aggregates",
	 EACGM_CH_HEAD "rank Int32, pid UInt32, layer String, name String, start_ns UInt64, interval_ns UInt64, "
		       "calls Float64, total_ns Float64, max_ns UInt64, bytes Float64" EACGM_CH_TAIL,
	 "job, host, start_ns, agent, row"},
	{ClickHouseTable::anomalies, "anomalies",
	 EACGM_CH_HEAD
	 "rank Int32, pid UInt32, tid UInt32, layer String, name String, start_ns UInt64, dur_ns UInt64, "
	 "score Float64, threshold Float64, cause String, causes String, detected_ns UInt64" EACGM_CH_TAIL,
	 "job, host, start_ns, agent, row"},
	{ClickHouseTable::events, "events",
	 EACGM_CH_HEAD "rank Int32, pid UInt32, tid UInt32, layer String, kind String, key String, ts_ns UInt64, "
		       "start_ns UInt64, seq Int64, nranks Int32, args String" EACGM_CH_TAIL,
	 "job, host, ts_ns, agent, row"},
	{ClickHouseTable::metrics, "metrics",
	 EACGM_CH_HEAD "pid UInt32, layer String, name String, key String, ts_ns UInt64, value Float64" EACGM_CH_TAIL,
	 "host, name, ts_ns, agent, row"},
	{ClickHouseTable::processes, "processes",
	 EACGM_CH_HEAD "rank Int32, pid UInt32, ppid UInt32, comm String, cmdline String, start_ns UInt64, "
		       "end_ns UInt64, exit_code Int32" EACGM_CH_TAIL,
	 "job, host, pid, agent, row"},
}};
#undef EACGM_CH_HEAD
#undef EACGM_CH_TAIL

static_assert([] {
	for (size_t i = 0; i < kClickHouseTableCount; i++)
		if (size_t(kClickHouseTables[i].table) != i)
			return false;
	return true;
}());

std::string clickhouse_rows_table(const ClickHouseTarget &t, const ClickHouseTableDef &d)
{
	return std::string(d.name) + (t.cluster.empty() ? "" : "_local");
}

bool clickhouse_has_ttl(const std::string &version)
{
	int major = 0, minor = 0;
	if (sscanf(version.c_str(), "%d.%d", &major, &minor) != 2)
		return false;
	return major > 19 || (major == 19 && minor >= 6);
}

std::vector<std::string> clickhouse_schema(const ClickHouseTarget &t, unsigned ttl_days)
{
	const std::string &db = t.database;
	// Where a cluster is named, each table is the Distributed one over its
	// shards' `<table>_local`, which hold the rows; a row's shard is a hash
	// of its (agent, row), so a batch sent twice lands where it did the
	// first time and is folded there.
	// Ordered for the cluster's questions (a job's rows over time); a
	// partition a day, which the agent drops past its age (18.16 has no
	// TTL); ReplacingMergeTree folds a batch sent twice by its (agent, row).
	std::vector<std::string> out = {"CREATE DATABASE IF NOT EXISTS " + db};
	for (const ClickHouseTableDef &d : kClickHouseTables) {
		std::string name = d.name, rows = clickhouse_rows_table(t, d);
		out.push_back("CREATE TABLE IF NOT EXISTS " + db + "." + rows + " (" + d.columns +
			      ") ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY (" + d.order + ")" +
			      (ttl_days ? " TTL day + toIntervalDay(" + std::to_string(ttl_days) + ")" : ""));
		if (!t.cluster.empty())
			out.push_back("CREATE TABLE IF NOT EXISTS " + db + "." + name + " AS " + db + "." + rows +
				      " ENGINE = Distributed(" + t.cluster + ", " + db + ", " + rows +
				      ", cityHash64(agent, row))");
	}
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
		counts_.dropped[queue_.front().table] += queue_.front().nrows;
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
	for (auto &b : queue_) {
		counts_.rows_dropped += b.nrows;
		counts_.dropped[b.table] += b.nrows;
	}
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
	auto failed = [&](const Error &e) {
		std::lock_guard<std::mutex> l(mu_);
		counts_.last_error = e.message;
		return false;
	};
	auto version = client_.query("SELECT version()");
	if (!version)
		return failed(version.error());
	ttl_ = clickhouse_has_ttl(version.value());
	for (auto &sql : clickhouse_schema(client_.target(), ttl_ ? o_.keep_days : 0))
		if (auto r = client_.query(sql); !r)
			return failed(r.error());
	return schema_ok_ = true;
}

// The day partitions older than keep_days, of this server's tables (the
// `_local` ones where they are Distributed), dropped: 18.16 has no TTL.
// A failure is tried again at the next hour.
void ClickHouseShipper::drop_old_days()
{
	if (!o_.keep_days || ttl_ || !schema_ok_)
		return;
	time_t first_kept = time(nullptr) - time_t(o_.keep_days) * 86400;
	struct tm day;
	gmtime_r(&first_kept, &day);
	char cutoff[16];
	strftime(cutoff, sizeof cutoff, "%Y-%m-%d", &day);
	const ClickHouseTarget &t = client_.target();
	for (const ClickHouseTableDef &d : kClickHouseTables) {
		std::string table = clickhouse_rows_table(t, d);
		auto old = client_.query("SELECT DISTINCT partition FROM system.parts WHERE database = '" + t.database +
					 "' AND table = '" + table + "' AND active AND partition < '" + cutoff +
					 "' ORDER BY partition FORMAT TabSeparated");
		if (!old)
			return;
		std::istringstream in(old.value());
		for (std::string p; std::getline(in, p);) {
			if (!client_.query("ALTER TABLE " + t.database + "." + table + " DROP PARTITION '" + p + "'"))
				return;
			std::lock_guard<std::mutex> l(mu_);
			counts_.partitions_dropped++;
		}
	}
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
	auto n = [](const std::map<std::string, uint64_t> &by, const char *table) {
		auto it = by.find(table);
		return it == by.end() ? uint64_t(0) : it->second;
	};
	std::string out = std::to_string(n(sent, "spans")) + " spans";
	std::vector<std::string> more;
	for (auto &[table, rows] : sent)
		if (table != "spans" && rows)
			more.push_back(table + " " + std::to_string(rows));
	if (!more.empty())
		out += " and " + std::to_string(rows_sent - n(sent, "spans")) + " more rows (" + join(more, ", ") + ")";
	out += " shipped to " + url + " (" + format_bytes(bytes_sent) + " sent";
	if (rows_sent) {
		char per[32];
		snprintf(per, sizeof per, ", %.1f B a row", double(bytes_sent) / double(rows_sent));
		out += per;
	}
	out += ")";
	if (rows_dropped)
		out += ", " + std::to_string(rows_dropped) + " dropped (" + std::to_string(n(dropped, "spans")) +
			" of them spans; " + last_error + ")";
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
	drop_old_days();
	auto next_drop = std::chrono::steady_clock::now() + std::chrono::hours(1);
	double backoff = o_.first_retry_s;
	while (true) {
		Batch b;
		{
			std::unique_lock<std::mutex> l(mu_);
			if (!cv_.wait_until(l, next_drop, [&] { return abandon_ || !queue_.empty() || stopping_; })) {
				l.unlock();
				drop_old_days();
				next_drop = std::chrono::steady_clock::now() + std::chrono::hours(1);
				continue;
			}
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
					counts_.dropped[b.table] += b.nrows;
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

} // namespace eacgm
