// SPDX-License-Identifier: Apache-2.0
#include "pipeline/identity.h"

#include <charconv>
#include <map>

namespace eacgm {

namespace {

int number_or_none(const std::string &v)
{
	int n = -1;
	auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
	return ec == std::errc() && end == v.data() + v.size() && n >= 0 ? n : -1;
}

} // namespace

JobIdentity job_identity_of(std::string_view environ)
{
	static const char *kNames[] = {"EACGM_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT",
				       "RANK",      "LOCAL_RANK",          "WORLD_SIZE"};
	std::map<std::string_view, std::string> env;
	while (!environ.empty()) {
		std::string_view entry = environ.substr(0, environ.find('\0'));
		environ.remove_prefix(std::min(environ.size(), entry.size() + 1));
		auto eq = entry.find('=');
		if (eq == std::string_view::npos)
			continue;
		for (const char *name : kNames)
			if (entry.substr(0, eq) == name)
				env[name] = std::string(entry.substr(eq + 1));
	}
	auto get = [&](const char *name) {
		auto it = env.find(name);
		return it == env.end() ? std::string() : it->second;
	};
	JobIdentity id;
	if (auto v = get("EACGM_JOB"); !v.empty())
		id.job = v;
	else if (auto v = get("TORCHELASTIC_RUN_ID"); !v.empty() && v != "none")
		id.job = v;
	else if (auto v = get("SLURM_JOB_ID"); !v.empty())
		id.job = "slurm-" + v;
	else if (auto a = get("MASTER_ADDR"), p = get("MASTER_PORT"); !a.empty() && !p.empty())
		id.job = a + ":" + p;
	id.rank = number_or_none(get("RANK"));
	id.local_rank = number_or_none(get("LOCAL_RANK"));
	id.world_size = number_or_none(get("WORLD_SIZE"));
	return id;
}

} // namespace eacgm
