// SPDX-License-Identifier: Apache-2.0
// eacgm cluster: questions across every node that ships to one ClickHouse
// (docs/clickhouse.md), answered by ClickHouse's SQL over the small rows
// every agent ships whatever spans it ships: rounds, aggregates, events.
// Each prints the SQL it ran with --show-sql, so an operator can start
// their own queries from it.
#include <cctype>
#include <iomanip>
#include <iostream>
#include <set>
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

// The rows of `table` asked about, as a subquery: the filters given, and
// rows sent twice counted once (its DISTINCT on agent, row).
std::string rows_of(const ClusterArgs &a, const std::string &table, const std::string &columns,
		    const std::string &extra, uint64_t since_s)
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
	return "(SELECT DISTINCT agent, row, " + columns + " FROM " + table +
		(where.empty() ? "" : " WHERE " + join(where, " AND ")) + ")";
}

// From the aggregates every agent ships (a row per function and process
// every 10 s), whatever spans it ships.
std::string summary_sql(const ClusterArgs &a, const std::string &db, uint64_t since_s)
{
	return "SELECT layer, name, round(sum(n)) AS calls, round(sum(t) / 1e6, 3) AS total_ms, "
	       "round(sum(t) / sum(n) / 1e3, 3) AS mean_us, round(max(m) / 1e3, 3) AS max_us, "
	       "uniqExact(host) AS hosts, uniqExact(rank) AS ranks\nFROM " +
		rows_of(a, db + ".aggregates", "host, rank, layer, name, calls AS n, total_ns AS t, max_ns AS m", "",
			since_s) +
		"\nGROUP BY layer, name ORDER BY total_ms DESC, layer, name LIMIT " + std::to_string(a.limit);
}

// Each agent's clock less its job's reference agent's (the least agent
// id): over the collective rounds both took part in, the median of the
// difference of their ends, as eacgm merge aligns recordings (a
// collective ends at nearly the same time on every rank, as the last
// rank to arrive releases them all; the median keeps a round whose rank
// was descheduled at its end from moving the answer). Nodes' wall
// clocks agree only as well as NTP keeps them (a millisecond or worse),
// less well than the lateness asked about. Columns: agent, job, shift.
std::string clock_shifts_sql(const std::string &rounds)
{
	std::string ends = "(SELECT job, layer, name, seq, agent, min(start_ns + dur_ns) AS end_ns FROM " + rounds +
		" GROUP BY job, layer, name, seq, agent)";
	std::string reference_ends = "(SELECT job, layer, name, seq, end_ns AS ref_end FROM " + ends +
		"\n  ANY INNER JOIN (SELECT job, min(agent) AS agent FROM " + rounds +
		" GROUP BY job) USING job, agent)";
	return "(SELECT agent, job, quantileExact(0.5)(toInt64(end_ns) - toInt64(ref_end)) AS shift FROM " + ends +
		"\n ANY INNER JOIN " + reference_ends + " USING job, layer, name, seq GROUP BY agent, job)";
}

// A round: one collective (layer, name, seq) of a job across its ranks; the
// rank that started it last held every other up by late_ms (the latest
// start less the earliest, as eacgm summary's arrival skew), the starts on
// one clock (clock_shifts_sql).
std::string stragglers_sql(const ClusterArgs &a, const std::string &db, uint64_t since_s)
{
	std::string rounds =
		rows_of(a, db + ".rounds", "job, host, rank, layer, name, seq, start_ns, dur_ns", "", since_s);
	return "SELECT job, layer, name, seq, count() AS ranks, argMax(rank, at) AS last_rank, "
	       "argMax(host, at) AS last_host, round((max(at) - min(at)) / 1e6, 3) AS late_ms\nFROM "
	       "(SELECT job, host, rank, layer, name, seq, toInt64(start_ns) - shift AS at FROM " +
		rounds + "\nANY LEFT JOIN " + clock_shifts_sql(rounds) +
		" USING agent, job)\nGROUP BY job, layer, name, seq HAVING ranks > 1 ORDER BY late_ms DESC, seq "
		"LIMIT " +
		std::to_string(a.limit);
}

