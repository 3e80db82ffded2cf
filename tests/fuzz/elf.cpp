// SPDX-License-Identifier: Apache-2.0
// ELF symbols (probe/elf_symbols.h): every library a traced process maps is
// read, whoever built it, and its symbol names are looked up and demangled.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "probe/elf_symbols.h"

using namespace eacgm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const fuzz::Scratch scratch;
	const std::string path = scratch.write("input.so", data, size);
	auto f = ElfFile::open(path, false);
	if (!f)
		return 0;
	(void)f->soname();
	size_t n = 0;
	for (const ElfSymbol &s : f->symbols()) {
		if (n++ == 64) // find() is linear: bounds the run at a big table
			break;
		(void)f->find(s.name);
		(void)f->symbol_at(s.addr);
		(void)f->symbol_at(s.addr + s.size);
		(void)f->aliases(s.addr);
		if (auto off = f->vaddr_to_offset(s.addr))
			(void)f->offset_to_vaddr(*off);
		(void)s.demangled();
		(void)may_demangle_to(s.name, "at::_ops::");
		(void)may_demangle_to(s.name, "c10d::ProcessGroupGloo::allreduce");
	}
	(void)f->symbol_at(0);
	(void)f->symbol_at(~uint64_t(0));
	(void)f->offset_to_vaddr(0);
	return 0;
}
