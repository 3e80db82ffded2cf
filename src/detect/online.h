// SPDX-License-Identifier: Apache-2.0
// Online detection: one model per key (layer/name), trained on a sliding
// window of the key's recent events, refitted in the background, and every
// new event scored on arrival against the model of the moment.
//
//   detect::OnlineDetector det(detect::DetectOptions{});   // background refits
//   det.observe(metric);  det.observe(event);               // context, as it arrives
//   if (auto a = det.observe(span)) store_anomaly(*a);      // scored at once
//   ...
//   for (auto &k : det.status()) ...;                       // per key: trained? on how many?
//
// Cold start: a key's first `cold_start` events train its first model and
// are not scored themselves (status() says so per key). Events flagged as
// anomalous stay out of later training windows, so a burst of anomalies
// does not become the new normal at the next refit; if more than half of a
// window is flagged, the behaviour has changed for good and the whole
// window is trained on (a level shift is accepted, not alarmed forever).
// Thread-safe: every public method may be called from any thread.
#pragma once
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/model.h"
#include "detect/features.h"
#include "detect/keymodel.h"
#include "detect/rootcause.h"
#include "pipeline/span.h"

namespace eacgm::detect {

struct DetectOptions {
	ModelOptions model;
	uint64_t window_ns = 3600'000'000'000ull;       // training window: the last hour
	size_t cold_start = 200;                        // events of a key before its first model
	size_t refit_every = 1000;                      // events of a key between refits (sooner while the
							// window is young: whenever it doubled) ...
	uint64_t refit_interval_ns = 60'000'000'000ull; // ... or this much time, whichever first
	size_t max_window_events = 20000;               // per key, the most recent (memory bound)
	// Past this many rows a key's window keeps every k-th call only, k =
	// max_window_events / max_window_rows rounded up: the same span of
	// calls, evenly thinned (0: every call). The fit sees max_fit_rows
	// evenly spaced rows anyway, and at a false-alarm rate of 1e-4 the
	// threshold is extrapolated from the lowest tenth of the scores with
	// 20,000 rows as with 2,000.
	size_t max_window_rows = 0;
	bool background = true; // false: refit inline, deterministic (eacgm detect on a file)
	// Background refits may use this share of one core, averaged, with
	// bursts up to refit_burst_s of CPU time (0: no limit). A key's first
	// model is fitted first and at once; refits of trained keys wait for
	// their turn. The models only ever lag, scoring never stops.
	double refit_cpu_share = 0;
	double refit_burst_s = 1.0;
	uint64_t context_margin_ns = 100'000'000; // root cause looks this far around an event
	// A call flagged for its duration or gap is reported only when it is
	// that much slower than typical (rootcause.h; eacgm detect, record and
	// serve: kWorthTelling). Its noise is the detector's own: set by it.
	Worth worth;
	// Metrics and events are kept this far behind the newest span scored:
	// a span's features and causes are read from them once, when it is
	// scored, and spans come at most a few seconds late. Kept for the whole
	// training window (an hour), the host layer's 600 rows a second grew a
	// recording by about 100 MB an hour.
	uint64_t context_keep_ns = 60'000'000'000ull;

	// For a tracer left attached all day (record, serve): scoring stays on
	// every call, training is what is rationed. Measured on a ResNet-18
	// step (18 torch functions, 1,500 calls/s), the defaults above refit each
	// function every 1,000 calls on up to 20,000 rows with 3 restarts per
	// component count: 13% of a core. Here EM sees at most 2,000 evenly
	// spaced rows from one k-means++ start per count, the window is refitted
	// each time it doubled and then once per turnover or 10 minutes, and all
	// refits together get half a percent of a core.
	static DetectOptions always_on()
	{
		DetectOptions o;
		o.model.max_fit_rows = 2000;
		o.model.gmm.restarts = 1;
		o.refit_every = o.max_window_events;
		o.max_window_rows = 2000;
		o.refit_interval_ns = 600'000'000'000ull;
		o.refit_cpu_share = 0.005;
		o.refit_burst_s = 0.05;
		// What eacgm detect reports, live too: without it an H100's
		// warm-up flagged 1,678 calls whose durations drifted with power.
		o.worth = kWorthTelling;
		return o;
	}
};

struct KeyStatus {
	std::string key; // layer/name
	size_t seen = 0, scored = 0, flagged = 0;
	bool trained = false;
	size_t trained_on = 0; // events in the model's training window
	unsigned components = 0;
	std::vector<std::string> features; // the ones the model uses
	double threshold = 0;
	bool extrapolated = false; // the threshold needed the tail fit (fpr * n < 10)
	size_t refits = 0;
	std::string note; // cold start, too few events, a failed fit: said here
};

class OnlineDetector {
public:
	explicit OnlineDetector(DetectOptions opt = {});
	~OnlineDetector();
	OnlineDetector(const OnlineDetector &) = delete;
	OnlineDetector &operator=(const OnlineDetector &) = delete;