// Calls in flight past an agent's hang limit: a "hang" event with no
// "hang_over" for the same call (agent, pid, tid, start), per collective
// (job, layer, call, seq, nranks): the ranks inside it, and for how long.
// A hang in flight is one whatever its age: --since does not apply.
std::string hangs_sql(const ClusterArgs &a, const std::string &db)
{
	std::string events =
		rows_of(a, db + ".events", "job, host, rank, pid, tid, layer, kind, key, start_ns, seq, nranks",
			"kind IN ('hang', 'hang_over')", 0);
	return "SELECT job, layer, call, seq, nranks, arraySort(groupArray(rank)) AS in_flight, "
	       "groupUniqArray(host) AS hosts, round(toUInt64(now()) - min(start_ns) / 1e9, 1) AS for_s\nFROM "
	       "(SELECT agent, pid, tid, start_ns, any(job) AS job, any(host) AS host, any(layer) AS layer, "
	       "any(key) AS call, any(seq) AS seq, any(nranks) AS nranks, any(rank) AS rank, "
	       "countIf(kind = 'hang_over') AS over\nFROM " +
		events +
		"\nGROUP BY agent, pid, tid, start_ns HAVING over = 0)\nGROUP BY job, layer, call, seq, nranks "
		"ORDER BY for_s DESC, job, seq LIMIT " +
		std::to_string(a.limit);
}

// The ranks of a job that finished the collective at seq: a round of it.
std::string finished_sql(const std::string &db, const std::string &job, const std::string &layer,
			 const std::string &seq)
{
	return "SELECT DISTINCT rank FROM " + db + ".rounds WHERE job = " + literal(job) +
		" AND layer = " + literal(layer) + " AND seq = " + seq + " AND rank >= 0 ORDER BY rank";
}

using Table = std::vector<std::vector<std::string>>;

// ClickHouse's TabSeparated output as rows of cells.
Table parse_tsv(const std::string &tsv)
{
	Table rows;
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
	return rows;
}

// "[0,3]" (ClickHouse's array text), or numbers a line each, as a set.
std::set<long> ranks_of(const std::string &text)
{
	std::set<long> out;
	std::string digits;
	for (char c : text + ",") {
		if (isdigit((unsigned char)c) || c == '-') {
			digits += c;
		} else if (!digits.empty()) {
			out.insert(std::stol(digits));
			digits.clear();
		}
	}
	return out;
}

// Each hang's missing ranks: of 0..nranks-1, those neither inside the
// collective nor past it (a span at its seq), on whichever node they run.
Result<Table> with_missing_ranks(const ClickHouseClient &ch, Table t, bool show_sql)
{
	if (t.empty())
		return t;
	t[0].push_back("missing_ranks");
	for (size_t i = 1; i < t.size(); i++) {
		auto &r = t[i]; // job, layer, call, seq, nranks, in_flight, hosts, for_s
		long nranks = std::stol(r[4]);
		if (r[3] == "-1" || nranks <= 0) {
			r.push_back("?"); // a wait without a sequence number: nothing to match ranks by
			continue;
		}
		std::string sql = finished_sql(ch.target().database, r[0], r[1], r[3]);
		if (show_sql)
			std::cerr << sql << ";\n";
		auto done = ch.query(sql + " FORMAT TabSeparated");
		if (!done)
			return done.error();
		std::set<long> present = ranks_of(r[5]);
		for (long k : ranks_of(done.value()))
			present.insert(k);
		std::vector<std::string> missing;
		for (long k = 0; k < nranks; k++)
			if (!present.count(k))
				missing.push_back(std::to_string(k));
		r.push_back("[" + join(missing, ",") + "]");
	}
	return t;
}

// Rows as columns padded to their widest cell.
void print_table(const Table &rows)
{
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
	auto t = parse_clickhouse_url(a.clickhouse, a.cluster);
	if (!t)
		return fail("cluster: " + std::string(a.cluster.empty() ? "--clickhouse" : "--cluster") + ": " +
				    t.error().message,
			    2);
	if (a.what == "schema") {
		for (auto &sql : clickhouse_schema(t.value(), a.ttl_days))
			std::cout << sql << ";\n";
		return 0;
	}
	uint64_t since_s = 0;
	if (!a.since.empty()) {
		auto s = parse_since(a.since);
		if (!s || !*s)
			return fail("cluster: --since " + a.since + ": give a duration such as 30s, 15m, 2h or 7d", 2);
		since_s = *s;
	}
	const std::string &db = t->database;
	std::string sql = a.what == "summary" ? summary_sql(a, db, since_s)
		: a.what == "stragglers"      ? stragglers_sql(a, db, since_s)
					      : hangs_sql(a, db);
	if (a.show_sql)
		std::cerr << sql << ";\n";
	ClickHouseClient ch(t.value());
	auto r = ch.query(sql + "\nFORMAT TabSeparatedWithNames");
	if (!r)
		return fail("cluster " + a.what + ": " + r.error().message);
	Table table = parse_tsv(r.value());
	if (a.what == "hangs") {
		auto m = with_missing_ranks(ch, std::move(table), a.show_sql);
		if (!m)
			return fail("cluster hangs: " + m.error().message);
		table = std::move(m.value());
	}
	print_table(table);
	return 0;
}

} // namespace eacgm
