// SPDX-License-Identifier: Apache-2.0
// eacgm detect: anomalies in a recording, with their root causes
// (src/detect), printed and written back into the recording.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "common/fs.h"
#include "common/units.h"
#include "detect/offline.h"
#include "detect/rootcause.h"
#include "export/summary.h"
#include "store/store.h"

namespace eacgm {

using nlohmann::json;

namespace {

Result<std::pair<unsigned, unsigned>> parse_components(const std::string &s)
{
	unsigned lo = 0, hi = 0;
	char extra;
	if (std::sscanf(s.c_str(), "%u-%u%c", &lo, &hi, &extra) == 2 ||
	    (std::sscanf(s.c_str(), "%u%c", &lo, &extra) == 1 && (hi = lo)))
		if (lo >= 1 && lo <= hi && hi <= 16)
			return std::pair(lo, hi);
	return make_error(ErrorKind::BadInput,
			  "--components '" + s + "' is not a range: give MIN-MAX (e.g. 1-4) or one count, " +
				  "between 1 and 16");
}

json anomaly_json(const Anomaly &a, int64_t wall_offset_ns)
{
	return {{"time_ns", a.ts_ns},
		{"unix_time", static_cast<double>(static_cast<int64_t>(a.ts_ns) + wall_offset_ns) / 1e9},
		{"dur_ns", a.dur_ns},
		{"layer", a.layer},
		{"name", a.name},
		{"pid", a.pid},
		{"tid", a.tid},
		{"score", a.score},
		{"threshold", a.threshold},
		{"fault", detect::fault_class(a)},
		{"features", a.features},
		{"causes", a.causes}};
}

json key_json(const detect::KeyStatus &k)
{
	return {{"key", k.key},
		{"seen", k.seen},
		{"scored", k.scored},
		{"flagged", k.flagged},
		{"trained", k.trained},
		{"trained_on", k.trained_on},
		{"components", k.components},
		{"features", k.features},
		{"threshold", k.threshold},
		{"threshold_extrapolated", k.extrapolated},
		{"refits", k.refits},
		{"note", k.note}};
}

// CSV: one row per call; a feature the call does not carry, or a score it
// did not get, is empty. Numbers as %.17g: the table is data, not a view.
std::string feature_csv(const std::vector<detect::FeatureRow> &rows)
{
	auto num = [](double v) {
		if (!std::isfinite(v))
			return std::string();
		char buf[40];
		std::snprintf(buf, sizeof buf, "%.17g", v);
		return std::string(buf);
	};
	auto quoted = [](const std::string &s) {
		std::string q = "\"";
		for (char c : s)
			q += c == '"' ? std::string("\"\"") : std::string(1, c);
		return q + "\"";
	};
	std::string out = "key,pid,tid,start_ns,dur_ns,warmup,score,threshold,flagged,fault,worth,site";
	for (unsigned f = 0; f < detect::kFeatureCount; f++)
		if (f != detect::kCallSite)
			out += std::string(",") + detect::kFeatures[f].name;
	out += "\n";
	for (const auto &r : rows) {
		out += quoted(r.key) + "," + std::to_string(r.pid) + "," + std::to_string(r.tid) + "," +
			std::to_string(r.start_ns) + "," + std::to_string(r.dur_ns) + "," + (r.warmup ? "1" : "0") +
			"," + num(r.score) + "," + num(r.threshold) + "," + (r.flagged ? "1" : "0") + "," + r.fault +
			"," + (r.worth ? "1" : "0") + "," + quoted(r.site);
		for (unsigned f = 0; f < detect::kFeatureCount; f++)
			if (f != detect::kCallSite)
				out += "," + num(r.x[f]);
		out += "\n";
	}
	return out;
}

} // namespace

int run_detect(const DetectArgs &args)
{
	auto comps = parse_components(args.components);
	if (!comps) {
		std::cerr << "eacgm: " << comps.error().message << "\n";
		return 2;
	}
	if (!args.features.empty() && args.replay) {
		std::cerr << "eacgm: --features writes the feature table of a whole-recording fit; --replay judges "
			     "calls one by one as they came: drop one of them\n";
		return 2;
	}
	if (!args.features.empty())
		if (auto r = check_writable(args.features); !r) {
			std::cerr << "eacgm: --features " << args.features << ": " << r.error().message << "\n";
			return 2;
		}
	auto rec = load_recording(args.db);
	if (!rec) {
		std::cerr << "eacgm: " << rec.error().message << "\n";
		return 1;
	}
	if (auto it = rec->meta.find("incomplete"); it != rec->meta.end())
		std::cerr << "eacgm: warning: " << args.db << " is incomplete (" << it->second
			  << "): calls after its end were not recorded\n";
	detect::DetectOptions opt;
	opt.model.fpr = args.fpr;
	opt.model.rule = args.rule == "mixture" ? detect::ScoreRule::Mixture : detect::ScoreRule::Component;
	opt.model.gmm.covariance = args.covariance == "diag" ? detect::Covariance::Diag : detect::Covariance::Full;
	opt.model.gmm.min_components = comps->first;
	opt.model.gmm.max_components = comps->second;
	opt.model.gmm.restarts = args.restarts;
	opt.model.gmm.seed = args.seed;
	opt.model.gmm.var_floor = args.var_floor;
	opt.model.gmm.min_weight = args.min_weight;
	opt.model.max_fit_rows = args.max_fit_rows;
	opt.window_ns = static_cast<uint64_t>(args.window_s * 1e9);
	opt.cold_start = args.cold_start;
	opt.refit_every = args.refit_every;
	opt.worth = {args.min_slowdown, static_cast<uint64_t>(args.min_excess_us * 1e3), args.noise_alpha,
		     static_cast<uint64_t>(args.sure_excess_us * 1e3)};

	auto rep = detect::detect_recording(rec.value(), opt, args.layers, args.replay, !args.features.empty());
	if (!args.features.empty())
		if (auto r = write_file_atomic(args.features, feature_csv(rep.rows)); !r) {
			std::cerr << "eacgm: " << r.error().message << "\n";
			return 1;
		}
	if (!args.no_store)
		if (auto r = replace_anomalies(args.db, rep.anomalies); !r) {
			std::cerr << "eacgm: " << r.error().message << "\n";
			return 1;
		}

	if (args.json) {
		json out = {{"recording", args.db},
			    {"spans", rep.spans},
			    {"fpr", args.fpr},
			    {"anomalies", json::array()},
			    {"keys", json::array()}};
		for (const Anomaly &a : rep.anomalies)
			out["anomalies"].push_back(anomaly_json(a, rec->wall_offset_ns));
		for (const auto &k : rep.keys)
			out["keys"].push_back(key_json(k));
		out["waited_behind_own"] = rep.waited_behind_own;
		out["start_up"] = json::array();
		for (const auto &su : rep.start_ups)
			out["start_up"].push_back(
				{{"pid", su.pid},
				 {"calls", su.calls},
				 {"of_calls", su.of_calls},
				 {"unix_time",
				  static_cast<double>(static_cast<int64_t>(su.start_ns) + rec->wall_offset_ns) / 1e9},
				 {"dur_s", static_cast<double>(su.end_ns - su.start_ns) / 1e9}});
		std::cout << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
		return 0;
	}

	size_t trained = 0;
	for (const auto &k : rep.keys)
		trained += k.trained;
	std::cout << rep.anomalies.size() << " anomalies in " << rep.spans << " spans; " << trained << " of "
		  << rep.keys.size() << " functions modelled (target false-alarm rate " << args.fpr << ")\n";
	if (rep.spans == 0)
		std::cout << "no spans to score" << (args.layers.empty() ? "" : " in the chosen layers") << "\n";
	else if (trained == 0 && args.replay)
		std::cout << "no function had enough calls for a model (the first needs " << opt.cold_start
			  << "); record longer or lower --cold-start\n";
	else if (trained == 0)
		std::cout << "no function had enough calls for a model (" << detect::KeyModel::kMinTrain
			  << " past its warm-up, or " << detect::kMinPooledCalls
			  << " each for its layer's pooled model); record longer\n";

	for (const auto &su : rep.start_ups)
		std::cout << "process " << su.pid << ": its start-up, not judged: its first " << su.calls << " of "
			  << su.of_calls << " calls (" << (100 * su.calls + su.of_calls / 2) / su.of_calls << "%), "
			  << format_duration(static_cast<double>(su.end_ns - su.start_ns))
			  << ", until every function it calls steadily had warmed up\n";
	if (rep.waited_behind_own)
		std::cout << rep.waited_behind_own
			  << " slow calls not reported: they only waited to run (their run-queue wait), behind the"
			     " recording agent, their process's own threads, or no other process for long\n";
	char line[256];
	std::snprintf(line, sizeof line, "\n%-36s %7s %7s %7s %5s  %s\n", "function", "calls", "scored", "flagged", "k",
		      "features / note");
	std::cout << line;
	std::vector<std::string> few;
	for (const auto &k : rep.keys) {
		if (!k.trained && k.note.starts_with("too few")) {
			few.push_back(k.key + " (" + std::to_string(k.seen) + ")");
			continue;
		}
		std::string feats;
		for (const auto &f : k.features)
			feats += (feats.empty() ? "" : ",") + f;
		std::snprintf(line, sizeof line, "%-36s %7zu %7zu %7zu %5u  ", k.key.substr(0, 36).c_str(), k.seen,
			      k.scored, k.flagged, k.components);
		std::cout << line << (k.trained ? feats + (k.note.empty() ? "" : "; ") : "") << k.note << "\n";
	}
	if (!few.empty()) {
		if (args.replay)
			std::cout << few.size() << " functions with fewer than " << opt.cold_start
				  << " calls (too few events for a model; --cold-start lowers it):";
		else
			std::cout << few.size() << " functions with too few calls for a model, even pooled with "
				  << "their layer's:";
		for (size_t i = 0; i < few.size() && i < 8; i++)
			std::cout << (i ? ", " : " ") << few[i];
		std::cout << (few.size() > 8 ? ", ... (--json lists all)\n" : "\n");
	}
	uint64_t first = rec->spans.empty() ? 0 : rec->spans.front().start_ns;
	size_t shown = 0;
	for (const Anomaly &a : rep.anomalies) {
		if (args.max_rows && shown++ == args.max_rows) {
			std::cout << "... " << rep.anomalies.size() - args.max_rows
				  << " more anomalies (--max-rows 0 or --json shows all)\n";
			break;
		}
		std::snprintf(line, sizeof line, "\n+%s %s %s pid %u tid %u: score %.1f < %.1f",
			      format_duration(static_cast<double>(a.ts_ns - std::min(first, a.ts_ns))).c_str(),
			      a.layer.c_str(), a.name.c_str(), a.pid, a.tid, a.score, a.threshold);
		std::string fault = detect::fault_class(a);
		std::cout << line << (fault.empty() ? "" : ": " + detect::fault_name(fault)) << "\n";
		for (size_t i = 0; i < a.causes.size() && i < 3; i++)
			std::snprintf(line, sizeof line, "  %.2f %s\n", a.causes[i].value("strength", 0.0),
				      a.causes[i].value("what", std::string("?")).c_str()),
				std::cout << line;
	}
	if (!args.no_store)
		std::cout << "\nwrote " << rep.anomalies.size() << " anomalies to " << args.db
			  << " (eacgm summary and eacgm export show them)\n";
	return 0;
}

} // namespace eacgm
