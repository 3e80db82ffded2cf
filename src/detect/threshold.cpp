// SPDX-License-Identifier: Apache-2.0
#include "detect/threshold.h"

#include <algorithm>
#include <cmath>

namespace eacgm::detect {

Threshold calibrate(std::vector<double> scores, double fpr)
{
	Threshold t{.target_fpr = fpr, .n = scores.size()};
	if (scores.empty())
		return t;
	std::sort(scores.begin(), scores.end());
	const double n = static_cast<double>(scores.size());
	if (scores.size() < 2) {
		t.value = scores[0] - 1;
		t.extrapolated = true;
		return t;
	}
	if (fpr * n >= kMinTail) {
		// floor(fpr * n) training scores lie strictly below scores[i].
		size_t i = static_cast<size_t>(std::floor(fpr * n));
		t.value = scores[std::min(i, scores.size() - 1)];
		return t;
	}
	size_t tail = std::max<size_t>(2, static_cast<size_t>(std::ceil(0.1 * n)));
	tail = std::min(tail, scores.size() - 1);
	double u = scores[tail];
	double p_u = static_cast<double>(tail) / n;
	double excess = 0;
	for (size_t i = 0; i < tail; i++)
		excess += u - scores[i];
	double beta = excess / static_cast<double>(tail);
	t.value = u - beta * std::log(p_u / fpr);
	t.extrapolated = true;
	return t;
}

} // namespace eacgm::detect
