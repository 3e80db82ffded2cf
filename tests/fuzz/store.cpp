// SPDX-License-Identifier: Apache-2.0
// Recordings (store/store.h) as files: `eacgm summary`, `export`, `detect`
// and `merge` read whatever file they are given. SQLite rejects most
// mutations of its pages; store_rows.cpp puts values into a valid file.
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_util.h"
#include "store/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const eacgm::fuzz::Scratch scratch;
	const std::string path = scratch.write("input.db", data, size);
	(void)eacgm::load_recording(path);
	// A header that says WAL makes SQLite create these; the next input must
	// not be read with them.
	for (const char *side : {"-wal", "-shm", "-journal"})
		std::remove((path + side).c_str());
	return 0;
}
