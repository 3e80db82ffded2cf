// SPDX-License-Identifier: Apache-2.0
#include "probe/prog_stats.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace eacgm {

UniqueFd enable_prog_stats()
{
	int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	return UniqueFd(fd >= 0 ? fd : -1);
}

// The prog_id of every BPF program descriptor in /proc/self/fd.
static std::set<uint32_t> own_prog_ids()
{
	std::set<uint32_t> ids;
	DIR *d = opendir("/proc/self/fdinfo");
	if (!d)
		return ids;
	while (dirent *e = readdir(d)) {
		std::ifstream in(std::string("/proc/self/fdinfo/") + e->d_name);
		for (std::string line; std::getline(in, line);)
			if (line.rfind("prog_id:", 0) == 0)
				ids.insert(static_cast<uint32_t>(std::stoul(line.substr(8))));
	}
	closedir(d);
	return ids;
}

std::vector<ProgStats> own_prog_stats()
{
	std::map<std::string, ProgStats> by_name;
	for (uint32_t id : own_prog_ids()) {
		UniqueFd fd(bpf_prog_get_fd_by_id(id));
		if (!fd)
			continue;
		bpf_prog_info info{};
		uint32_t len = sizeof(info);
		if (bpf_obj_get_info_by_fd(fd.get(), &info, &len))
			continue;
		ProgStats &s = by_name[info.name];
		s.name = info.name;
		s.runs += info.run_cnt;
		s.run_ns += info.run_time_ns;
	}
	std::vector<ProgStats> out;
	for (auto &[name, s] : by_name)
		out.push_back(s);
	return out;
}

} // namespace eacgm
