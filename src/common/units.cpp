// SPDX-License-Identifier: Apache-2.0
#include "common/units.h"

#include <cstdio>
#include <iterator>

namespace eacgm {

namespace {

// Three significant digits without switching to exponents: 1.23, 12.3, 123.
std::string sig3(double v, const char *unit)
{
	int decimals = v < 9.995 ? 2 : v < 99.95 ? 1 : 0;
	char buf[64];
	std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, unit);
	return buf;
}

} // namespace

std::string format_duration(double ns)
{
	if (ns < 999.5) {
		char buf[32];
		std::snprintf(buf, sizeof buf, "%.0f ns", ns);
		return buf;
	}
	if (ns < 999.5e3)
		return sig3(ns / 1e3, "µs");
	if (ns < 999.5e6)
		return sig3(ns / 1e6, "ms");
	return sig3(ns / 1e9, "s");
}

std::string format_bytes(uint64_t bytes)
{
	if (bytes < 1024)
		return std::to_string(bytes) + " B";
	static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
	double v = static_cast<double>(bytes) / 1024;
	size_t u = 0;
	for (; v >= 1023.5 && u + 1 < std::size(units); u++)
		v /= 1024;
	return sig3(v, units[u]);
}

} // namespace eacgm
