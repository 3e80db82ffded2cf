// SPDX-License-Identifier: Apache-2.0
// The ClickHouse sink's parts that need no server: the address's form, the
// RowBinary bytes of known rows, and the shipper's accounting when no
// server answers (every row pushed is either sent or counted as dropped).
// Shipping to a real server: tests/e2e/test_clickhouse.py.
#include <gtest/gtest.h>

#include <atomic>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>

#include "common/fd.h"
#include "export/clickhouse.h"

using namespace eacgm;

TEST(ClickHouseUrl, TheDefaultsAndEveryPart)
{
	auto t = parse_clickhouse_url("http://ch.example");
	ASSERT_TRUE(t) << t.error().message;
	EXPECT_EQ(t->host, "ch.example");
	EXPECT_EQ(t->port, 8123);
	EXPECT_EQ(t->database, "eacgm");
	EXPECT_EQ(t->user, "");
	t = parse_clickhouse_url("http://ops:s3cret@10.0.0.7:18123/prod");
	ASSERT_TRUE(t) << t.error().message;
	EXPECT_EQ(t->host, "10.0.0.7");
	EXPECT_EQ(t->port, 18123);
	EXPECT_EQ(t->database, "prod");
	EXPECT_EQ(t->user, "ops");
	EXPECT_EQ(t->password, "s3cret");
	EXPECT_EQ(parse_clickhouse_url("http://ch:8123/")->database, "eacgm");
}

TEST(ClickHouseUrl, BadOnesNamedWithTheForm)
{
	for (const char *bad :
	     {"ch:8123", "ftp://ch", "http://", "http://ch:port", "http://ch:8123/a-b", "http://ch/a/b"}) {
		auto t = parse_clickhouse_url(bad);
		ASSERT_FALSE(t) << bad;
		EXPECT_NE(
			t.error().message.find("' is not of the form http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]"),
			std::string::npos)
			<< t.error().message;
	}
	auto tls = parse_clickhouse_url("https://ch");
	ASSERT_FALSE(tls);
	EXPECT_NE(tls.error().message.find("https is not supported"), std::string::npos) << tls.error().message;
	EXPECT_EQ(tls.error().kind, ErrorKind::BadInput);
}

// The server's answer gives the error's kind, by its HTTP status: ClickHouse
// answers an unknown table 404, a bad query 400, a user it refuses 401, a
// full disk 507. A stand-in server answers each in turn.
TEST(ClickHouseClient, TheAnswersStatusGivesTheKind)
{
	httplib::Server server;
	std::atomic<int> status = 404;
	server.Post("/", [&](const httplib::Request &, httplib::Response &res) {
		res.status = status;
		res.set_content("Code: 60. DB::Exception: Table eacgm.spans does not exist. (UNKNOWN_TABLE)\n",
				"text/plain");
	});
	const int port = server.bind_to_any_port("127.0.0.1"); // listening: calls wait for the loop
	ASSERT_GT(port, 0);
	std::thread serving([&] { server.listen_after_bind(); });
	const std::string url = "http://127.0.0.1:" + std::to_string(port);
	ClickHouseClient client(parse_clickhouse_url(url).value());
	for (auto [code, kind] : {std::pair{404, ErrorKind::NotFound},
				  {400, ErrorKind::BadInput},
				  {401, ErrorKind::Permission},
				  {507, ErrorKind::NoSpace},
				  {500, ErrorKind::Other}}) {
		status = code;
		auto r = client.query("SELECT count() FROM eacgm.spans");
		ASSERT_FALSE(r) << code;
		EXPECT_EQ(r.error().kind, kind) << code;
		EXPECT_EQ(r.error().message,
			  "ClickHouse at " + url + " answered " + std::to_string(code) +
				  ": Code: 60. DB::Exception: Table eacgm.spans does not exist. "
				  "(UNKNOWN_TABLE)");
	}
	server.stop();
	serving.join();
}

TEST(ClickHouseSchema, PlainTablesOrDistributedOnesOverACluster)
{
	auto plain = clickhouse_schema(parse_clickhouse_url("http://ch/prod").value());
	ASSERT_EQ(plain.size(), 1 + kClickHouseTableCount);
	EXPECT_EQ(plain[0], "CREATE DATABASE IF NOT EXISTS prod");
	EXPECT_EQ(plain[1].rfind("CREATE TABLE IF NOT EXISTS prod.spans (day Date, host String, job String, ", 0), 0u)
		<< plain[1];
	EXPECT_EQ(plain[5].rfind("CREATE TABLE IF NOT EXISTS prod.events (", 0), 0u) << plain[5];
	auto sharded = clickhouse_schema(parse_clickhouse_url("http://ch/prod", "two").value());
	ASSERT_EQ(sharded.size(), 1 + 2 * kClickHouseTableCount);
	EXPECT_EQ(sharded[1], plain[1].substr(0, 37) + "_local" + plain[1].substr(37)) << sharded[1];
	EXPECT_EQ(sharded[2],
		  "CREATE TABLE IF NOT EXISTS prod.spans AS prod.spans_local ENGINE = "
		  "Distributed(two, prod, spans_local, cityHash64(agent, row))");
	EXPECT_EQ(sharded[10],
		  "CREATE TABLE IF NOT EXISTS prod.events AS prod.events_local ENGINE = "
		  "Distributed(two, prod, events_local, cityHash64(agent, row))");
	auto bad = parse_clickhouse_url("http://ch", "two; DROP");
	ASSERT_FALSE(bad);
	EXPECT_NE(bad.error().message.find("ClickHouse cluster 'two; DROP' is not a name"), std::string::npos);
}

