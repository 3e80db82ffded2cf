// SPDX-License-Identifier: Apache-2.0
#include "probe/self_probe.h"

#include <climits>
#include <unistd.h>

#include "probe/elf_symbols.h"

namespace eacgm {

Result<SelfProbe> probe_own_function(const char *symbol)
{
	SelfProbe p;
	auto tracker = ProcTracker::open(false);
	if (!tracker)
		return tracker.error();
	p.tracker = std::move(tracker.value());
	auto engine = SpanEngine::open({}, p.tracker->traced_map_fd());
	if (!engine)
		return engine.error();
	p.engine = std::move(engine.value());
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return make_error(ErrorKind::Other, "cannot read /proc/self/exe");
	self[n] = 0;
	auto exe = ElfFile::open(self);
	if (!exe)
		return exe.error();
	const ElfSymbol *sym = exe->find(symbol);
	if (!sym)
		return make_error(ErrorKind::NotFound,
				  std::string("eacgm's own function ") + symbol + " is missing (stripped binary?)");
	auto off = exe->vaddr_to_offset(sym->addr);
	if (!off)
		return off.error();
	if (auto r = p.engine->set_spec(0, eacgm_probe_spec{}); !r)
		return r.error();
	if (auto r = p.engine->attach(self, {{off.value(), 0}}); !r)
		return r.error();
	if (auto r = p.tracker->track(getpid()); !r)
		return r.error();
	return p;
}

} // namespace eacgm
