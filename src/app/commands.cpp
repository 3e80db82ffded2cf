// SPDX-License-Identifier: Apache-2.0
#include "app/commands.h"

#include <iostream>

namespace eacgm {

namespace {
std::string g_last_failure;
}

int fail(const std::string &message, int code)
{
	std::cerr << "eacgm: " << message << "\n";
	g_last_failure = message;
	return code;
}

const std::string &last_failure() { return g_last_failure; }

} // namespace eacgm