	// Context for features and root cause; feed before the spans they cover.
	void observe(const Metric &m);
	void observe(const Event &e);
	// Scores the span against its key's current model; an anomaly if the
	// score falls below the key's threshold.
	std::optional<Anomaly> observe(const Span &s);
	// The same for a typed call (pipeline/span.h): read without a Span; one
	// is made only for an anomaly's report.
	std::optional<Anomaly> observe(const TypedSpans &batch, size_t i);

	// Waits until the background refits asked for so far are done, running
	// them at normal priority from then on (for the end of a recording).
	// skip_refits: drops the waiting refits of keys that have a model (at
	// the end of a recording nothing is left for them to score).
	void flush(bool skip_refits = false);
	std::vector<KeyStatus> status() const;
	const DetectOptions &options() const { return opt_; }

private:
	// A call in a key's training window, kept small: a window spans up to
	// max_window_events (20,000) calls of every key, all day. As whole
	// Observations (doubles, a call-site string each, about 210 bytes) a
	// GPT recording's 25 torch functions grew eacgm by 50 MB in its first
	// two minutes. Features as floats (a log feature needs no more than 7
	// digits) and the site as an index into the key's sites: 72 bytes,
	// and with max_window_rows at most 2,000 of them a key once it has seen
	// 20,000 calls (3,800 until then).
	struct Row {
		uint64_t seq = 0; // the key's call number (KeyStatus::seen)
		uint64_t start_ns = 0;
		std::array<float, kFeatureCount> x;
		uint32_t site = 0; // KeyState::sites; 0: none
		bool flagged = false;
	};
	struct KeyState {
		std::deque<Row> window;
		std::vector<std::string> sites{""}; // the window's call sites, each once
		std::unordered_map<std::string, uint32_t> site_ids;
		std::shared_ptr<const KeyModel> model;
		size_t since_fit = 0;
		uint64_t fit_calls = 0; // the calls the last fit's window spanned
		uint64_t last_fit_ns = 0;
		bool pending = false;
		bool tried = false; // a first fit was attempted (and may have failed)
		size_t holding = 0; // calls seen holding another traced call of their thread
		KeyStatus st;
	};
	struct Job {
		std::string key;
		std::vector<Observation> rows;
		std::vector<bool> excluded; // from the fit, not from the calibration
	};
	std::optional<Job> maybe_refit(const std::string &key, KeyState &ks, uint64_t now);
	static uint32_t site_id(KeyState &ks, const std::string &site);
	bool keeps(uint64_t n) const;
	void run_job(Job job);
	void worker();
	std::optional<Job> next_job(std::unique_lock<std::mutex> &lk, double &credit);

	DetectOptions opt_;
	mutable std::mutex mu_;
	std::condition_variable cv_, idle_cv_;
	Context ctx_;
	Extractor ext_;
	std::map<std::string, KeyState> keys_;
	Noise noise_; // each key's last training window: the machine's stalls (noise.h)
	// Per thread, its last span seen and its key: a span that holds the
	// next (spans by start, as a file is replayed) or the one before (by
	// end, as they arrive live) is a caller's (KeyState::holding).
	struct Last {
		uint64_t start_ns = 0, end_ns = 0;
		KeyState *ks = nullptr;
	};
	std::unordered_map<uint64_t, Last> last_;
	void note_holding(const TracedCall &s, KeyState &ks);
	// span: the call as a Span, asked for only when it is reported.
	std::optional<Anomaly> observe(const TracedCall &s, const std::function<Span()> &span);
	std::string key_buf_; // observe()'s key, under mu_
	std::deque<Job> jobs_;
	bool busy_ = false, stop_ = false, unlimited_ = false;
	uint64_t last_trim_ = 0;
	std::thread thread_;
};

} // namespace eacgm::detect
