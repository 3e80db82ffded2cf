// Small file helpers shared by every writer: outputs appear whole or not at all.
#pragma once
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>
#include <cstdint>

#include "common/result.h"

namespace eacgm {

// Checks early that `path` can be created (its directory exists and is
// writable, and the path names nothing but a regular file), so a recording
// does not run for an hour and then fail to save.
Result<void> check_writable(const std::string &path);

// The whole of a small file (a /proc or /sys file, read every interval:
// plain open and read, without an ifstream's set-up, which cost more than
// the read); nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string &path);

// This machine's name (gethostname), "" when it has none.
std::string host_name();

// The threads of a process now (/proc/PID/task); empty when it is gone.
std::vector<uint32_t> list_threads(uint32_t pid);

// Writes `content` to path.tmp.<pid> (created owner-only, never through a
// symbolic link) and renames it over `path`.
Result<void> write_file_atomic(const std::string &path, const std::string &content);
// The same for content written as it is made (never held whole). An error
// from write (its source failed) leaves nothing at path and is returned.
Result<void> write_file_atomic(const std::string &path, const std::function<Result<void>(std::ostream &)> &write);

} // namespace eacgm
