// SPDX-License-Identifier: Apache-2.0
// The alarm threshold (the paper's delta), calibrated from the training
// scores for a target false-alarm rate instead of a fixed density.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace eacgm::detect {

struct Threshold {
	double value = 0;          // flag a score strictly below it
	double target_fpr = 0;     // what was asked
	size_t n = 0;              // training scores it came from
	bool extrapolated = false; // the target lies beyond the data: exponential tail (see calibrate)
};

// Lower `fpr` quantile of the training scores (log densities: low = rare).
// Where fpr * n >= kMinTail (10) the empirical quantile is used as it is.
// Below that the data cannot resolve the quantile (with n = 1000 and
// fpr = 1e-4 it would sit below the lowest score), so the tail is
// extrapolated: peaks over threshold with an exponential excess, fitted to
// the lowest 10% of scores (for a Gaussian component the log density is
// c - chi2/2, whose tail is Gamma, i.e. exponential at first order):
//   delta = u - beta * ln(p_u / fpr), u = the p_u quantile, beta = mean excess below u.
// Needs at least one score; returns the lowest score minus one for n < 2.
Threshold calibrate(std::vector<double> scores, double fpr);

inline constexpr double kMinTail = 10;

} // namespace eacgm::detect
