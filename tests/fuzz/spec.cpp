// SPDX-License-Identifier: Apache-2.0
// Probe specs (probe/spec.h): the JSON of `eacgm record --spec FILE`, and
// what a spec's probes are then compiled and matched with.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "probe/spec.h"

using namespace eacgm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	// user = true: a --spec file, the one a user writes (a built-in spec
	// differs only in needing its "layer").
	auto set = parse_spec(std::string(reinterpret_cast<const char *>(data), size), "fuzz.json", true);
	if (!set)
		return 0;
	for (const ProbeSpec &p : set->probes) {
		// parse_spec compiled each probe already: it must compile again.
		if (!compile_probe(p))
			std::abort();
		(void)library_matches(p, "/usr/lib/x86_64-linux-gnu/libcudart.so.12");
		if (p.match.empty())
			continue;
		const std::string prefix = anchored_literal_prefix(p.match);
		// What the prefix promises: the pattern is "^" then these characters.
		if (!prefix.empty() && p.match.compare(1, prefix.size(), prefix) != 0)
			std::abort();
		// A short subject: the pattern is the user's, and std::regex
		// backtracks exponentially on some; that is not what this looks for.
		(void)expand_match(p, "raw", prefix.substr(0, 16) + "(int)");
	}
	(void)distinct_libraries(set->probes);
	SpecSet copy = *set;
	set->merge(std::move(copy));
	return 0;
}
