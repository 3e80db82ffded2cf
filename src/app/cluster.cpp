// eacgm cluster: questions across every node that ships to one ClickHouse
// (docs/clickhouse.md), answered by ClickHouse's SQL over the spans table.
// Each prints the SQL it ran with --show-sql, so an operator can start
// their own queries from it.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "common/text.h"
#include "export/clickhouse.h"

namespace eacgm {

namespace {

// A string as a ClickHouse literal: quoted, its quotes and backslashes escaped.
std::string literal(const std::string &s)
{
	std::string out = "'";
	for (char c : s) {
		if (c == '\'' || c == '\\')
			out += '\\';
		out += c;
	}
	return out + "'";
}

// "30s", "15m", "2h", "7d": seconds; nullopt for anything else.
std::optional<uint64_t> parse_since(const std::string &s)
{
	size_t end = 0;
	unsigned long long n = 0;
	try {
		n = std::stoull(s, &end);
	} catch (...) {
		return std::nullopt;
	}
	if (end + 1 != s.size())
		return std::nullopt;
	switch (s[end]) {
	case 's': return n;
	case 'm': return n * 60;
	case 'h': return n * 3600;
	case 'd': return n * 86400;
	default: return std::nullopt;
	}
}

// The rows asked about, as a WHERE clause over `spans`: the filters given,
// and rows sent twice counted once (the subquery's DISTINCT on agent, row).
std::string rows_of(const ClusterArgs &a, const std::string &db, const std::string &columns, const std::string &extra,
		    uint64_t since_s)
{
	std::vector<std::string> where;
	if (!a.job.empty())
		where.push_back("job = " + literal(a.job));
	if (!a.host.empty())
		where.push_back("host = " + literal(a.host));
	if (a.rank >= 0)
		where.push_back("rank = " + std::to_string(a.rank));
	if (since_s)
		where.push_back("start_ns >= toUInt64(now() - " + std::to_string(since_s) + ") * 1000000000");
	if (!extra.empty())
		where.push_back(extra);
	return "(SELECT DISTINCT agent, row, " + columns + " FROM " + db + ".spans" +
		(where.empty() ? "" : " WHERE " + join(where, " AND ")) + ")";
}

std::string summary_sql(const ClusterArgs &a, const std::string &db, uint64_t since_s)
{
	return "SELECT layer, name, round(sum(weight)) AS calls, round(sum(dur_ns * weight) / 1e6, 3) AS total_ms, "
	       "round(avg(dur_ns) / 1e3, 3) AS mean_us, round(quantile(0.99)(dur_ns) / 1e3, 3) AS p99_us, "
	       "uniqExact(host) AS hosts, uniqExact(rank) AS ranks\nFROM " +
		rows_of(a, db, "host, rank, layer, name, dur_ns, weight", "", since_s) +
		"\nGROUP BY layer, name ORDER BY total_ms DESC, layer, name LIMIT " + std::to_string(a.limit);
}

// A round: one collective (layer, name, seq) of a job across its ranks; the
// rank that started it last held every other up by late_ms (the latest
// start less the earliest, as eacgm summary's arrival skew).
std::string stragglers_sql(const ClusterArgs &a, const std::string &db, uint64_t since_s)
{
	return "SELECT job, layer, name, seq, count() AS ranks, argMax(rank, start_ns) AS last_rank, "
	       "argMax(host, start_ns) AS last_host, round((max(start_ns) - min(start_ns)) / 1e6, 3) AS "
	       "late_ms\nFROM " +
		rows_of(a, db, "job, host, rank, layer, name, seq, start_ns", "seq >= 0", since_s) +
		"\nGROUP BY job, layer, name, seq HAVING ranks > 1 ORDER BY late_ms DESC, seq LIMIT " +
		std::to_string(a.limit);
}

// ClickHouse's TabSeparatedWithNames as columns padded to their widest cell.
void print_table(const std::string &tsv)
{
	std::vector<std::vector<std::string>> rows;
	std::istringstream in(tsv);
	std::string line;
	while (std::getline(in, line)) {
		std::vector<std::string> cells;
		std::istringstream l(line);
		std::string c;
		while (std::getline(l, c, '\t'))
			cells.push_back(c);
		rows.push_back(std::move(cells));
	}
	std::vector<size_t> width;
	for (auto &r : rows)
		for (size_t i = 0; i < r.size(); i++)
			width.resize(std::max(width.size(), i + 1)), width[i] = std::max(width[i], r[i].size());
	for (auto &r : rows) {
		for (size_t i = 0; i < r.size(); i++)
			std::cout << (i ? "  " : "") << std::left << std::setw(int(i + 1 < r.size() ? width[i] : 0))
				  << r[i];
		std::cout << "\n";
	}
}

} // namespace

int run_cluster(const ClusterArgs &a)
{
	auto t = parse_clickhouse_url(a.clickhouse);
	if (!t)
		return fail("cluster: --clickhouse: " + t.error().message, 2);
	uint64_t since_s = 0;
	if (!a.since.empty()) {
		auto s = parse_since(a.since);
		if (!s || !*s)
			return fail("cluster: --since " + a.since + ": give a duration such as 30s, 15m, 2h or 7d", 2);
		since_s = *s;
	}
	std::string sql =
		a.what == "summary" ? summary_sql(a, t->database, since_s) : stragglers_sql(a, t->database, since_s);
	if (a.show_sql)
		std::cerr << sql << ";\n";
	auto r = ClickHouseClient(t.value()).query(sql + "\nFORMAT TabSeparatedWithNames");
	if (!r)
		return fail("cluster " + a.what + ": " + r.error().message);
	print_table(r.value());
	return 0;
}

} // namespace eacgm
