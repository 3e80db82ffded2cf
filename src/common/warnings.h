// SPDX-License-Identifier: Apache-2.0
// Messages said to the user once each, however often what they say
// happens, kept until taken (the pipeline's warnings: a process's Python
// without a frame layout, a library that cannot be probed).
#pragma once
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace eacgm {

class OnceWarnings {
public:
	void add(const std::string &message)
	{
		if (seen_.insert(message).second)
			pending_.push_back(message);
	}
	std::vector<std::string> take() { return std::exchange(pending_, {}); }

private:
	std::set<std::string> seen_;
	std::vector<std::string> pending_;
};

} // namespace eacgm
