// SPDX-License-Identifier: Apache-2.0
// Human units with three significant digits, for every text eacgm prints:
// the summary, detect's causes, warnings.
#pragma once
#include <cstdint>
#include <string>

namespace eacgm {

// "850 ns", "12.3 µs", "1.50 ms", "2.00 s".
std::string format_duration(double ns);
// "512 B", "1.50 KiB", "3.00 GiB".
std::string format_bytes(uint64_t bytes);

} // namespace eacgm
