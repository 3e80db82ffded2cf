// SPDX-License-Identifier: Apache-2.0
#include "detect/gmm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <random>

namespace eacgm::detect {

namespace {

double log_add_exp(double a, double b)
{
	if (a == -std::numeric_limits<double>::infinity())
		return b;
	double m = std::max(a, b);
	return m + std::log1p(std::exp(std::min(a, b) - m));
}

double sq_dist(const arma::mat &X, arma::uword i, const arma::mat &C, arma::uword k)
{
	const double *x = X.colptr(i), *c = C.colptr(k);
	double s = 0;
	for (arma::uword d = 0; d < X.n_rows; d++)
		s += (x[d] - c[d]) * (x[d] - c[d]);
	return s;
}

// k-means++ (Arthur and Vassilvitskii 2007): each next centre is drawn with
// probability proportional to its squared distance from the chosen ones,
// which spreads the seeds over the modes; then a few Lloyd iterations.
arma::mat kmeans_pp(const arma::mat &X, unsigned k, unsigned iters, std::mt19937_64 &rng)
{
	const arma::uword n = X.n_cols;
	arma::mat C(X.n_rows, k);
	std::uniform_int_distribution<arma::uword> pick(0, n - 1);
	C.col(0) = X.col(pick(rng));
	std::vector<double> d2(n, std::numeric_limits<double>::infinity());
	for (unsigned c = 1; c < k; c++) {
		double total = 0;
		for (arma::uword i = 0; i < n; i++) {
			d2[i] = std::min(d2[i], sq_dist(X, i, C, c - 1));
			total += d2[i];
		}
		arma::uword chosen = pick(rng);
		if (total > 0) { // else every point sits on a centre: any will do
			double r = std::uniform_real_distribution<double>(0, total)(rng);
			for (arma::uword i = 0; i < n; i++) {
				r -= d2[i];
				if (r <= 0) {
					chosen = i;
					break;
				}
			}
		}
		C.col(c) = X.col(chosen);
	}
	std::vector<unsigned> label(n, 0);
	for (unsigned it = 0; it < iters; it++) {
		bool changed = false;
		for (arma::uword i = 0; i < n; i++) {
			unsigned best = 0;
			double bd = sq_dist(X, i, C, 0);
			for (unsigned c = 1; c < k; c++)
				if (double d = sq_dist(X, i, C, c); d < bd)
					bd = d, best = c;
			changed |= label[i] != best || it == 0;
			label[i] = best;
		}
		if (!changed)
			break;
		arma::mat sum(X.n_rows, k, arma::fill::zeros);
		std::vector<arma::uword> count(k, 0);
		for (arma::uword i = 0; i < n; i++) {
			sum.col(label[i]) += X.col(i);
			count[label[i]]++;
		}
		for (unsigned c = 0; c < k; c++)
			if (count[c]) // an emptied cluster keeps its centre
				C.col(c) = sum.col(c) / static_cast<double>(count[c]);
	}
	return C;
}

// Initial covariances and weights from the hard assignment to the nearest
// centre, as scikit-learn does from its k-means responsibilities.
void initial_params(const arma::mat &X, const arma::mat &C, double var_floor, arma::cube &covs, arma::rowvec &w)
{
	const unsigned k = static_cast<unsigned>(C.n_cols), d = static_cast<unsigned>(X.n_rows);
	std::vector<std::vector<arma::uword>> members(k);
	for (arma::uword i = 0; i < X.n_cols; i++) {
		unsigned best = 0;
		double bd = sq_dist(X, i, C, 0);
		for (unsigned c = 1; c < k; c++)
			if (double dd = sq_dist(X, i, C, c); dd < bd)
				bd = dd, best = c;
		members[best].push_back(i);
	}
	arma::vec global_var = arma::var(X, 1, 1);
	covs.set_size(d, d, k);
	w.set_size(k);
	for (unsigned c = 0; c < k; c++) {
		const auto &m = members[c];
		w(c) = std::max<double>(static_cast<double>(m.size()), 1.0) / static_cast<double>(X.n_cols);
		if (m.size() > d) {
			arma::mat sub = X.cols(arma::uvec(m));
			sub.each_col() -= C.col(c);
			covs.slice(c) = sub * sub.t() / static_cast<double>(m.size());
		} else { // too few members for a covariance: the data's spread
			covs.slice(c) = arma::diagmat(global_var);
		}
		covs.slice(c).diag() += var_floor;
	}
	w /= arma::accu(w);
}

} // namespace

Result<Gmm> Gmm::from_params(const arma::mat &means, const arma::cube &covs, const arma::rowvec &weights,
			     Covariance cov)
{
	const arma::uword d = means.n_rows, k = means.n_cols;
	if (k == 0 || d == 0 || covs.n_rows != d || covs.n_cols != d || covs.n_slices != k || weights.n_elem != k)
		return make_error(ErrorKind::BadInput,
				  "mixture parameters do not agree in size (" + std::to_string(d) + " dims, " +
					  std::to_string(k) + " components)");
	Gmm g;
	g.means_ = means;
	g.covs_ = covs;
	g.weights_ = weights;
	g.cov_ = cov;
	if (cov == Covariance::Diag)
		for (arma::uword c = 0; c < k; c++)
			g.covs_.slice(c) = arma::diagmat(g.covs_.slice(c));
	g.chol_inv_.set_size(d, d, k);
	g.log_norm_.set_size(k);
	g.log_weights_ = arma::log(weights);
	for (arma::uword c = 0; c < k; c++) {
		arma::mat L;
		if (!arma::chol(L, g.covs_.slice(c), "lower"))
			return make_error(ErrorKind::Other,
					  "component " + std::to_string(c) +
						  "'s covariance is not positive definite; raise the variance floor");
		g.chol_inv_.slice(c) = arma::inv(arma::trimatl(L));
		double log_det = 2 * arma::accu(arma::log(L.diag()));
		g.log_norm_(c) = -0.5 * (static_cast<double>(d) * std::log(2 * std::numbers::pi) + log_det);
	}
	return g;
}

// Runs EM on `model` (Armadillo's gmm_full or gmm_diag, parameters set):
// em_iter iterations, or with tol > 0 until a run of kEmChunk iterations
// gains less than tol in the average log likelihood of an event. EM never
// lowers the likelihood, so the last of those iterations gained less than
// tol too: scikit-learn's stop, checked once a chunk (the check costs an
// E step) instead of every iteration.
template <typename Model>
static bool run_em(Model &model, const arma::mat &X, unsigned em_iter, double var_floor, double tol)
{
	constexpr unsigned kEmChunk = 8;
	if (tol <= 0)
		return model.learn(X, model.n_gaus(), arma::eucl_dist, arma::keep_existing, 0, em_iter, var_floor,
				   false);
	double last = model.avg_log_p(X);
	for (unsigned done = 0; done < em_iter;) {
		unsigned n = std::min(kEmChunk, em_iter - done);
		if (!model.learn(X, model.n_gaus(), arma::eucl_dist, arma::keep_existing, 0, n, var_floor, false))
			return false;
		done += n;
		double now = model.avg_log_p(X);
		if (!std::isfinite(now))
			return false;
		if (now - last < tol)
			break;
		last = now;
	}
	return true;
}

Result<Gmm> Gmm::fit_from(const arma::mat &X, const arma::mat &means, const arma::cube &covs,
			  const arma::rowvec &weights, Covariance cov, unsigned em_iter, double var_floor, double tol)
{
	if (X.n_cols == 0 || !X.is_finite())
		return make_error(ErrorKind::BadInput, "training data is empty or not finite");
	if (X.n_rows != means.n_rows)
		return make_error(ErrorKind::BadInput,
				  "training data has " + std::to_string(X.n_rows) + " dims, the initial means " +
					  std::to_string(means.n_rows));
	// Armadillo floors each variance at var_floor after every M step
	// (scikit-learn adds reg_covar instead); keep_existing with no k-means
	// iterations starts EM from exactly these parameters.
	if (cov == Covariance::Full) {
		arma::gmm_full model;
		model.set_params(means, covs, weights);
		if (!run_em(model, X, em_iter, var_floor, tol))
			return make_error(ErrorKind::Other, "EM did not converge to finite parameters");
		return from_params(model.means, model.fcovs, model.hefts, cov);
	}
	arma::gmm_diag model;
	arma::mat dcovs(means.n_rows, means.n_cols);
	for (arma::uword c = 0; c < means.n_cols; c++)
		dcovs.col(c) = covs.slice(c).diag();
	model.set_params(means, dcovs, weights);
	if (!run_em(model, X, em_iter, var_floor, tol))
		return make_error(ErrorKind::Other, "EM did not converge to finite parameters");
	arma::cube full(means.n_rows, means.n_rows, means.n_cols, arma::fill::zeros);
	for (arma::uword c = 0; c < means.n_cols; c++)
		full.slice(c).diag() = model.dcovs.col(c);
	return from_params(model.means, full, model.hefts, cov);
}

Result<Gmm> Gmm::fit(const arma::mat &X, unsigned components, const GmmOptions &opt)
{
	if (components == 0)
		return make_error(ErrorKind::BadInput, "a mixture needs at least one component");
	if (X.n_cols < 2 * static_cast<arma::uword>(components))
		return make_error(ErrorKind::BadInput,
				  std::to_string(X.n_cols) + " events are too few for " + std::to_string(components) +
					  " components");
	std::mt19937_64 rng(opt.seed * 1000003u + components);
	std::optional<Gmm> best;
	double best_ll = -std::numeric_limits<double>::infinity();
	Error last_error; // set: best stays empty only where every restart failed
	for (unsigned r = 0; r < std::max(1u, opt.restarts); r++) {
		arma::mat C = kmeans_pp(X, components, opt.kmeans_iter, rng);
		arma::cube covs;
		arma::rowvec w;
		initial_params(X, C, opt.var_floor, covs, w);
		auto g = fit_from(X, C, covs, w, opt.covariance, opt.em_iter, opt.var_floor, opt.tol);
		if (!g) {
			last_error = g.error();
			continue;
		}
		double ll = g->total_log_likelihood(X);
		if (!best || ll > best_ll) {
			best_ll = ll;
			best = std::move(*g);
		}
	}
	if (!best)
		return last_error;
	return std::move(*best);
}

double Gmm::log_component(const double *x, unsigned k) const
{
	const arma::uword d = means_.n_rows;
	const double *mu = means_.colptr(k);
	const arma::mat &U = chol_inv_.slice(k);
	double m2 = 0;
	// y = L^-1 (x - mu), L^-1 lower triangular; |y|^2 is the Mahalanobis distance.
	for (arma::uword i = 0; i < d; i++) {
		double y = 0;
		for (arma::uword j = 0; j <= i; j++)
			y += U.at(i, j) * (x[j] - mu[j]);
		m2 += y * y;
	}
	return log_norm_(k) - 0.5 * m2;
}

Gmm::Winner Gmm::most_likely(const double *x) const
{
	Winner w;
	double best = -std::numeric_limits<double>::infinity();
	w.log_mixture = -std::numeric_limits<double>::infinity();
	for (unsigned k = 0; k < components(); k++) {
		double lc = log_component(x, k);
		double joint = lc + log_weights_(k);
		w.log_mixture = log_add_exp(w.log_mixture, joint);
		if (joint > best) {
			best = joint;
			w.component = k;
			w.log_density = lc;
		}
	}
	return w;
}

double Gmm::log_likelihood(const double *x) const { return most_likely(x).log_mixture; }

double Gmm::total_log_likelihood(const arma::mat &X) const
{
	double s = 0;
	for (arma::uword i = 0; i < X.n_cols; i++)
		s += log_likelihood(X.colptr(i));
	return s;
}

unsigned Gmm::n_parameters() const
{
	unsigned d = dims(), k = components();
	unsigned cov = cov_ == Covariance::Full ? k * d * (d + 1) / 2 : k * d;
	return k * d + cov + k - 1;
}

double Gmm::bic(const arma::mat &X) const
{
	return -2 * total_log_likelihood(X) + n_parameters() * std::log(static_cast<double>(X.n_cols));
}

arma::mat Gmm::precision(unsigned k) const
{
	const arma::mat &U = chol_inv_.slice(k);
	return U.t() * U; // cov^-1 = L^-T L^-1
}

Result<Selection> select_by_bic(const arma::mat &X, const GmmOptions &opt)
{
	if (opt.min_components == 0 || opt.min_components > opt.max_components)
		return make_error(ErrorKind::BadInput,
				  "component range " + std::to_string(opt.min_components) + "-" +
					  std::to_string(opt.max_components) +
					  " is empty; give MIN-MAX with 1 <= MIN <= MAX");
	std::vector<Candidate> cands;
	std::optional<Gmm> best;
	double best_bic = std::numeric_limits<double>::infinity();
	std::optional<Error> first_error;
	for (unsigned k = opt.min_components; k <= opt.max_components; k++) {
		Candidate c{.components = k};
		auto g = Gmm::fit(X, k, opt);
		if (!g) {
			c.rejected = g.error().message;
			if (!first_error)
				first_error = g.error();
			cands.push_back(c);
			continue;
		}
		c.log_likelihood = g->total_log_likelihood(X);
		c.bic = -2 * c.log_likelihood + g->n_parameters() * std::log(static_cast<double>(X.n_cols));
		double wmin = g->weights().min();
		if (k > opt.min_components && wmin < opt.min_weight) {
			char buf[96];
			std::snprintf(buf, sizeof buf, "a component holds %.2f%% of the events (< min weight %.2f%%)",
				      100 * wmin, 100 * opt.min_weight);
			c.rejected = buf;
		} else if (c.bic < best_bic) {
			best_bic = c.bic;
			best = std::move(*g);
		}
		cands.push_back(c);
	}
	if (!best)
		return with_context(first_error.value_or(Error{}), "no mixture could be fitted: ");
	return Selection{std::move(*best), std::move(cands)};
}

} // namespace eacgm::detect
