// Small string helpers shared across the tool.
#pragma once
#include <string>
#include <vector>

namespace eacgm {

inline std::string join(const std::vector<std::string> &v, const char *sep = ",")
{
	std::string s;
	for (auto &x : v)
		s += (s.empty() ? "" : sep) + x;
	return s;
}

// "1 probe", "3 probes".
inline std::string plural(size_t n, const std::string &one, const std::string &many)
{
	return std::to_string(n) + " " + (n == 1 ? one : many);
}

} // namespace eacgm
