// SPDX-License-Identifier: Apache-2.0
// The fuzzers without libFuzzer: runs LLVMFuzzerTestOneInput over every file
// of the directories (or the files) given, so that the normal build's ctest
// replays each corpus, and the crashes kept in it, on every `make test`.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

// The input being run, named when it crashes (the handler can only write(2)).
static char current[4096];

static void on_crash(int sig)
{
	static const char what[] = "fuzz replay: crashed on input ";
	(void)!write(STDERR_FILENO, what, sizeof what - 1);
	(void)!write(STDERR_FILENO, current, std::strlen(current));
	(void)!write(STDERR_FILENO, "\n", 1);
	std::signal(sig, SIG_DFL);
	std::raise(sig);
}

static void run(const fs::path &file)
{
	std::snprintf(current, sizeof current, "%s", file.c_str());
	std::ifstream in(file, std::ios::binary);
	std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	// A fresh buffer of the exact size, as libFuzzer gives, so that a read past
	// the end lands outside it.
	std::vector<uint8_t> input(bytes.begin(), bytes.end());
	LLVMFuzzerTestOneInput(input.empty() ? nullptr : input.data(), input.size());
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		std::fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
		return 2;
	}
	for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL})
		std::signal(sig, on_crash);
	int status = 0;
	for (int i = 1; i < argc; ++i) {
		const fs::path arg = argv[i];
		std::error_code ec;
		if (fs::is_regular_file(arg, ec)) {
			run(arg);
			std::printf("%s: 1 input\n", arg.c_str());
			continue;
		}
		if (!fs::is_directory(arg, ec)) {
			// A corpus that went missing must fail the test, not pass it empty.
			std::fprintf(stderr, "%s: no such corpus directory\n", arg.c_str());
			status = 1;
			continue;
		}
		std::vector<fs::path> files;
		for (const auto &e : fs::recursive_directory_iterator(arg))
			if (e.is_regular_file())
				files.push_back(e.path());
		std::sort(files.begin(), files.end());
		for (const fs::path &f : files)
			run(f);
		std::printf("%s: %zu inputs\n", arg.c_str(), files.size());
		if (files.empty()) {
			std::fprintf(stderr, "%s: empty corpus directory\n", arg.c_str());
			status = 1;
		}
	}
	return status;
}
