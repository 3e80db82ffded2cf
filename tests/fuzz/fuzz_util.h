// SPDX-License-Identifier: Apache-2.0
// What the fuzzers share: the readers under test take a path, not bytes.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace eacgm::fuzz {

// A private directory for one fuzzer process (libFuzzer's -jobs and -fork
// run several at once), removed when the process exits normally; a crash
// leaves it behind, with the input that crashed in it.
class Scratch {
public:
	Scratch()
	{
		const char *tmp = std::getenv("TMPDIR");
		std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/eacgm_fuzz_XXXXXX";
		if (!mkdtemp(tmpl.data()))
			std::abort();
		dir_ = tmpl;
	}
	~Scratch()
	{
		std::error_code ec;
		std::filesystem::remove_all(dir_, ec);
	}
	Scratch(const Scratch &) = delete;
	Scratch &operator=(const Scratch &) = delete;

	const std::string &dir() const { return dir_; }

	// Replaces `name` in the directory with the bytes given; returns its path.
	std::string write(const std::string &name, const uint8_t *data, size_t size) const
	{
		const std::string path = dir_ + "/" + name;
		const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0)
			std::abort();
		for (size_t done = 0; done < size;) {
			const ssize_t n = ::write(fd, data + done, size - done);
			if (n <= 0)
				std::abort();
			done += size_t(n);
		}
		::close(fd);
		return path;
	}

private:
	std::string dir_;
};

// Reads typed values off the front of an input (zeros once it runs out): the
// structure-aware fuzzers build what they write from these.
class Bytes {
public:
	Bytes(const uint8_t *data, size_t size) : data_(data), size_(size) {}
	bool empty() const { return size_ == 0; }
	uint8_t u8()
	{
		if (!size_)
			return 0;
		--size_;
		return *data_++;
	}
	uint64_t u64()
	{
		uint64_t v = 0;
		for (int i = 0; i < 8; ++i)
			v = v << 8 | u8();
		return v;
	}
	// A string of up to `max` bytes: its length first (one byte).
	std::string str(size_t max = 255)
	{
		size_t n = std::min<size_t>({size_t(u8()), max, size_});
		std::string s(reinterpret_cast<const char *>(data_), n);
		data_ += n, size_ -= n;
		return s;
	}

private:
	const uint8_t *data_;
	size_t size_;
};

} // namespace eacgm::fuzz
