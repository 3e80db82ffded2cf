#include "app/commands.h"

#include <iostream>

namespace eacgm {

int fail(const std::string &message, int code)
{
	std::cerr << "eacgm: " << message << "\n";
	return code;
}

} // namespace eacgm