TEST(ClickHouseSchema, ATtlWhereTheServerHasThem)
{
	EXPECT_FALSE(clickhouse_has_ttl("18.16.1"));
	EXPECT_FALSE(clickhouse_has_ttl("19.5.4.22"));
	EXPECT_TRUE(clickhouse_has_ttl("19.6.2.11"));
	EXPECT_TRUE(clickhouse_has_ttl("23.8.2.7"));
	EXPECT_FALSE(clickhouse_has_ttl("garbage"));
	auto t = parse_clickhouse_url("http://ch").value();
	for (auto &sql : clickhouse_schema(t, 7)) {
		if (sql.rfind("CREATE TABLE", 0) == 0) {
			EXPECT_EQ(sql.substr(sql.size() - 28), ") TTL day + toIntervalDay(7)") << sql;
		}
	}
	for (auto &sql : clickhouse_schema(t))
		EXPECT_EQ(sql.find("TTL"), std::string::npos) << sql;
}

// The sink writes each row as (day, host, job, ..., agent, row): every
// table's columns begin and end so, and its key ends in (agent, row),
// which a batch sent twice is folded by.
TEST(ClickHouseSchema, EveryTableBeginsAndEndsAlike)
{
	for (const ClickHouseTableDef &d : kClickHouseTables) {
		std::string columns = d.columns, order = d.order;
		EXPECT_EQ(columns.rfind("day Date, host String, job String, ", 0), 0u) << d.name;
		EXPECT_EQ(columns.substr(columns.size() - 26), ", agent UInt64, row UInt64") << d.name;
		EXPECT_EQ(order.substr(order.size() - 10), "agent, row") << d.name;
	}
}

TEST(RowBinary, KnownBytes)
{
	RowBinary r;
	r.fixed(uint16_t(0x0102));
	r.fixed(int32_t(-1));
	r.string("ab");
	r.string(std::string(300, 'x')); // a length of two LEB128 bytes: 0xac 0x02
	const std::string &b = r.bytes();
	ASSERT_EQ(b.size(), 2u + 4 + 1 + 2 + 2 + 300);
	EXPECT_EQ(b.substr(0, 9),
		  std::string("\x02\x01\xff\xff\xff\xff\x02"
			      "ab",
			      9));
	EXPECT_EQ((unsigned char)b[9], 0xac);
	EXPECT_EQ((unsigned char)b[10], 0x02);
}

namespace {
// A port nothing listens on: bound, never listened to, held by the test.
struct DeadPort {
	UniqueFd fd{socket(AF_INET, SOCK_STREAM, 0)};
	int port = 0;
	DeadPort()
	{
		sockaddr_in a = {};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a);
		socklen_t n = sizeof a;
		getsockname(fd.get(), reinterpret_cast<sockaddr *>(&a), &n);
		port = ntohs(a.sin_port);
	}
};
} // namespace

TEST(ClickHouseShipper, NoServerEveryRowCountedAsDropped)
{
	DeadPort dead;
	auto t = parse_clickhouse_url("http://127.0.0.1:" + std::to_string(dead.port));
	ASSERT_TRUE(t);
	ClickHouseShipper::Options o;
	o.max_queued_bytes = 1000; // room for two batches of 400 bytes
	o.first_retry_s = 0.01;
	ClickHouseShipper s(t.value(), o);
	for (uint64_t i = 0; i < 10; i++)
		s.push(i % 2 ? "rounds" : "spans", std::string(400, 'r'), 10 + i);
	auto c = s.finish(0.2);
	EXPECT_EQ(c.rows_sent, 0u);
	EXPECT_EQ(c.rows_dropped, 10u * 10 + 45); // all of them: the oldest for room, the rest at the end
	EXPECT_EQ(c.dropped,
		  (std::map<std::string, uint64_t>{{"spans", 10 + 12 + 14 + 16 + 18},
						   {"rounds", 11 + 13 + 15 + 17 + 19}}));
	EXPECT_EQ(c.batches_sent, 0u);
	EXPECT_GE(c.retries, 1u);
	EXPECT_NE(c.last_error.find("did not answer"), std::string::npos) << c.last_error;
	EXPECT_EQ(c.bytes_sent, 0u);
	EXPECT_EQ(c.describe("http://x"),
		  "0 spans shipped to http://x (0 B sent), 145 dropped (70 of them spans; " + c.last_error + ")");
}
