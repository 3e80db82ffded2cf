// SPDX-License-Identifier: Apache-2.0
#include "app/privileges.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <sys/resource.h>
#include <linux/capability.h>
#include <memory>
#include <type_traits>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>

namespace eacgm {

std::vector<Capability> tracing_capabilities()
{
	return {{CAP_BPF, "CAP_BPF"},
		{CAP_PERFMON, "CAP_PERFMON"},
		{CAP_SYS_PTRACE, "CAP_SYS_PTRACE"},
		{CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"},
		{CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"},
		{CAP_KILL, "CAP_KILL"}};
}

namespace {

struct CapFree {
	void operator()(cap_t c) const { cap_free(c); }
};
using CapHandle = std::unique_ptr<std::remove_pointer_t<cap_t>, CapFree>;

bool kept(const std::vector<Capability> &keep, int cap)
{
	for (const Capability &c : keep)
		if (c.number == cap)
			return true;
	return false;
}

} // namespace

Result<std::vector<std::string>> drop_capabilities_except(const std::vector<Capability> &keep)
{
	CapHandle now(cap_get_proc());
	if (!now)
		return errno_error(errno, "cannot read eacgm's capabilities");
	// The bounding set first, while CAP_SETPCAP is still held: nothing
	// exec'd later (nothing is) could regain what goes.
	cap_flag_value_t setpcap = CAP_CLEAR;
	cap_get_flag(now.get(), CAP_SETPCAP, CAP_EFFECTIVE, &setpcap);
	// Up to the kernel's last capability, not the header's: PR_CAPBSET_READ
	// fails past it.
	for (int cap = 0; setpcap == CAP_SET && prctl(PR_CAPBSET_READ, cap) >= 0; cap++)
		if (!kept(keep, cap) && prctl(PR_CAPBSET_READ, cap) == 1 && prctl(PR_CAPBSET_DROP, cap) != 0)
			return errno_error(errno,
					   "cannot drop capability " + std::to_string(cap) + " from the bounding set");
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	CapHandle want(cap_init()); // every flag clear
	if (!want)
		return errno_error(errno, "cap_init");
	std::vector<std::string> names;
	for (const Capability &c : keep) {
		cap_flag_value_t held = CAP_CLEAR;
		cap_get_flag(now.get(), c.number, CAP_PERMITTED, &held);
		if (held != CAP_SET)
			continue;
		cap_value_t v = c.number;
		cap_set_flag(want.get(), CAP_PERMITTED, 1, &v, CAP_SET);
		cap_set_flag(want.get(), CAP_EFFECTIVE, 1, &v, CAP_SET);
		names.push_back(c.name);
	}
	if (cap_set_proc(want.get()) != 0)
		return errno_error(errno, "cannot drop eacgm's capabilities");
	return names;
}

Result<std::vector<std::string>> keep_tracing_privileges(std::vector<Capability> extra, bool bpf_stats)
{
	auto keep = tracing_capabilities();
	keep.insert(keep.end(), extra.begin(), extra.end());
	if (bpf_stats)
		keep.push_back({CAP_SYS_ADMIN, "CAP_SYS_ADMIN"});
	auto kept = drop_capabilities_except(keep);
	if (kept)
		umask(077);
	return kept;
}

Result<void> allow_niceness_back_to(int nice)
{
	struct rlimit now {};
	if (getrlimit(RLIMIT_NICE, &now) != 0)
		return errno_error(errno, "cannot read eacgm's RLIMIT_NICE");
	const rlim_t want = static_cast<rlim_t>(20 - nice);
	if (now.rlim_cur != RLIM_INFINITY && now.rlim_cur >= want)
		return {};
	struct rlimit r {
		want, std::max(want, now.rlim_max == RLIM_INFINITY ? want : now.rlim_max)
	};
	if (setrlimit(RLIMIT_NICE, &r) != 0)
		return errno_error(errno,
				   "cannot let eacgm's ring-draining thread keep niceness " + std::to_string(nice) +
					   " (RLIMIT_NICE)");
	return {};
}

Result<void> lower_priority(int nice, const std::vector<pid_t> &keep)
{
	if (nice < 0 || nice > 19)
		return make_error(ErrorKind::BadInput, "the niceness must be 0 to 19, not " + std::to_string(nice));
	DIR *dir = opendir("/proc/self/task");
	if (!dir)
		return errno_error(errno, "cannot list eacgm's threads (/proc/self/task)");
	int failed = 0; // the errno of the last thread that could not be lowered
	while (struct dirent *e = readdir(dir)) {
		if (e->d_name[0] == '.')
			continue;
		id_t tid = static_cast<id_t>(std::strtoul(e->d_name, nullptr, 10));
		if (std::find(keep.begin(), keep.end(), static_cast<pid_t>(tid)) != keep.end())
			continue;
		errno = 0;
		int now = getpriority(PRIO_PROCESS, tid); // -1 is a valid niceness: errno tells
		if (errno == ESRCH || (errno == 0 && now >= nice))
			continue; // gone, or already as low
		if (setpriority(PRIO_PROCESS, tid, nice) != 0 && errno != ESRCH)
			failed = errno;
	}
	closedir(dir);
	if (failed)
		return errno_error(failed, "cannot lower eacgm's priority to niceness " + std::to_string(nice));
	return {};
}

} // namespace eacgm
