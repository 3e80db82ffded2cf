// SPDX-License-Identifier: Apache-2.0
// Shipping what eacgm records to ClickHouse, over its HTTP interface: the
// store past one node. Rows are encoded in ClickHouse's RowBinary format on
// the pipeline's thread (a few fixed fields and two short strings a span),
// gathered for about a second, then handed to a thread of their own that
// compresses them (gzip) and posts them, retrying with back-off while the
// server is away. The pipeline never waits on the network: the hand-over
// queue is bounded, and what does not fit or cannot be sent by the end is
// counted as dropped, never silently lost. A batch sent twice (a reply
// lost after the server took it) doubles no answer: every row carries
// (agent, row), unique per agent run, which the tables' ReplacingMergeTree
// folds and queries count by (docs/clickhouse.md).
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace eacgm {

// Where to ship: ClickHouse's HTTP address, "http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]"
// (port 8123 and database "eacgm" unless given).
struct ClickHouseTarget {
	std::string host;
	int port = 8123;
	std::string database = "eacgm";
	std::string user, password;
	std::string url; // as given, for messages
	// A cluster of the server's remote_servers: the tables are Distributed
	// ones over its shards (clickhouse_schema); "": plain tables.
	std::string cluster;
};
Result<ClickHouseTarget> parse_clickhouse_url(const std::string &url, const std::string &cluster = "");

// One statement at a time over HTTP: the answer's text, or an error that
// names the server and what it said.
class ClickHouseClient {
public:
	explicit ClickHouseClient(ClickHouseTarget t) : t_(std::move(t)) {}
	// body (RowBinary rows of an INSERT ... FORMAT RowBinary) is sent
	// gzip-compressed; *sent_bytes, where given, is what went on the wire.
	Result<std::string> query(const std::string &sql, const std::string &body = "",
				  uint64_t *sent_bytes = nullptr) const;
	const ClickHouseTarget &target() const { return t_; }

private:
	ClickHouseTarget t_;
};

// The tables eacgm ships to, created on first use (IF NOT EXISTS: an
// operator's own tables of these names, such as Distributed ones over a
// cluster's shards, are used as they are). With t.cluster, the rows'
// tables are `<table>_local` on the server shipped to, and `<table>` the
// Distributed one over the cluster's shards, which every insert and query
// goes through; each shard needs its own `_local` tables (an agent
// shipping to it makes them, or `eacgm cluster schema` prints them).
std::vector<std::string> clickhouse_schema(const ClickHouseTarget &t, unsigned ttl_days = 0);
// Whether a server of this version() has table TTLs (19.6 on).
bool clickhouse_has_ttl(const std::string &version);

// Every table eacgm ships to (docs/clickhouse.md): each row begins with
// (day, host, job) and ends with (agent, row).
enum class ClickHouseTable { spans, rounds, aggregates, anomalies, events, metrics, processes };
inline constexpr size_t kClickHouseTableCount = size_t(ClickHouseTable::processes) + 1;
struct ClickHouseTableDef {
	ClickHouseTable table;
	const char *name;
	const char *columns; // as CREATE TABLE has them, in the order RowBinary rows give them
	const char *order;   // the MergeTree key
};
extern const std::array<ClickHouseTableDef, kClickHouseTableCount> kClickHouseTables;
// The table on a server that holds a table's rows: `<table>_local` where
// t.cluster makes `<table>` the Distributed one over the shards, else it.
std::string clickhouse_rows_table(const ClickHouseTarget &t, const ClickHouseTableDef &d);

// ClickHouse's RowBinary: little-endian integers, strings as a LEB128
// length and their bytes, a Date as days since 1970-01-01 (UInt16).
class RowBinary {
public:
	template <class T>
	void fixed(T v)
	{
		static_assert(std::is_arithmetic_v<T>);
		buf_.append(reinterpret_cast<const char *>(&v), sizeof v);
	}
	void string(std::string_view s);
	std::string &bytes() { return buf_; }
	size_t size() const { return buf_.size(); }

private:
	std::string buf_;
};
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "RowBinary::fixed writes the host's byte order");

// The thread that posts batches, and what became of their rows.
class ClickHouseShipper {
public:
	struct Options {
		size_t max_queued_bytes = 64u << 20; // past it the oldest batch waiting is dropped
		double first_retry_s = 0.5;          // doubled per failure, up to max_retry_s
		double max_retry_s = 30;
		// Days of rows kept: older day partitions are dropped, by a TTL
		// where the server has them (19.6 on), else by this thread at its
		// start and every hour (of the tables on the server it ships to:
		// each shard's agents drop its own). 0: every day kept.
		unsigned keep_days = 0;
	};
	struct Counts {
		uint64_t rows_sent = 0, rows_dropped = 0, batches_sent = 0, retries = 0;
		uint64_t partitions_dropped = 0;               // day partitions past keep_days
		std::map<std::string, uint64_t> sent, dropped; // rows_sent and rows_dropped by table
		uint64_t bytes_sent = 0;                       // on the wire (compressed), of the batches taken
		std::string last_error; // the server's last complaint, "" once a batch went through
		// "N spans[ and K more rows (TABLE n, ...)] shipped to URL (X sent, Y B a row)[, M dropped (S of
		// them spans; why)]"
		std::string describe(const std::string &url) const;
	};
	ClickHouseShipper(ClickHouseTarget t, Options o);
	~ClickHouseShipper(); // finish(0) if not finished
	// Never blocks on the network: the batch waits its turn, or the oldest
	// waiting one is dropped (counted) to make room.
	void push(std::string table, std::string rows, uint64_t nrows);
	// Sends what is queued, trying until `deadline_s` from now; what is
	// left then is counted as dropped. The thread is gone on return.
	Counts finish(double deadline_s);
	Counts counts() const;

private:
	struct Batch {
		std::string table, rows;
		uint64_t nrows = 0;
	};
	void run();
	bool ensure_schema();
	void drop_old_days();
	bool ttl_ = false; // the server has TTL (and the tables were made with one)
	bool send(const Batch &b);
	void wait_before_retry(double s);

	ClickHouseClient client_;
	Options o_;
	mutable std::mutex mu_;
	std::condition_variable cv_;
	std::deque<Batch> queue_;
	size_t queued_bytes_ = 0;
	bool stopping_ = false, abandon_ = false, sending_ = false, schema_ok_ = false;
	Counts counts_;
	std::thread thread_;
};

} // namespace eacgm
