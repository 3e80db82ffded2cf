// SPDX-License-Identifier: Apache-2.0
// Small file helpers shared by every writer: outputs appear whole or not at all.
#pragma once
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>
#include <cstdint>

#include "common/fd.h"
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

// A file under /proc read every interval (the host layer's pressure and
// NIC counters): opened once and read again from its start each time (a
// read at offset 0 makes a /proc file's text anew), into a buffer kept
// between reads. Opening by path was half of what each read cost (the
// path walk), ten times a second per file.
class RereadFile {
public:
	explicit RereadFile(std::string path) : path_(std::move(path)) {}
	// The file's whole text now; nullptr when it cannot be opened or read
	// (it is opened again at the next read).
	const std::string *read();
	const std::string &path() const { return path_; }

private:
	std::string path_;
	UniqueFd fd_;
	std::string text_;
};

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
