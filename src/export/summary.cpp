// SPDX-License-Identifier: Apache-2.0
#include "export/summary.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "common/text.h"
#include "detect/rootcause.h"

namespace eacgm {

namespace {

// Nearest-rank percentile of sorted values: the smallest value with at
// least p% of the values at or below it.
uint64_t percentile(const std::vector<uint64_t> &sorted, unsigned p)
{
	size_t rank = (p * sorted.size() + 99) / 100;
	return sorted[std::max<size_t>(rank, 1) - 1];
}

// Columns are counted in characters, not bytes ("µs" is two bytes).
size_t width(const std::string &s)
{
	return static_cast<size_t>(std::count_if(
		s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string pad_right(std::string s, size_t w) { return s + std::string(w - std::min(w, width(s)), ' '); }
std::string pad_left(const std::string &s, size_t w) { return std::string(w - std::min(w, width(s)), ' ') + s; }

// Long demangled C++ names would push the numbers off the screen.
std::string truncate(const std::string &s, size_t w)
{
	if (width(s) <= w)
		return s;
	size_t chars = 0, i = 0;
	for (; i < s.size(); i++)
		if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && chars++ == w - 1)
			break;
	return s.substr(0, i) + "…";
}

std::string reason_text(const std::string &reason)
{
	if (reason == "ringbuf_full")
		return "ring buffer full";
	// What a user can act on or dismiss: say what was lost and why.
	static const std::map<std::string, std::string> known = {
		{"depth_overflow", "calls nested deeper than 32 (Python imports nest so)"},
		{"exited_in_call", "calls in flight when their thread exited (killed, or ended mid-call)"},
		{"unresolved_entry", "Python calls whose code was freed (or process ended) before it was read"},
		{"unresolved_stack", "Python stacks whose code was freed (or process ended) before it was read"},
		{"contradicted_call", "Python calls whose return the kernel missed (a sample showed them gone)"},
		{"late_sample", "Python samples read too late to place in their thread's timeline"},
	};
	if (auto it = known.find(reason); it != known.end())
		return it->second;
	std::string r = reason;
	std::replace(r.begin(), r.end(), '_', ' ');
	return r;
}

std::string drops_line(const std::vector<Drop> &drops)
{
	std::map<std::string, uint64_t> by_reason;
	uint64_t total = 0;
	for (const Drop &d : drops) {
		if (d.count == 0)
			continue;
		by_reason[reason_text(d.reason)] += d.count;
		total += d.count;
	}
	std::string line = "lost records: " + std::to_string(total);
	if (total == 0)
		return line;
	std::vector<std::pair<std::string, uint64_t>> reasons(by_reason.begin(), by_reason.end());
	std::stable_sort(reasons.begin(), reasons.end(),
			 [](const auto &a, const auto &b) { return a.second > b.second; });
	std::string sep = " (";
	for (const auto &[reason, count] : reasons) {
		line += sep + reason + ": " + std::to_string(count);
		sep = ", ";
	}
	return line + ")";
}

// A metric value in the unit its name ends with.
std::string format_metric(const std::string &name, double v)
{
	auto ends = [&](const char *suffix) { return name.ends_with(suffix); };
	if (ends("_ns"))
		return format_duration(v);
	if (ends("_us"))
		return format_duration(v * 1e3);
	if (ends("_bytes") && v >= 0)
		return format_bytes(static_cast<uint64_t>(v + 0.5));
	if (ends("_bytes_per_s") && v >= 0)
		return format_bytes(static_cast<uint64_t>(v + 0.5)) + "/s";
	char buf[64];
	const char *unit = ends("_pct") ? " %" : ends("_w") ? " W" : ends("_c") ? " °C" : ends("_mhz") ? " MHz" : "";
	std::snprintf(buf, sizeof buf, "%.4g%s", v, unit);
	return buf;
}

// Per layer: each metric's samples, mean, min and max, per key and process
// (rows that are zero throughout counted, not shown);
// then the instant events by name.
std::string metrics_section(const Recording &rec, size_t max_rows_per_layer)
{
	struct Acc {
		size_t n = 0;
		double sum = 0, min = 0, max = 0;
	};
	std::map<std::tuple<std::string, std::string, std::string, uint32_t>, Acc> acc;
	for (const Metric &m : rec.metrics) {
		if (m.layer == "detect") // detection_section says it in words
			continue;
		Acc &a = acc[{m.layer, m.name, m.key, m.pid}];
		a.min = a.n ? std::min(a.min, m.value) : m.value;
		a.max = a.n ? std::max(a.max, m.value) : m.value;
		a.sum += m.value;
		a.n++;
	}
	std::string out;
	std::string layer;
	size_t shown = 0, hidden = 0, zero = 0;
	auto flush_hidden = [&] {
		if (hidden)
			out += "  ... " + std::to_string(hidden) +
				" more metrics (eacgm export --perfetto shows all)\n";
		if (zero)
			out += "  (" + std::to_string(zero) + (zero == 1 ? " metric" : " metrics") +
				" zero throughout, not shown)\n";
		hidden = zero = 0;
	};
	for (const auto &[k, a] : acc) {
		const auto &[l, name, key, pid] = k;
		if (l != layer) {
			flush_hidden();
			layer = l;
			shown = 0;
			char head[160];
			std::snprintf(head, sizeof head, "\n%-44s %8s %11s %11s %11s\n", (layer + " metrics").c_str(),
				      "samples", "mean", "min", "max");
			out += head;
		}
		// An idle interface's counters, a GPU's throttle reasons on a
		// quiet run: a row of zeros says nothing.
		if (a.min == 0 && a.max == 0) {
			zero++;
			continue;
		}
		if (max_rows_per_layer && shown == max_rows_per_layer) {
			hidden++;
			continue;
		}
		shown++;
		std::string label = name;
		if (!key.empty())
			label += " " + key;
		if (pid)
			label += " pid " + std::to_string(pid);
		out += pad_right("  " + truncate(label, 42), 44) + pad_left(std::to_string(a.n), 9) +
			pad_left(format_metric(name, a.sum / static_cast<double>(a.n)), 12) +
			pad_left(format_metric(name, a.min), 12) + pad_left(format_metric(name, a.max), 12) + "\n";
	}
	flush_hidden();
	if (!rec.events.empty()) {
		std::map<std::pair<std::string, std::string>, std::vector<const Event *>> by_name;
		for (const Event &e : rec.events)
			by_name[{e.layer, e.name}].push_back(&e);
		out += "\nevents:\n";
		for (const auto &[k, v] : by_name) {
			out += "  " + k.first + " " + k.second + " x" + std::to_string(v.size()) + ":";
			for (size_t i = 0; i < v.size() && i < 3; i++) {
				const Event &e = *v[i];
				std::string what = e.key;
				for (const auto &[ak, av] : e.args.items())
					what += (what.empty() ? "" : " ") + ak + "=" +
						(av.is_string() ? av.get<std::string>() : av.dump());
				out += (i ? "; " : " ") + what;
			}
			out += v.size() > 3 ? "; ...\n" : "\n";
		}
	}
	return out;
}

// What online detection could judge, from its last status (detect/status.h):
// the functions it scored and those still in cold start, which an empty
// anomaly list says nothing about. Empty when the recording has none.
std::string detection_section(const Recording &rec)
{
	double scored = -1, cold = -1;
	std::map<std::string, double> calls; // the last value per function
	for (const Metric &m : rec.metrics) {
		if (m.layer != "detect")
			continue;
		if (m.name == "functions_scored")
			scored = m.value;
		else if (m.name == "functions_cold_start")
			cold = m.value;
		else if (m.name == "cold_start_calls")
			calls[m.key] = m.value;
	}
	if (scored < 0)
		return "";
	std::string out = "\nonline detection: " + plural(size_t(scored), "function", "functions") + " scored";
	if (cold <= 0)
		return out + "\n";
	out += "; " + std::to_string(size_t(cold)) +
		" not yet (cold start: a function's first calls train its "
		"model and are not scored; eacgm detect judges every call):";
	size_t n = 0;
	for (const auto &[key, c] : calls) {
		if (c <= 0)
			continue;
		if (n++ == 8) {
			out += " ...";
			break;
		}
		out += (n > 1 ? ", " : " ") + key + " (" + std::to_string(size_t(c)) + " calls)";
	}
	return out + "\n";
}

// What `eacgm detect` found: how many per key, then the most anomalous
// (lowest score relative to the threshold) with their first cause.
std::string anomalies_section(const Recording &rec, uint64_t first, size_t max_rows)
{
	if (rec.anomalies.empty())
		return "";
	std::map<std::pair<std::string, std::string>, size_t> per_key;
	for (const Anomaly &a : rec.anomalies)
		per_key[{a.layer, a.name}]++;
	std::vector<std::pair<std::string, size_t>> keys;
	for (const auto &[k, n] : per_key)
		keys.emplace_back(k.first + " " + k.second, n);
	std::stable_sort(keys.begin(), keys.end(), [](const auto &x, const auto &y) { return x.second > y.second; });
	std::string out = "\nanomalies: " + std::to_string(rec.anomalies.size()) + " (";
	for (size_t i = 0; i < keys.size() && i < 8; i++)
		out += (i ? ", " : "") + keys[i].first + " x" + std::to_string(keys[i].second);
	if (keys.size() > 8)
		out += ", ... " + std::to_string(keys.size() - 8) + " more functions";
	out += ")\n";
	std::vector<const Anomaly *> top;
	for (const Anomaly &a : rec.anomalies)
		top.push_back(&a);
	std::stable_sort(top.begin(), top.end(), [](const Anomaly *x, const Anomaly *y) {
		return x->score - x->threshold < y->score - y->threshold;
	});
	size_t n = max_rows ? std::min(max_rows, top.size()) : top.size();
	for (size_t i = 0; i < n; i++) {
		const Anomaly &a = *top[i];
		char head[96];
		std::snprintf(head, sizeof head, "  +%s pid %u score %.1f < %.1f  ",
			      format_duration(static_cast<double>(a.ts_ns >= first ? a.ts_ns - first : 0)).c_str(),
			      a.pid, a.score, a.threshold);
		std::string cause = !a.causes.empty() && a.causes[0].contains("what") && a.causes[0]["what"].is_string()
			? a.causes[0]["what"].get<std::string>()
			: a.layer + " " + a.name;
		std::string fault = detect::fault_class(a);
		out += head + (fault.empty() ? "" : "[" + detect::fault_name(fault) + "] ") + cause + "\n";
	}
	if (n < top.size())
		out += "  ... " + std::to_string(top.size() - n) + " more (eacgm detect --json lists all)\n";
	return out;
}

} // namespace

// Which errors, not only how many: the most frequent return names.
static std::string errors_line(const std::map<std::string, uint64_t> &by_name)
{
	if (by_name.empty())
		return "";
	std::vector<std::pair<std::string, uint64_t>> names(by_name.begin(), by_name.end());
	std::stable_sort(names.begin(), names.end(), [](const auto &a, const auto &b) { return a.second > b.second; });
	std::string line = "\nerrors:";
	for (size_t i = 0; i < names.size() && i < 5; i++)
		line += (i ? ", " : " ") + names[i].first + " x" + std::to_string(names[i].second);
	if (names.size() > 5)
		line += ", ... " + std::to_string(names.size() - 5) + " more kinds";
	return line + "\n";
}

std::string errors_line(const std::vector<Span> &spans)
{
	SpanTally tally;
	for (const Span &s : spans)
		tally.add(s);
	return errors_line(tally.error_names());
}

// The sampler's period, which a sampled span's count of samples is worth
// where the span does not say (sampled_ns) what its samples stood for; the
// longest the recording used, which bounds the estimate's error; 0 when
// the recording does not say (made before eacgm kept it).
static uint64_t sample_period_ns(const Recording &rec)
{
	auto it = rec.meta.find("python_sample_period_ns");
	return it == rec.meta.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

SpanTally::SpanTally(uint64_t period_ns) : period_(period_ns) {}

SpanTally::SpanTally(const Recording &rec) : period_(sample_period_ns(rec))
{
	for (const Span &s : rec.spans)
		add(s);
}

void SpanTally::add(const Span &s)
{
	if (collectives_.add(s, rounds_)) {
		for (const Round &r : rounds_)
			stragglers_.add(r);
		rounds_.clear();
	}
	spans_++;
	pids_.insert(s.pid);
	tids_.insert({s.pid, s.tid});
	first_ns_ = std::min(first_ns_, s.start_ns);
	last_ns_ = std::max(last_ns_, s.start_ns + s.dur_ns);
	bool error = is_error_span(s);
	if (error)
		errors_[s.ret_name]++;

	Acc &a = acc_[{s.layer, s.name}];
	if (auto n = s.args.find("samples"); n != s.args.end() && n->is_number_integer() && n->get<int64_t>() >= 0) {
		Run r{s.pid, s.tid, s.start_ns, s.start_ns + s.dur_ns, n->get<uint64_t>(), s.dur_ns};
		if (auto t = s.args.find("sampled_ns"); t != s.args.end() && t->is_number_unsigned())
			r.ns = t->get<uint64_t>();
		else if (period_)
			r.ns = r.samples * period_;
		a.st.runs++;
		a.runs.push_back(r);
		return;
	}
	double w = 1;
	if (auto n = s.args.find(kWeightArg); n != s.args.end() && n->is_number() && n->get<double>() >= 1) {
		w = n->get<double>();
		a.st.estimated = true;
	}
	a.sums[0] += w;
	a.sums[1] += w * error;
	a.sums[2] += w * static_cast<double>(s.dur_ns);
	a.sums[3] += w * static_cast<double>(s.bytes);
	a.st.seen++;
	a.durs.push_back(s.dur_ns);
}

// The samples and time of a function's runs, each sample once: the runs
// not inside an earlier one of the same thread (a recursive call's run lies
// inside its caller's, whose samples saw the function too).
SpanTally::Outermost SpanTally::outermost(std::vector<Run> &runs)
{
	std::sort(runs.begin(), runs.end(), [](const Run &a, const Run &b) {
		return std::tie(a.pid, a.tid, a.start_ns, b.end_ns) < std::tie(b.pid, b.tid, b.start_ns, a.end_ns);
	});
	Outermost sum;
	const Run *outer = nullptr;
	for (const Run &r : runs) {
		if (outer && outer->pid == r.pid && outer->tid == r.tid && r.start_ns < outer->end_ns &&
		    r.end_ns <= outer->end_ns)
			continue;
		outer = &r;
		sum.runs++;
		sum.samples += r.samples;
		sum.ns += r.ns;
	}
	return sum;
}

std::vector<FunctionStats> SpanTally::stats() const
{
	std::vector<FunctionStats> out;
	out.reserve(acc_.size());
	for (const auto &[key, a] : acc_) {
		FunctionStats st = a.st;
		st.calls = std::llround(a.sums[0]);
		st.errors = std::llround(a.sums[1]);
		st.total_ns += std::llround(a.sums[2]);
		st.bytes = std::llround(a.sums[3]);
		const Outermost sampled = outermost(a.runs);
		st.samples = sampled.samples;
		st.total_ns += sampled.ns;
		std::vector<uint64_t> &durs = a.durs;
		std::sort(durs.begin(), durs.end());
		st.layer = key.first;
		st.name = key.second;
		st.p50_ns = durs.empty() ? 0 : percentile(durs, 50);
		st.p99_ns = durs.empty() ? 0 : percentile(durs, 99);
		st.error_ns = 2.0 * static_cast<double>(period_) * std::sqrt(static_cast<double>(sampled.runs) / 6.0);
		out.push_back(std::move(st));
	}
	std::sort(out.begin(), out.end(), [](const FunctionStats &a, const FunctionStats &b) {
		return std::tie(a.layer, b.total_ns, a.name) < std::tie(b.layer, a.total_ns, b.name);
	});
	return out;
}

std::vector<FunctionStats> compute_stats(const Recording &rec) { return SpanTally(rec).stats(); }

StragglerTally SpanTally::stragglers() const
{
	StragglerTally out = stragglers_;
	CollectiveMatcher rest = collectives_;
	std::vector<Round> open;
	rest.finish(open);
	for (const Round &r : open)
		out.add(r);
	return out;
}

// The heap's order: a round of smaller skew, or the later of two equal,
// is "greater" (comes out on top to be replaced first).
static bool larger_skew(const Round &a, const Round &b)
{
	return std::make_tuple(a.skew_ns(), b.first_start_ns()) > std::make_tuple(b.skew_ns(), a.first_start_ns());
}

void StragglerTally::add(const Round &r)
{
	rounds_++;
	if (!r.complete())
		return;
	skews_.push_back(r.skew_ns());
	last_[{r.key.layer, r.last().rank}]++;
	if (top_.size() < keep_) {
		top_.push_back(r);
		std::push_heap(top_.begin(), top_.end(), larger_skew);
	} else if (keep_ && larger_skew(r, top_.front())) {
		std::pop_heap(top_.begin(), top_.end(), larger_skew);
		top_.back() = r;
		std::push_heap(top_.begin(), top_.end(), larger_skew);
	}
}

std::vector<Round> StragglerTally::largest() const
{
	std::vector<Round> out = top_;
	std::sort(out.begin(), out.end(), larger_skew);
	return out;
}

std::vector<uint64_t> StragglerTally::skews() const
{
	std::vector<uint64_t> out = skews_;
	std::sort(out.begin(), out.end());
	return out;
}

// One table row's cells; a layer with sampled functions shows samples and
// the time's error where the others show errors and bytes.
static std::vector<std::string> stat_cells(const FunctionStats &f, bool sampled_layer)
{
	auto dur = [](double ns) { return format_duration(ns); };
	std::string calls = f.calls || !f.runs ? (f.estimated ? "~" : "") + std::to_string(f.calls) : "-";
	std::string mean = f.calls ? dur(static_cast<double>(f.total_ns) / static_cast<double>(f.calls)) : "-";
	if (!sampled_layer)
		return {calls,
			(f.estimated && f.errors ? "~" : "") + std::to_string(f.errors),
			dur(static_cast<double>(f.total_ns)),
			mean,
			dur(static_cast<double>(f.p50_ns)),
			dur(static_cast<double>(f.p99_ns)),
			f.bytes ? format_bytes(f.bytes) : ""};
	if (f.runs) // the mean of a call is not known where some of them were sampled
		mean = "-";
	return {calls,
		f.runs ? std::to_string(f.samples) : "-",
		dur(static_cast<double>(f.total_ns)),
		f.runs ? "±" + dur(f.error_ns) : "",
		mean,
		f.calls ? dur(static_cast<double>(f.p50_ns)) : "-",
		f.calls ? dur(static_cast<double>(f.p99_ns)) : "-"};
}

// "gloo rank 0 x5, gloo rank 1 x8": how often each rank arrived last.
static std::string last_counts_line(const StragglerTally &t)
{
	std::string line;
	for (const auto &[k, n] : t.last_counts())
		line += (line.empty() ? "" : ", ") + k.first + " rank " + std::to_string(k.second) + " x" +
			std::to_string(n);
	return "  arrived last: " + line + "\n";
}

// The collectives' rounds across ranks: how many, the skew's spread, the
// rounds of largest skew with the rank that arrived last, and how often
// each rank was last. Empty without collective spans.
static std::string stragglers_section(const StragglerTally &t, size_t max_rows)
{
	if (!t.rounds())
		return "";
	std::string out = "\ncollectives across ranks: " + plural(t.rounds(), "round", "rounds") + ", " +
		std::to_string(t.complete()) + " with every rank seen";
	auto skews = t.skews();
	if (!skews.empty())
		out += "; arrival skew p50 " + format_duration(static_cast<double>(percentile(skews, 50))) + ", max " +
			format_duration(static_cast<double>(skews.back()));
	out += "\n";
	if (t.complete() < t.rounds())
		out += "  " + std::to_string(t.rounds() - t.complete()) +
			" without every rank (ranks this recording does not see: eacgm merge joins the recordings "
			"of every node)\n";
	if (skews.empty())
		return out;
	auto row = [](const std::string &what, const std::string &seq, const std::string &ranks,
		      const std::string &skew, const std::string &last) {
		return pad_right("  " + truncate(what, 28), 30) + pad_left(seq, 8) + pad_left(ranks, 7) +
			pad_left(skew, 10) + pad_left(last, 11) + "\n";
	};
	out += row("largest arrival skew", "seq", "ranks", "skew", "last rank");
	auto top = t.largest();
	for (size_t i = 0; i < top.size() && (!max_rows || i < max_rows); i++) {
		const Round &r = top[i];
		out += row(r.key.layer + " " + r.key.name, std::to_string(r.key.seq), std::to_string(r.key.nranks),
			   format_duration(static_cast<double>(r.skew_ns())), std::to_string(r.last().rank));
	}
	return out + last_counts_line(t);
}

// What --overhead-budget did, from the recording's meta; empty when it
// throttled nothing.
static std::string budget_section(const Recording &rec)
{
	auto meta = [&](const char *key) {
		auto it = rec.meta.find(key);
		return it == rec.meta.end() ? std::string() : it->second;
	};
	auto throttled = nlohmann::json::parse(meta("overhead_throttled"), nullptr, false);
	if (!throttled.is_array() || throttled.empty())
		return "";
	// Recordings before overhead_share_of weighed the calls against their
	// processes' CPU.
	const char *of =
		meta("overhead_share_of") == "calling_threads" ? "the calling threads'" : "the traced processes'";
	char buf[240];
	snprintf(buf, sizeof(buf),
		 "\noverhead budget %.1f%%: traced calls would have cost %.1f%% of %s CPU at "
		 "most; the hottest were probed in bursts (about %.1f%% now):\n",
		 std::atof(meta("overhead_budget_pct").c_str()), std::atof(meta("overhead_full_pct_max").c_str()), of,
		 std::atof(meta("overhead_expected_pct").c_str()));
	std::string out = buf;
	for (auto &t : throttled) {
		if (!t.is_object())
			continue;
		snprintf(buf, sizeof(buf), "  %s %s: attached %.1f%% of the time%s\n", t.value("layer", "").c_str(),
			 t.value("function", "").c_str(), 100 * t.value("coverage", 1.0),
			 t.value("now", false) ? "" : " (then attached again)");
		out += buf;
	}
	return out +
		"  their calls, errors, totals and bytes (marked ~) are estimates: each call seen stands for "
		"those missed; p50/p99 are of the calls seen\n";
}

// What the exception guard did, from the recording's meta: a line where it
// answered a request or could not run (bpf/span.bpf.c); empty otherwise.
static std::string guard_section(const Recording &rec)
{
	auto number = [&](const char *key) -> uint64_t {
		auto it = rec.meta.find(key);
		return it == rec.meta.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
	};
	auto on = rec.meta.find("guard");
	if (on != rec.meta.end() && on->second.starts_with("off: "))
		return "\nexception guard off: " + on->second.substr(5) +
			"; libraries a C++ exception may unwind through were not traced\n";
	const uint64_t requests = number("guard_requests");
	if (!requests && !number("guard_unasked"))
		return "";
	std::string out = "\nexception guard: " + plural(size_t(requests), "stop", "stops") + " of traced processes, " +
		format_duration(double(number("guard_held_ns"))) + " in all (" +
		format_duration(double(number("guard_max_held_ns"))) +
		" at most): " + std::to_string(number("guard_restored")) +
		" return addresses handed back to an unwinder, " + std::to_string(number("guard_rearmed")) +
		" traced again once it was done\n";
	if (uint64_t bad = number("guard_failed") + number("guard_unasked"))
		out += "  warning: " + std::to_string(bad) +
			" return addresses or requests the guard could not carry out: a program may have ended in "
			"std::terminate as it would under any return probe (docs/security.md)\n";
	return out;
}

std::string format_summary(const Recording &rec, size_t max_rows_per_layer)
{
	return format_summary(rec, SpanTally(rec), max_rows_per_layer);
}

// "N processes, N threads, N spans over T": processes and threads only
// seen in spans count too, so a missed exec or thread-name event does not
// make the header disagree with the table.
static std::string header_line(const Recording &rec, const SpanTally &tally)
{
	std::set<uint32_t> pids = tally.pids();
	std::set<std::pair<uint32_t, uint32_t>> tids = tally.threads();
	for (const Process &p : rec.processes)
		pids.insert(p.pid);
	for (const Thread &t : rec.threads)
		tids.insert({t.pid, t.tid});
	// Duration is the extent of the spans: process start times may predate
	// the recording (eacgm record -p).
	double span_ns = tally.spans() ? static_cast<double>(tally.last_ns() - tally.first_ns()) : 0;
	auto count = [](size_t n, const char *one, const char *many) {
		return std::to_string(n) + " " + (n == 1 ? one : many);
	};
	return count(pids.size(), "process", "processes") + ", " + count(tids.size(), "thread", "threads") + ", " +
		count(tally.spans(), "span", "spans") + " over " + format_duration(span_ns) + "\n";
}

std::string format_summary(const Recording &rec, const SpanTally &tally, size_t max_rows_per_layer)
{
	std::string out = header_line(rec, tally);
	if (auto it = rec.meta.find("incomplete"); it != rec.meta.end())
		out += "incomplete recording: " + it->second + "\n";
	auto stats = tally.stats();
	size_t name_w = 8;
	for (const FunctionStats &f : stats)
		name_w = std::max(name_w, std::min<size_t>(width(f.name), 40));
	for (const FunctionStats &f : stats)
		name_w = std::max(name_w, width(f.layer) - std::min<size_t>(width(f.layer), 2));

	const size_t cols[] = {9, 8, 10, 10, 10, 10, 10};
	auto row = [&](const std::string &first_col, const std::vector<std::string> &cells) {
		std::string line = pad_right(first_col, name_w + 2);
		for (size_t i = 0; i < cells.size(); i++)
			line += pad_left(cells[i], cols[i]);
		while (!line.empty() && line.back() == ' ')
			line.pop_back();
		return line + "\n";
	};

	for (size_t i = 0; i < stats.size();) {
		const std::string &layer = stats[i].layer;
		bool sampled = false;
		for (size_t j = i; j < stats.size() && stats[j].layer == layer; j++)
			sampled |= stats[j].runs > 0;
		out += "\n" +
			row(layer,
			    sampled ? std::vector<std::string>{"calls", "samples", "time", "± 2 sd", "mean", "p50",
							       "p99"}
				    : std::vector<std::string>{"calls", "errors", "total", "mean", "p50", "p99",
							       "bytes"});
		size_t shown = 0, hidden = 0;
		uint64_t hidden_ns = 0;
		for (; i < stats.size() && stats[i].layer == layer; i++) {
			const FunctionStats &f = stats[i];
			if (max_rows_per_layer != 0 && shown == max_rows_per_layer) {
				hidden++;
				hidden_ns += f.total_ns;
				continue;
			}
			shown++;
			out += row("  " + truncate(f.name, name_w), stat_cells(f, sampled));
		}
		if (hidden)
			out += "  ... " + std::to_string(hidden) + " more functions, " +
				format_duration(static_cast<double>(hidden_ns)) + " in total\n";
	}
	if (stats.empty() && rec.metrics.empty())
		out += "\nno spans recorded\n";
	out += errors_line(tally.error_names());
	out += stragglers_section(tally.stragglers(), max_rows_per_layer);
	out += budget_section(rec);
	out += guard_section(rec);
	out += metrics_section(rec, max_rows_per_layer);
	out += detection_section(rec);
	out += anomalies_section(rec, tally.spans() ? tally.first_ns() : 0, max_rows_per_layer);
	out += "\n" + drops_line(rec.drops) + "\n";
	return out;
}

} // namespace eacgm
