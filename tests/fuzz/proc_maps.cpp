// SPDX-License-Identifier: Apache-2.0
// /proc/PID/maps (probe/proc_maps.h): the path column is whatever a traced
// process named its files (spaces, newlines' neighbours, " (deleted)").
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "probe/proc_maps.h"

using namespace eacgm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const fuzz::Scratch proc; // a proc root with one process, 1
	static const bool made = ::mkdir((proc.dir() + "/1").c_str(), 0700) == 0;
	if (!made)
		std::abort();
	proc.write("1/maps", data, size);
	auto maps = read_maps(1, proc.dir());
	if (!maps)
		std::abort(); // the file is there: only its lines can be wrong
	for (const Mapping &m : *maps) {
		(void)m.exec();
		(void)mapping_for(*maps, m.start);
		(void)mapping_for(*maps, m.end - 1);
	}
	int n = 0;
	for (const std::string &f : mapped_files(*maps))
		if (n++ < 4) // each is two stat calls
			(void)host_path(1, f, proc.dir());
	return 0;
}
