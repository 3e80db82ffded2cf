// SPDX-License-Identifier: Apache-2.0
// Gaussian mixture models for the detector: EM by Armadillo (gmm_full /
// gmm_diag), seeded by k-means++ with restarts, the number of components
// chosen by BIC, and the per-event quantities scoring and root cause need.
//
// Data are columns: X is dims x n (Armadillo's convention), already
// standardised by the caller (features.h), so one variance floor fits all
// dimensions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <armadillo>

#include "common/result.h"

namespace eacgm::detect {

enum class Covariance { Full, Diag };

struct GmmOptions {
	Covariance covariance = Covariance::Full;
	unsigned min_components = 1;
	unsigned max_components = 4;
	unsigned restarts = 3;     // k-means++ seeds per component count; the best likelihood wins
	unsigned kmeans_iter = 10; // Lloyd iterations after seeding
	unsigned em_iter = 200;    // at most
	// EM stops once its iterations gain less than this in the average log
	// likelihood of an event, scikit-learn's rule and default. Armadillo's
	// own stop is a change below the machine epsilon, which real windows
	// of calls never reach: every fit ran all em_iter iterations. 0: run
	// em_iter iterations (the scikit-learn check, with tol=0 there too).
	double tol = 1e-3;
	// Smallest variance of a component, in standardised units: a component
	// cannot collapse onto a few identical values (a quantised duration).
	double var_floor = 1e-3;
	// A component count whose smallest component holds less than this share
	// of the events is not chosen: a "normal mode" seen that rarely would
	// make the rare events it covers look normal (the ones we look for).
	double min_weight = 0.02;
	uint64_t seed = 1;
};

// One fitted mixture. Densities are natural logs.
class Gmm {
public:
	// EM from k-means++ seeds, `restarts` times; keeps the best likelihood.
	static Result<Gmm> fit(const arma::mat &X, unsigned components, const GmmOptions &opt);
	// EM from the given parameters (means dims x k, covariances dims x dims x k,
	// weights 1 x k), no seeding: what the scikit-learn check compares.
	// tol: GmmOptions::tol (0: em_iter iterations).
	static Result<Gmm> fit_from(const arma::mat &X, const arma::mat &means, const arma::cube &covs,
				    const arma::rowvec &weights, Covariance cov, unsigned em_iter, double var_floor,
				    double tol = 0);
	// A model with given parameters, no fitting (tests, sampling).
	static Result<Gmm> from_params(const arma::mat &means, const arma::cube &covs, const arma::rowvec &weights,
				       Covariance cov);

	unsigned dims() const { return static_cast<unsigned>(means_.n_rows); }
	unsigned components() const { return static_cast<unsigned>(means_.n_cols); }
	Covariance covariance() const { return cov_; }
	const arma::mat &means() const { return means_; }
	const arma::cube &covs() const { return covs_; }
	const arma::rowvec &weights() const { return weights_; }

	// log N(x | mean_k, cov_k), without the weight.
	double log_component(const double *x, unsigned k) const;
	// log sum_k w_k N(x | mean_k, cov_k).
	double log_likelihood(const double *x) const;
	// The component with the largest posterior (w_k N_k(x)) and x's log
	// density under it: the paper's score.
	struct Winner {
		unsigned component = 0;
		double log_density = 0; // log N_k(x)
		double log_mixture = 0; // log sum_j w_j N_j(x), computed on the way
	};
	Winner most_likely(const double *x) const;
	double total_log_likelihood(const arma::mat &X) const;
	// Free parameters, as scikit-learn counts them (_n_parameters).
	unsigned n_parameters() const;
	double bic(const arma::mat &X) const;
	// Precision of component k (inverse covariance), for root cause.
	arma::mat precision(unsigned k) const;

private:
	arma::mat means_;
	arma::cube covs_;
	arma::rowvec weights_;
	Covariance cov_ = Covariance::Full;
	// Per component: the inverse of the Cholesky factor (lower) and
	// -0.5 * (d log 2pi + log det cov) + log w_k.
	arma::cube chol_inv_;
	arma::rowvec log_norm_;
	arma::rowvec log_weights_;
};

// One row per component count tried by select().
struct Candidate {
	unsigned components = 0;
	double log_likelihood = 0; // total over the training data
	double bic = 0;
	std::string rejected; // why it was not eligible; empty if it was
};

struct Selection {
	Gmm model;
	std::vector<Candidate> candidates;
};

// Fits min..max components and keeps the lowest BIC among the eligible
// counts (every component holding at least min_weight of the events).
Result<Selection> select_by_bic(const arma::mat &X, const GmmOptions &opt);

} // namespace eacgm::detect
