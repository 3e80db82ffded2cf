// SPDX-License-Identifier: Apache-2.0
#include "pipeline/cgroup.h"

#include <cctype>
#include <fstream>

namespace eacgm {

namespace {

bool hex_run(const std::string &s, size_t at, size_t n)
{
	if (at + n > s.size())
		return false;
	for (size_t i = at; i < at + n; i++)
		if (!std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(static_cast<unsigned char>(s[i])))
			return false;
	return true;
}

// The last run of exactly 64 lower-case hex digits that stands alone in a
// path component (between '/', '-', '.' or the ends).
std::string container_id(const std::string &p)
{
	auto boundary = [&](size_t i) { return i >= p.size() || p[i] == '/' || p[i] == '-' || p[i] == '.'; };
	for (size_t i = p.size(); i-- > 0;) {
		if (i + 64 > p.size() || !(i == 0 || boundary(i - 1)) || !boundary(i + 64))
			continue;
		if (hex_run(p, i, 64))
			return p.substr(i, 64);
	}
	return "";
}

// "pod" followed by a uid of 36 characters (8-4-4-4-12, '-' or '_').
std::string pod_uid(const std::string &p)
{
	for (size_t at = p.find("pod"); at != std::string::npos; at = p.find("pod", at + 3)) {
		std::string uid = p.substr(at + 3, 36);
		if (uid.size() != 36)
			continue;
		bool ok = true;
		for (size_t i = 0; i < 36 && ok; i++) {
			bool dash = i == 8 || i == 13 || i == 18 || i == 23;
			ok = dash ? (uid[i] == '-' || uid[i] == '_') : hex_run(uid, i, 1);
		}
		if (!ok)
			continue;
		for (char &c : uid)
			if (c == '_')
				c = '-';
		return uid;
	}
	return "";
}

} // namespace

CgroupInfo parse_cgroup_path(const std::string &path) { return {path, container_id(path), pod_uid(path)}; }

CgroupInfo cgroup_of(uint32_t pid)
{
	std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind("0::", 0) == 0)
			return parse_cgroup_path(line.substr(3));
	return {};
}

} // namespace eacgm
