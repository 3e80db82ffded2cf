// Small string helpers shared across the tool.
#pragma once
#include <string>
#include <string_view>
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

// Length of the well-formed UTF-8 sequence at s[i] (1 to 4), 0 if the bytes
// there are not one (a stray continuation byte, an overlong form, a
// surrogate, past U+10FFFF, or cut short).
size_t utf8_sequence(std::string_view s, size_t i);

// Whether s is well-formed UTF-8 throughout.
bool is_utf8(std::string_view s);

// s with each byte that starts no well-formed sequence replaced by U+FFFD:
// what a traced process names (its comm, command line, paths) may be any
// bytes, and every reader of the store's TEXT and of JSON expects UTF-8.
std::string to_utf8(std::string_view s);

} // namespace eacgm
