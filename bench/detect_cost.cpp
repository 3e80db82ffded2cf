// SPDX-License-Identifier: Apache-2.0
// The detector's cost, in one run: EM fit time and scoring throughput of
// eacgm's Gmm (Armadillo's EM, src/detect/gmm.cpp) against scikit-learn's
// GaussianMixture on the same data from the same initial parameters for the
// same number of iterations (bench/detect_cost.py), as ratios; then events
// scored per second by the OnlineDetector with background refits.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "detect/gmm.h"
#include "detect/online.h"

using namespace eacgm;
using namespace eacgm::detect;
using Clock = std::chrono::steady_clock;

static double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int main(int argc, char **argv)
{
	const std::string py = argc > 1 ? argv[1] : BENCH_DIR "/detect_cost.py";
	const unsigned d = 4, k = 3, em_iter = 300;
	const size_t n = 20000, n_eval = 200000;
	std::mt19937_64 rng(1);
	std::normal_distribution<double> N(0, 1);
	arma::mat X(d, n), E(d, n_eval);
	for (arma::mat *M : {&X, &E})
		for (size_t i = 0; i < M->n_cols; i++) {
			double shift = 4.0 * static_cast<double>(i % k);
			for (unsigned j = 0; j < d; j++)
				(*M)(j, i) = N(rng) * (1 + 0.3 * j) + shift * (j % 2 ? 1 : -1);
		}
	arma::mat means(d, k);
	arma::cube covs(d, d, k);
	for (unsigned c = 0; c < k; c++) {
		means.col(c) = X.col(c) + 0.5;
		covs.slice(c) = arma::eye(d, d) * 2;
	}
	arma::rowvec w(k, arma::fill::value(1.0 / k));

	double fit_s = 1e9, score_s = 1e9, avg_ll = 0;
	for (int rep = 0; rep < 3; rep++) {
		auto t0 = Clock::now();
		auto g = Gmm::fit_from(X, means, covs, w, Covariance::Full, em_iter, 1e-10);
		auto t1 = Clock::now();
		if (!g) {
			std::fprintf(stderr, "bench_detect_cost: %s\n", g.error().message.c_str());
			return 1;
		}
		double sum = 0;
		for (size_t i = 0; i < E.n_cols; i++)
			sum += g->log_likelihood(E.colptr(i));
		auto t2 = Clock::now();
		fit_s = std::min(fit_s, secs(t0, t1));
		score_s = std::min(score_s, secs(t1, t2));
		avg_ll = g->total_log_likelihood(X) / static_cast<double>(n);
		if (sum == 0)
			std::puts(""); // keeps the loop from being optimised away
	}

	// The same data and initial parameters for scikit-learn.
	nlohmann::json in = {{"em_iter", em_iter}};
	auto rows = [](const arma::mat &M) {
		nlohmann::json r = nlohmann::json::array();
		for (size_t i = 0; i < M.n_cols; i++)
			r.push_back(std::vector<double>(M.colptr(i), M.colptr(i) + M.n_rows));
		return r;
	};
	in["X"] = rows(X);
	in["eval"] = rows(E);
	in["means"] = rows(means);
	for (unsigned c = 0; c < k; c++)
		in["covs"].push_back(rows(covs.slice(c)));
	in["weights"] = std::vector<double>(w.begin(), w.end());
	char tmpl[] = "/tmp/eacgm_bench_detect_XXXXXX";
	int fd = mkstemp(tmpl);
	if (fd < 0)
		return 1;
	close(fd);
	std::ofstream(tmpl) << in.dump();
	std::string cmd = "/usr/bin/python3 " + py + " " + tmpl;
	FILE *p = popen(cmd.c_str(), "r");
	std::string out;
	char buf[4096];
	while (p && fgets(buf, sizeof buf, p))
		out += buf;
	int rc = p ? pclose(p) : -1;
	std::remove(tmpl);

	std::printf("GMM, %u dims, %u components, full covariance, EM from the same start to convergence (at most %u "
		    "iterations):\n",
		    d, k, em_iter);
	std::printf("  fit on %zu events:   eacgm (Armadillo) %.3f s\n", n, fit_s);
	std::printf("  score %zu events: eacgm %.3f s (%.2f M events/s)\n", n_eval, score_s, n_eval / score_s / 1e6);
	if (rc == 0) {
		auto sk = nlohmann::json::parse(out);
		double sk_fit = sk["fit_s"], sk_score = sk["score_s"], sk_ll = sk["avg_log_likelihood"];
		std::printf("  scikit-learn: fit %.3f s (%d iterations), score %.3f s (%.2f M events/s)\n", sk_fit,
			    sk["n_iter"].get<int>(), sk_score, n_eval / sk_score / 1e6);
		std::printf("  ratio eacgm / scikit-learn: fit time %.2fx, scoring time %.2fx (one event at a time "
			    "in eacgm, vectorised numpy in scikit-learn)\n",
			    fit_s / sk_fit, score_s / sk_score);
		std::printf("  mean log-likelihood: eacgm %.8f, scikit-learn %.8f\n", avg_ll, sk_ll);
	} else {
		std::printf("  scikit-learn: not measured (%s failed; install python3-sklearn)\n", cmd.c_str());
	}

	// Online: spans of 4 keys through OnlineDetector, refits in the background.
	DetectOptions opt;
	opt.cold_start = 200;
	opt.refit_every = 2000;
	OnlineDetector det(opt);
	std::normal_distribution<double> noise(0, 0.2);
	const size_t events = 200000;
	uint64_t t = 1'000'000'000;
	std::vector<Span> spans;
	spans.reserve(events);
	for (size_t i = 0; i < events; i++) {
		Span s{.start_ns = t,
		       .dur_ns = static_cast<uint64_t>(20e3 * std::exp(noise(rng))),
		       .pid = 1,
		       .tid = static_cast<uint32_t>(1 + i % 4),
		       .layer = "torch",
		       .name = "aten::op" + std::to_string(i % 4)};
		s.py_stack = {"f (x.py:1)"};
		t += s.dur_ns + 5000;
		spans.push_back(std::move(s));
	}
	// Warm-up: the cold starts, and their first models in.
	const size_t warm = 20000;
	for (size_t i = 0; i < warm; i++)
		(void)det.observe(spans[i]);
	det.flush();
	size_t flagged = 0, scored0 = 0;
	for (const auto &k : det.status())
		scored0 += k.scored;
	auto t0 = Clock::now();
	for (size_t i = warm; i < events; i++)
		flagged += det.observe(spans[i]).has_value();
	auto t1 = Clock::now();
	det.flush();
	size_t refits = 0, scored = 0;
	for (const auto &k : det.status()) {
		refits += k.refits;
		scored += k.scored;
	}
	scored -= scored0;
	std::printf("online: %zu spans of 4 functions observed in %.3f s, %zu of them scored: %.0f events/s "
		    "(%zu refits in the background, %zu flagged: %.2f%%, target 1%%)\n",
		    events - warm, secs(t0, t1), scored, (events - warm) / secs(t0, t1), refits, flagged,
		    100.0 * flagged / std::max<size_t>(scored, 1));
	return 0;
}
