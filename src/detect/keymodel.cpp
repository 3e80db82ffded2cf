// SPDX-License-Identifier: Apache-2.0
#include "detect/keymodel.h"

#include <algorithm>
#include <cmath>

namespace eacgm::detect {

// The call site is categorical: it enters the score as its own factor,
// ln p(site), next to the mixture's density of the numeric features
// (independent of them), not as a mixture dimension, where a handful of
// discrete values would make spiky components. Seen sites have their
// training share; a site never seen gets one count in n + 1 (add-one), a
// penalty that grows with the evidence against it.
double KeyModel::site_log_p(const std::string &site) const
{
	if (site.empty() || site_total_ == 0)
		return 0;
	auto it = sites_.find(site);
	if (it == sites_.end())
		return -std::log(static_cast<double>(site_total_ + 1));
	return std::log(static_cast<double>(it->second) / static_cast<double>(site_total_));
}

size_t KeyModel::site_count(const std::string &site) const
{
	auto it = sites_.find(site);
	return it == sites_.end() ? 0 : it->second;
}

Result<KeyModel> KeyModel::train(const std::vector<const Observation *> &all, const ModelOptions &opt,
				 const std::vector<bool> &excluded)
{
	std::vector<const Observation *> rows;
	for (size_t i = 0; i < all.size(); i++)
		if (i >= excluded.size() || !excluded[i])
			rows.push_back(all[i]);
	if (rows.size() < kMinTrain)
		return make_error(ErrorKind::BadInput,
				  std::to_string(rows.size()) + " events are too few to train on (need " +
					  std::to_string(kMinTrain) + ")");
	KeyModel m;
	m.rule_ = opt.rule;
	m.trained_on_ = rows.size();
	for (const Observation *o : rows)
		if (!o->site.empty()) {
			m.sites_[o->site]++;
			m.site_total_++;
		}
	size_t best = 0;
	for (const auto &[site, n] : m.sites_)
		if (n > best)
			best = n, m.common_site_ = site;

	for (const auto &[site, c] : m.sites_) {
		double p = static_cast<double>(c) / static_cast<double>(m.site_total_);
		m.site_entropy_ -= p * std::log(p);
	}

	const size_t n = rows.size();
	arma::mat raw(kFeatureCount, n);
	for (size_t i = 0; i < n; i++) {
		for (unsigned f = 0; f < kFeatureCount; f++)
			raw(f, i) = rows[i]->x[f];
		raw(kCallSite, i) = -m.site_log_p(rows[i]->site); // surprisal, shown, not modelled
	}
	for (unsigned f = 0; f < kFeatureCount; f++) {
		double sum = 0, sq = 0;
		size_t have = 0;
		for (size_t i = 0; i < n; i++)
			if (double v = raw(f, i); std::isfinite(v)) {
				sum += v;
				sq += v * v;
				have++;
			}
		m.all_mean_[f] = have ? sum / static_cast<double>(have) : NAN;
		double var = have > 1
			? std::max(0.0, (sq - sum * sum / static_cast<double>(have)) / static_cast<double>(have - 1))
			: 0;
		m.all_sd_[f] = have ? std::sqrt(var) : NAN;
		// A feature that varies less than its floor still takes part, at
		// the floor's scale: the durations of a function that never varied
		// by 5% are what a 30x slower call must be measured against (left
		// out, the slowdown went unseen; that it is worth reporting is
		// rootcause.h's Worth to say). The bandwidth only where the bytes
		// vary: of a fixed size it is the duration again, and the two,
		// modelled together, split the blame for a slow call between them
		// by the last bits of the arithmetic (+1.2 and -0.2 of it, one way
		// on a Xeon and the other on an EPYC; kLogBytes comes first).
		if (f != kCallSite && 2 * have >= n && m.all_sd_[f] > 0 && !(f == kLogBandwidth && !m.uses(kLogBytes)))
			m.used_.push_back(f);
	}
	if (m.used_.empty())
		return make_error(ErrorKind::BadInput,
				  "no feature both varies and is present in half of the events (durations, gaps and "
				  "context constant or missing), so there is nothing to model");
	const size_t d = m.used_.size();
	m.mean_.set_size(d);
	m.scale_.set_size(d);
	for (size_t j = 0; j < d; j++) {
		m.mean_(j) = m.all_mean_[m.used_[j]];
		m.scale_(j) = std::max(m.all_sd_[m.used_[j]], kFeatures[m.used_[j]].floor);
	}
	// EM costs rows x components x iterations x restarts: past max_fit_rows
	// an evenly spaced subsample fits the mixture (its shape does not need
	// more), while the moments above and the threshold below use every row.
	const size_t fit_n = opt.max_fit_rows && n > opt.max_fit_rows ? opt.max_fit_rows : n;
	arma::mat Z(d, fit_n);
	for (size_t k = 0; k < fit_n; k++) {
		size_t i = fit_n == n ? k : k * n / fit_n;
		for (size_t j = 0; j < d; j++) {
			double v = raw(m.used_[j], i);
			// A missing value is the mean: it neither helps nor hurts.
			Z(j, k) = std::isfinite(v) ? (v - m.mean_(j)) / m.scale_(j) : 0;
		}
	}
	auto sel = select_by_bic(Z, opt.gmm);
	if (!sel)
		return sel.error();
	m.gmm_ = std::move(sel->model);
	m.candidates_ = std::move(sel->candidates);
	std::vector<double> scores;
	scores.reserve(all.size());
	for (const Observation *o : opt.calibrate_on_fit ? rows : all)
		scores.push_back(m.score(*o).score);
	m.threshold_ = calibrate(std::move(scores), opt.fpr);
	return m;
}

KeyModel KeyModel::shifted(const std::array<double, kFeatureCount> &shift) const
{
	KeyModel m = *this;
	for (size_t j = 0; j < m.used_.size(); j++)
		m.mean_(j) += shift[m.used_[j]];
	for (unsigned f = 0; f < kFeatureCount; f++)
		m.all_mean_[f] += shift[f];
	return m;
}

Scored KeyModel::score(const Observation &o) const
{
	Scored s;
	s.z.set_size(used_.size());
	for (size_t j = 0; j < used_.size(); j++) {
		unsigned f = used_[j];
		double v = o.x[f];
		s.z(j) = std::isfinite(v) ? (v - mean_(j)) / scale_(j) : 0;
	}
	s.winner = gmm_.most_likely(s.z.memptr());
	s.site_log_p = site_log_p(o.site);
	s.site_excess = o.site.empty() || !has_sites() ? 0 : std::max(0.0, -s.site_log_p - site_entropy_);
	s.score = (rule_ == ScoreRule::Component ? s.winner.log_density : s.winner.log_mixture) + s.site_log_p;
	return s;
}

} // namespace eacgm::detect
