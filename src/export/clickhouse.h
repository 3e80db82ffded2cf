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
#include "ingest/collectives.h"
#include "pipeline/sink.h"

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
std::vector<std::string> clickhouse_schema(const ClickHouseTarget &t);

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
	};
	struct Counts {
		uint64_t rows_sent = 0, rows_dropped = 0, batches_sent = 0, retries = 0;
		std::map<std::string, uint64_t> sent; // rows_sent by table
		uint64_t bytes_sent = 0;              // on the wire (compressed), of the batches taken
		std::string last_error;               // the server's last complaint, "" once a batch went through
		// "N spans[ and E events] shipped to URL (X sent, Y B a row)[, M dropped (why)]"
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

// The sink: spans (traced calls and Python's sampled ones) as rows of
// `spans`, handed to the shipper about once a second.
class ClickHouseSink : public Sink {
public:
	struct Identity {
		std::string host;           // the node's name in every row
		std::string job;            // where a process's launcher gave none; "": none known
		int64_t clock_shift_ns = 0; // added to every wall time (tests: a node whose clock is off)
	};
	ClickHouseSink(ClickHouseShipper &shipper, Identity id);
	Result<void> write(SpanBatch &b) override;
	// Events (hangs and their end, XID errors, budget changes) as rows of
	// `events`; the host and GPU measures are not shipped (yet).
	Result<void> measures(const std::vector<Metric> &, const std::vector<Event> &events) override;
	// Each process's job and rank, from its launcher's environment.
	Result<void> process(const Process &p) override;
	// What is gathered goes to the shipper now (at the end).
	void flush();
	// ... or once it is a second old: called when no batch comes (an idle
	// node's last rows must not wait for its next span).
	void tick();
	uint64_t rows() const { return row_; }

private:
	void add_row(uint32_t pid, uint32_t tid, std::string_view layer, std::string_view name, uint64_t start_ns,
		     uint64_t dur_ns, int64_t seq, int64_t rank, uint64_t bytes, int64_t ret, double weight);
	void add_typed(const TypedSpans &ts);
	// A process's job, and its rank: its launcher's, else the one its
	// collectives said (mp.spawn sets no RANK), else -1.
	struct Who {
		std::string job;
		int64_t rank = -1;
		uint64_t ended_ns = 0; // forgotten 10 s after its exit (late spans still find it)
	};
	Who &who(uint32_t pid);
	void forget_ended(uint64_t now_ns);

	ClickHouseShipper &shipper_;
	Identity id_;
	uint64_t agent_ = 0;          // this run's id: (agent, row) is each row's key
	uint64_t row_ = 0;            // rows made so far
	int64_t wall_minus_mono_ = 0; // spans' CLOCK_MONOTONIC times to the wall clock, for cross-node rows
	// Rows made since the last flush, per table.
	struct Pending {
		RowBinary rows;
		uint64_t count = 0;
	};
	Pending spans_, events_;
	void begin_row(Pending &p, uint64_t wall_ns, const Who &w); // day, host, job

	uint64_t last_flush_ns_ = 0;
	TypedCollectives collectives_;
	std::unordered_map<uint32_t, Who> who_;
};

} // namespace eacgm
