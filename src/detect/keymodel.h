// SPDX-License-Identifier: Apache-2.0
// One key's model: which features it uses and how they are standardised,
// the call-site counts behind the call_site feature, the mixture, and the
// calibrated threshold.
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <armadillo>

#include "common/result.h"
#include "detect/features.h"
#include "detect/gmm.h"
#include "detect/threshold.h"

namespace eacgm::detect {

// The paper's rule scores an event by its density under its most likely
// component; the mixture rule by the whole mixture's density. The first
// ignores the component weights, so an event in a rare but tight mode is
// not flagged for the mode's rarity alone.
enum class ScoreRule { Component, Mixture };

struct ModelOptions {
	GmmOptions gmm;
	ScoreRule rule = ScoreRule::Component;
	double fpr = 0.01;       // target false-alarm rate the threshold is calibrated for
	size_t max_fit_rows = 0; // EM on at most this many rows, evenly spaced (0: all)
	// Calibrate the threshold on the rows fitted only, not on the excluded
	// ones too: a robust refit of a whole recording (offline.h), whose
	// excluded rows are the anomalies the first fit found. With few calls
	// the threshold is extrapolated from the lowest tenth of the scores,
	// and anomalies among them would drag it below themselves. (Online,
	// refit after refit, that would raise the threshold each time.)
	bool calibrate_on_fit = false;
};

struct Scored {
	double score = 0; // the rule's log density, plus site_log_p
	Gmm::Winner winner;
	arma::vec z;            // the standardised features the mixture uses
	double site_log_p = 0;  // ln p(call site), 0 for a span without one
	double site_excess = 0; // surprisal beyond the sites' entropy, >= 0
};

class KeyModel {
public:
	// Fits on the rows not excluded (at least kMinTrain of them) and
	// calibrates the threshold on all rows. Excluded are the events flagged
	// before: kept out of the fit so anomalies do not become normal, but
	// kept in the calibration, because a threshold set on a sample whose
	// tail was cut would sit higher each refit (measured: the false-alarm
	// rate climbs from 1% to 5% over ten refits when both leave them out).
	static Result<KeyModel> train(const std::vector<const Observation *> &rows, const ModelOptions &opt,
				      const std::vector<bool> &excluded = {});

	Scored score(const Observation &o) const;
	// The same model for calls whose features are `shift` above those it was
	// fitted on (a pooled model of several functions, each fitted relative to
	// its median: offline.h): scores, thresholds and attributions are the
	// same, and what attributions show is in the calls' own units.
	KeyModel shifted(const std::array<double, kFeatureCount> &shift) const;
	bool anomalous(const Scored &s) const { return s.score < threshold_.value; }

	const std::vector<unsigned> &used() const { return used_; }
	bool uses(unsigned feature) const { return std::find(used_.begin(), used_.end(), feature) != used_.end(); }
	const arma::vec &mean() const { return mean_; }
	const arma::vec &scale() const { return scale_; }
	const Gmm &gmm() const { return gmm_; }
	const Threshold &threshold() const { return threshold_; }
	const std::vector<Candidate> &candidates() const { return candidates_; }
	size_t trained_on() const { return trained_on_; }
	// Call sites of the training events, by count; the most common first.
	size_t site_count(const std::string &site) const;
	const std::string &common_site() const { return common_site_; }
	bool has_sites() const { return site_total_ > 0; }
	// Entropy of the training call sites (the expected surprisal), nats.
	double site_entropy() const { return site_entropy_; }
	// Training mean of every feature (also the unused ones), NaN if never seen.
	double train_mean(unsigned f) const { return all_mean_[f]; }
	double train_sd(unsigned f) const { return all_sd_[f]; }

	static constexpr size_t kMinTrain = 20;

private:
	double site_log_p(const std::string &site) const;
	std::vector<unsigned> used_;
	arma::vec mean_, scale_;
	std::array<double, kFeatureCount> all_mean_{}, all_sd_{};
	std::map<std::string, size_t> sites_;
	size_t site_total_ = 0;
	double site_entropy_ = 0;
	std::string common_site_;
	Gmm gmm_;
	Threshold threshold_;
	ScoreRule rule_ = ScoreRule::Component;
	std::vector<Candidate> candidates_;
	size_t trained_on_ = 0;
};

} // namespace eacgm::detect
