// SPDX-License-Identifier: Apache-2.0
// Symbols and address translation for one ELF file (executable or shared
// library): what a uprobe needs (name -> file offset) and what a symbolizer
// needs (address -> name). The file is mapped read-only and its symbols'
// names stay in that mapping (views, not copies), demangled only when asked:
// pip's libtorch_cpu has over a million symbols, and copying and demangling
// them all took 8 s of CPU and 640 MB. Copies of an ElfFile share the mapping.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm {

// Returns the demangled C++ name, or `name` itself when it is not mangled.
std::string demangle(std::string_view name);
// A type's name from its mangling as std::type_info::name() gives it
// ("N3c105ErrorE": a symbol's mangling without its _Z; a leading '*' marks a
// type local to its file); nullopt where it does not demangle.
std::optional<std::string> demangle_type(std::string_view mangled);

// Whether a symbol named `mangled` could demangle to a name that starts with
// `prefix`: false only when it certainly cannot (a C++ name outside the
// namespaces `prefix` begins with), so a pattern's literal prefix can skip
// demangling most of a big library. Conservative where unsure (std::, an
// unqualified prefix).
bool may_demangle_to(std::string_view mangled, std::string_view prefix);

struct ElfSymbol {
	std::string_view name; // raw, without any @VERSION / @@VERSION suffix; in the file's mapping
	uint64_t addr = 0;     // st_value: a virtual address in the file's layout
	uint64_t size = 0;
	bool weak = false;
	bool func = false; // STT_FUNC or STT_GNU_IFUNC
	// demangle(name), made on each call: callers keep what they need.
	std::string demangled() const { return demangle(name); }
};

class MappedFile;

class ElfFile {
public:
	// Reads symbols (.symtab and .dynsym), PT_LOAD headers and DT_SONAME.
	// With require_symbols, a file with no defined symbols (fully stripped) is an
	// error; without it, such a file loads with an empty symbol list.
	static Result<ElfFile> open(const std::string &path, bool require_symbols = false);

	// Defined symbols only (no imports, no SHN_ABS, no TLS, no section/file
	// symbols), deduplicated by (name, addr) across .symtab and .dynsym.
	const std::vector<ElfSymbol> &symbols() const { return symbols_; }

	// Exact raw name. When several definitions share it, prefers global over
	// weak over local, and the default version (@@) over hidden ones (@).
	const ElfSymbol *find(std::string_view name) const;
	// The function containing vaddr ([addr, addr+size), or addr == vaddr for
	// size 0); among aliases, global before weak before local.
	const ElfSymbol *symbol_at(uint64_t vaddr) const;
	// Every function symbol at exactly addr, best first (same order as above).
	std::vector<const ElfSymbol *> aliases(uint64_t addr) const;
	// The data object that starts at exactly vaddr (a std::type_info: an
	// exception's type), global before weak before local. Its index is
	// made on the first call.
	const ElfSymbol *object_at(uint64_t vaddr) const;

	// Through the PT_LOAD headers; fails for addresses outside the file's bytes.
	Result<uint64_t> vaddr_to_offset(uint64_t vaddr) const;
	Result<uint64_t> offset_to_vaddr(uint64_t off) const;

	std::string soname() const { return soname_; } // DT_SONAME, may be empty
	std::string path() const { return path_; }
	// e_machine of the ELF header: the processor the file's code is for.
	uint16_t machine() const { return machine_; }
	// Whether the file's code takes part in C++ exceptions: it names the
	// C++ personality routine or _Unwind_Resume (has cleanups or handlers
	// for them) or throws (__cxa_throw), defined or imported. An exception
	// may unwind through such a file's frames.
	bool cxx_exceptions() const { return cxx_exceptions_; }

private:
	struct Segment {
		uint64_t vaddr, offset, filesz;
	};
	struct Func { // sorted view for address lookups
		uint64_t addr;
		uint8_t rank;
		uint32_t idx;
	};
	ElfFile() = default;

	std::string path_, soname_;
	uint16_t machine_ = 0;
	bool cxx_exceptions_ = false;
	std::shared_ptr<const MappedFile> image_; // what the symbols' names point into
	std::vector<ElfSymbol> symbols_;
	std::vector<uint8_t> rank_;         // parallel to symbols_: lower is preferred
	std::vector<Func> funcs_;           // by (addr, rank)
	mutable std::vector<Func> objects_; // the same for data objects, made by object_at()
	std::vector<Segment> loads_;
};

} // namespace eacgm
