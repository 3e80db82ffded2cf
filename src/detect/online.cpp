// SPDX-License-Identifier: Apache-2.0
#include "detect/online.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>

#include "detect/rootcause.h"
#include "probe/spec.h"

namespace eacgm::detect {

OnlineDetector::OnlineDetector(DetectOptions opt) : opt_(std::move(opt))
{
	opt_.worth.noise = &noise_; // the windows' stalls, as each key is fitted
	if (opt_.background)
		thread_ = std::thread([this] { worker(); });
}

OnlineDetector::~OnlineDetector()
{
	{
		std::lock_guard lk(mu_);
		stop_ = true;
	}
	cv_.notify_all();
	if (thread_.joinable())
		thread_.join();
}

void OnlineDetector::observe(const Metric &m)
{
	std::lock_guard lk(mu_);
	ctx_.add(m);
}

void OnlineDetector::observe(const Event &e)
{
	std::lock_guard lk(mu_);
	ctx_.add(e);
}

std::optional<OnlineDetector::Job> OnlineDetector::maybe_refit(const std::string &key, KeyState &ks, uint64_t now)
{
	if (ks.pending)
		return std::nullopt;
	// Refit when the window has doubled since the last fit (a model from
	// the first 200 calls, often warm-up, is soon replaced by one from more),
	// then every refit_every calls or refit_interval, whichever comes first.
	// Doubled in calls, not rows: a thinned window's rows stop growing long
	// before its calls do, and would refit it every few thousand calls.
	size_t every = ks.model ? std::min<size_t>(opt_.refit_every, std::max<uint64_t>(ks.fit_calls, 1)) : 0;
	bool due = ks.model ? (ks.since_fit >= every || now - ks.last_fit_ns >= opt_.refit_interval_ns)
			    : ks.window.size() >= std::max<size_t>(opt_.cold_start, KeyModel::kMinTrain) &&
			(!ks.tried || ks.since_fit >= opt_.refit_every);
	if (!due)
		return std::nullopt;
	size_t flagged = 0;
	for (const Row &r : ks.window)
		flagged += r.flagged;
	bool all = 2 * flagged > ks.window.size();
	Job job{key, {}, {}};
	job.rows.reserve(ks.window.size());
	for (const Row &r : ks.window) {
		Observation &o = job.rows.emplace_back();
		o.start_ns = r.start_ns;
		std::copy(r.x.begin(), r.x.end(), o.x.begin());
		o.site = ks.sites[r.site];
		job.excluded.push_back(!all && r.flagged);
	}
	ks.fit_calls = ks.window.empty() ? 0 : ks.st.seen - ks.window.front().seq + 1;
	ks.pending = true;
	ks.tried = true;
	ks.since_fit = 0;
	ks.last_fit_ns = now;
	return job;
}

// Whether a key's call number n goes into its window: every call up to
// max_window_rows, then every k-th, the window's max_window_events calls
// thinned to about max_window_rows.
bool OnlineDetector::keeps(uint64_t n) const
{
	size_t rows = opt_.max_window_rows;
	if (!rows || n <= rows || rows >= opt_.max_window_events)
		return true;
	size_t k = (opt_.max_window_events + rows - 1) / rows;
	return n % k == 0;
}

// The site's index in the key's table. A table grown past what its window
// can still name (sites that left the window stay in it) is rebuilt from
// the window first.
uint32_t OnlineDetector::site_id(KeyState &ks, const std::string &site)
{
	if (site.empty())
		return 0;
	if (auto it = ks.site_ids.find(site); it != ks.site_ids.end())
		return it->second;
	if (ks.sites.size() >= std::max<size_t>(4096, 2 * ks.window.size())) {
		std::vector<std::string> old = std::exchange(ks.sites, {""});
		ks.site_ids.clear();
		for (Row &r : ks.window) {
			if (!r.site)
				continue;
			auto [it, fresh] = ks.site_ids.try_emplace(old[r.site], uint32_t(ks.sites.size()));
			if (fresh)
				ks.sites.push_back(old[r.site]);
			r.site = it->second;
		}
	}
	uint32_t id = uint32_t(ks.sites.size());
	ks.sites.push_back(site);
	ks.site_ids.emplace(site, id);
	return id;
}

// Trains without the lock (the slow part), then swaps the model in.
void OnlineDetector::run_job(Job job)
{
	std::vector<const Observation *> rows;
	rows.reserve(job.rows.size());
	for (const Observation &o : job.rows)
		rows.push_back(&o);
	auto m = KeyModel::train(rows, opt_.model, job.excluded);
	std::lock_guard lk(mu_);
	KeyState &ks = keys_[job.key];
	ks.pending = false;
	// What the machine did to this key's window. The live detector scores
	// the traced calls (CUDA, NCCL, torch), not Python spans, so no key of
	// its is an exact Python function.
	noise_.set(job.key, rows,
		   2 * ks.holding >= ks.st.seen || !measures_machine(job.key.substr(0, job.key.find('/')), false));
	if (!m) {
		ks.st.note = "not trained: " + m.error().message;
		return;
	}
	ks.model = std::make_shared<const KeyModel>(std::move(*m));
	ks.st.refits++;
	ks.st.trained = true;
	ks.st.trained_on = ks.model->trained_on();
	ks.st.components = ks.model->gmm().components();
	ks.st.features.clear();
	for (unsigned f : ks.model->used())
		ks.st.features.push_back(kFeatures[f].name);
	ks.st.threshold = ks.model->threshold().value;
	ks.st.extrapolated = ks.model->threshold().extrapolated;
	if (ks.st.refits == 1)
		ks.st.note = "cold start: the first " + std::to_string(ks.model->trained_on()) +
			" events trained the first model and were not scored";
}

void OnlineDetector::note_holding(const TracedCall &s, KeyState &ks)
{
	if (last_.size() > 4096) // threads come and go all day: forget them now and then
		last_.clear();
	Last &l = last_[(uint64_t(s.pid) << 32) | s.tid];
	const uint64_t end = s.start_ns + s.dur_ns;
	// Spans of the same start and end (a Python function built from a
	// torch call's stack) hold each other: neither is counted.
	const bool same = l.start_ns == s.start_ns && l.end_ns == end;
	if (l.ks && !same && l.start_ns >= s.start_ns && l.end_ns <= end)
		ks.holding++; // live: it ended after the call it holds
	else if (l.ks && !same && s.start_ns >= l.start_ns && end <= l.end_ns)
		l.ks->holding++; // by start: the last one holds it
	l = {s.start_ns, end, &ks};
}

std::optional<Anomaly> OnlineDetector::observe(const Span &s)
{
	return observe(call_of(s), [&] { return s; });
}

std::optional<Anomaly> OnlineDetector::observe(const TypedSpans &batch, size_t i)
{
	const TypedSpan &t = batch.spans[i];
	const ProbeSpec &spec = batch.specs->probes[t.spec_id];
	const TracedCall c{.layer = spec.layer,
			   .name = spec.function,
			   .pid = t.pid,
			   .tid = t.tid,
			   .start_ns = t.start_ns,
			   .dur_ns = t.dur_ns,
			   .bytes = t.bytes,
			   .stack = i < batch.stacks.size() ? &batch.stacks[i] : nullptr,
			   .gap_unknown = t.weight != 1.0};
	return observe(c, [&] { return span_at(batch, i); });
}

std::optional<Anomaly> OnlineDetector::observe(const TracedCall &s, const std::function<Span()> &span)
{
	std::optional<Anomaly> out;
	std::optional<Job> job;
	{
		std::lock_guard lk(mu_);
		uint64_t now = s.start_ns;
		uint64_t keep = opt_.context_keep_ns;
		if (now > keep && now - keep > last_trim_ + keep / 16) {
			last_trim_ = now - keep;
			ctx_.trim(last_trim_);
		}
		std::string &key = key_buf_;
		key_of(s, key);
		KeyState &ks = keys_[key];
		if (ks.st.key.empty())
			ks.st.key = key;
		ks.st.seen++;
		note_holding(s, ks);
		Observation o = ext_.observe(s, ctx_, key);
		bool flagged = false;
		if (ks.model) {
			Scored sc = ks.model->score(o);
			ks.st.scored++;
			if (ks.model->anomalous(sc) && reportable(*ks.model, sc, opt_.worth, key, 1)) {
				flagged = true;
				ks.st.flagged++;
				out = anomaly_of(span(), o, *ks.model, sc, ctx_, opt_.context_margin_ns);
			}
		} else if (ks.st.note.empty() || ks.st.note.starts_with("cold start") ||
			   ks.st.note.starts_with("too few")) {
			ks.st.note = "too few events: " + std::to_string(ks.st.seen) + " seen, the first model needs " +
				std::to_string(std::max<size_t>(opt_.cold_start, KeyModel::kMinTrain));
		}
		if (keeps(ks.st.seen)) { // a thinned window's row is made only when kept
			Row &row = ks.window.emplace_back(Row{.seq = ks.st.seen,
							      .start_ns = o.start_ns,
							      .x = {},
							      .site = site_id(ks, o.site),
							      .flagged = flagged});
			std::copy(o.x.begin(), o.x.end(), row.x.begin());
		}
		ks.since_fit++;
		while (!ks.window.empty() &&
		       (ks.st.seen - ks.window.front().seq >= opt_.max_window_events ||
			(now > opt_.window_ns && ks.window.front().start_ns < now - opt_.window_ns)))
			ks.window.pop_front();
		job = maybe_refit(key, ks, now);
		if (job && opt_.background) {
			jobs_.push_back(std::move(*job));
			job.reset();
			cv_.notify_one();
		}
	}
	if (job) // inline: the next span already sees the new model
		run_job(std::move(*job));
	return out;
}

static double thread_cpu_s()
{
	timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The next job to run, once the CPU budget allows: a key's first model
// before any refit. Empty when stopping.
std::optional<OnlineDetector::Job> OnlineDetector::next_job(std::unique_lock<std::mutex> &lk, double &credit)
{
	using clock = std::chrono::steady_clock;
	auto last = clock::now();
	for (;;) {
		if (stop_)
			return std::nullopt;
		auto now = clock::now();
		credit = std::min(opt_.refit_burst_s,
				  credit + opt_.refit_cpu_share * std::chrono::duration<double>(now - last).count());
		last = now;
		auto first =
			std::find_if(jobs_.begin(), jobs_.end(), [&](const Job &j) { return !keys_[j.key].model; });
		auto it = first != jobs_.end() ? first : jobs_.begin();
		bool limited = opt_.refit_cpu_share > 0 && !unlimited_ && first == jobs_.end();
		if (it != jobs_.end() && (!limited || credit >= 0)) {
			Job job = std::move(*it);
			jobs_.erase(it);
			return job;
		}
		if (it == jobs_.end())
			cv_.wait(lk);
		else // until the budget has earned back what the last refits spent
			cv_.wait_for(lk, std::chrono::duration<double>(-credit / opt_.refit_cpu_share));
	}
}

void OnlineDetector::worker()
{
	// Refits are never urgent: they run only on CPU time the traced job
	// (and everything else) leaves idle, so they cannot stall it.
	sched_param idle{};
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
	double credit = opt_.refit_burst_s;
	std::unique_lock lk(mu_);
	for (;;) {
		auto job = next_job(lk, credit);
		if (!job)
			return;
		busy_ = true;
		lk.unlock();
		double t0 = thread_cpu_s();
		run_job(std::move(*job));
		credit -= thread_cpu_s() - t0;
		lk.lock();
		busy_ = false;
		if (jobs_.empty()) {
			idle_cv_.notify_all();
			// A fit's matrices are freed, but glibc keeps the pages of
			// this thread's arena (21 MB of eacgm's RSS on GPT): give
			// them back while nothing waits.
			lk.unlock();
			malloc_trim(0);
			lk.lock();
		}
	}
}

void OnlineDetector::flush(bool skip_refits)
{
	// The refits left are what stands between the end of the traced job and
	// eacgm's exit: on a busy node a SCHED_IDLE thread might wait seconds
	// for a free CPU, so it finishes them at normal priority.
	if (thread_.joinable()) {
		sched_param normal{};
		pthread_setschedparam(thread_.native_handle(), SCHED_OTHER, &normal);
	}
	std::unique_lock lk(mu_);
	for (auto it = jobs_.begin(); skip_refits && it != jobs_.end();) {
		if (keys_[it->key].model) {
			keys_[it->key].pending = false;
			it = jobs_.erase(it);
		} else {
			++it;
		}
	}
	unlimited_ = true;
	cv_.notify_all();
	idle_cv_.wait(lk, [&] { return !thread_.joinable() || (jobs_.empty() && !busy_); });
}

std::vector<KeyStatus> OnlineDetector::status() const
{
	std::lock_guard lk(mu_);
	std::vector<KeyStatus> out;
	for (const auto &[k, ks] : keys_)
		out.push_back(ks.st);
	return out;
}

} // namespace eacgm::detect
