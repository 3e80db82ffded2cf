// SPDX-License-Identifier: Apache-2.0
// Small string helpers shared across the tool.
#pragma once
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace eacgm {

inline std::string join(const std::vector<std::string> &v, const char *sep = ",")
{
	std::string s;
	for (auto &x : v)
		s += (s.empty() ? "" : sep) + x;
	return s;
}

// "0x7f00dead": an address or pointer, as args, symbols and errors write it
// (the store keeps a pointer argument as its value only where its text is
// exactly this: store/span_layout.h).
inline std::string hex(uint64_t v)
{
	char buf[24];
	std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
	return buf;
}

// "1 probe", "3 probes".
inline std::string plural(size_t n, const std::string &one, const std::string &many)
{
	return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Scanning the text of /proc files in place (read ten times a second by the
// host layer, every 2 s by the overhead budget): no stream, no copy.
// The next line of text (without its newline), advancing past it.
inline std::string_view next_line(std::string_view &text)
{
	size_t nl = text.find('\n');
	std::string_view line = text.substr(0, nl);
	text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
	return line;
}

// The next space-separated word of a line, advancing past it; empty at its end.
inline std::string_view next_word(std::string_view &line)
{
	size_t start = line.find_first_not_of(' ');
	if (start == std::string_view::npos) {
		line = {};
		return {};
	}
	line.remove_prefix(start);
	size_t end = std::min(line.find(' '), line.size());
	std::string_view word = line.substr(0, end);
	line.remove_prefix(end);
	return word;
}

// Whether the whole of s is a number (from_chars), stored in out.
template <typename T>
bool parse_number(std::string_view s, T &out)
{
	auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
	return ec == std::errc() && end == s.data() + s.size();
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
