// SPDX-License-Identifier: Apache-2.0
// Fits a Gaussian mixture with eacgm's Gmm (Armadillo's EM) from given
// initial parameters, for tests/sklearn/check_gmm.py to compare with
// scikit-learn's GaussianMixture started from the same parameters.
//
// Usage: gmm_fit IN.json OUT.json
//   IN:  {"X": [[x0, x1, ...], ...] (n rows), "means": [[..]..] (k rows),
//         "covs": [[[..]..]..] (k d x d), "weights": [..], "covariance": "full"|"diag",
//         "em_iter": N, "var_floor": F, "eval": [[..]..] (rows to score, optional),
//         "params_only": bool (score "eval" under the given parameters, no fit)}
//   OUT: {"means", "covs", "weights", "avg_log_likelihood" (on X), "eval_log_likelihood": [...]}
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "detect/gmm.h"

using namespace eacgm::detect;
using nlohmann::json;

static arma::mat rows_to_cols(const json &rows)
{
	size_t n = rows.size(), d = rows.at(0).size();
	arma::mat X(d, n);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < d; j++)
			X(j, i) = rows[i][j].get<double>();
	return X;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::cerr << "usage: gmm_fit IN.json OUT.json\n";
		return 2;
	}
	json in = json::parse(std::ifstream(argv[1]));
	arma::mat X = rows_to_cols(in["X"]);
	arma::mat means = rows_to_cols(in["means"]);
	const size_t k = means.n_cols, d = means.n_rows;
	arma::cube covs(d, d, k);
	for (size_t c = 0; c < k; c++)
		covs.slice(c) = rows_to_cols(in["covs"][c]).t();
	arma::rowvec w(k);
	for (size_t c = 0; c < k; c++)
		w(c) = in["weights"][c].get<double>();
	Covariance cov = in.value("covariance", "full") == "diag" ? Covariance::Diag : Covariance::Full;
	auto g = in.value("params_only", false)
		? Gmm::from_params(means, covs, w, cov)
		: Gmm::fit_from(X, means, covs, w, cov, in.value("em_iter", 100u), in.value("var_floor", 1e-10));
	if (!g) {
		std::cerr << "gmm_fit: " << g.error().message << "\n";
		return 1;
	}
	json out;
	for (size_t c = 0; c < k; c++) {
		out["means"].push_back(std::vector<double>(g->means().colptr(c), g->means().colptr(c) + d));
		json m = json::array();
		for (size_t r = 0; r < d; r++) {
			json row = json::array();
			for (size_t q = 0; q < d; q++)
				row.push_back(g->covs().slice(c)(r, q));
			m.push_back(row);
		}
		out["covs"].push_back(m);
		out["weights"].push_back(g->weights()(c));
	}
	out["avg_log_likelihood"] = g->total_log_likelihood(X) / static_cast<double>(X.n_cols);
	if (in.contains("eval")) {
		arma::mat E = rows_to_cols(in["eval"]);
		for (size_t i = 0; i < E.n_cols; i++)
			out["eval_log_likelihood"].push_back(g->log_likelihood(E.colptr(i)));
	}
	std::ofstream(argv[2]) << out.dump();
	return 0;
}
