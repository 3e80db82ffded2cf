// SPDX-License-Identifier: Apache-2.0
#include "common/text.h"

namespace eacgm {

size_t utf8_sequence(std::string_view s, size_t i)
{
	auto at = [&](size_t k) -> unsigned { return k < s.size() ? (unsigned char)s[k] : 0x100; };
	auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return at(k) >= lo && at(k) <= hi; };
	unsigned b = at(i);
	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF)
		return cont(i + 1) ? 2 : 0;
	// The second byte's range rules out overlong forms (E0, F0), UTF-16
	// surrogates (ED) and code points past U+10FFFF (F4).
	if (b >= 0xE0 && b <= 0xEF) {
		unsigned lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
		return cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
	}
	if (b >= 0xF0 && b <= 0xF4) {
		unsigned lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
		return cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
	}
	return 0;
}

bool is_utf8(std::string_view s)
{
	for (size_t i = 0; i < s.size();) {
		size_t n = utf8_sequence(s, i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

std::string to_utf8(std::string_view s)
{
	std::string out;
	out.reserve(s.size());
	for (size_t i = 0; i < s.size();) {
		size_t n = utf8_sequence(s, i);
		if (n) {
			out.append(s.substr(i, n));
			i += n;
		} else {
			out += "\xEF\xBF\xBD"; // U+FFFD
			i++;
		}
	}
	return out;
}

} // namespace eacgm
