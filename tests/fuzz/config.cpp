// SPDX-License-Identifier: Apache-2.0
// eacgm serve's configuration file (app/config.h): TOML.
#include <cstdint>
#include <string>

#include "app/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	(void)eacgm::parse_serve_config(std::string(reinterpret_cast<const char *>(data), size), "fuzz.toml");
	return 0;
}
