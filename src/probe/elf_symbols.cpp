// SPDX-License-Identifier: Apache-2.0
#include "probe/elf_symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "common/fd.h"
#include "common/threads.h"
#include "common/text.h"

namespace eacgm {
namespace {

constexpr GElf_Versym kVersymHidden = 0x8000; // binutils' VERSYM_HIDDEN: a non-default "@VER"

// Owns the Elf* while open() reads the image.
struct ElfHandle {
	Elf *elf = nullptr;
	~ElfHandle()
	{
		if (elf)
			elf_end(elf);
	}
};

} // namespace

// The whole file, mapped privately: libelf reads it in place, and the
// symbols' names are views into it for as long as an ElfFile holds it. A
// library replaced the usual way (a new file renamed over it) leaves this
// mapping on the old one; one truncated in place breaks the processes that
// map it, and a name read from it afterwards too.
class MappedFile {
public:
	static Result<std::shared_ptr<MappedFile>> open(const std::string &path)
	{
		UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
		struct stat st;
		if (!fd || fstat(fd.get(), &st) != 0) {
			const int err = errno;
			return make_error(kind_of_errno(err),
					  path + ": cannot open (" + std::strerror(err) +
						  "); check that the file exists and is readable");
		}
		if (!S_ISREG(st.st_mode) || st.st_size == 0)
			return make_error(
				ErrorKind::BadInput,
				path + ": not an ELF file; give the path of an executable or a shared library (.so)");
		// Writable but private: should libelf ever convert data in place, the
		// file stays untouched. Pages are read only where touched.
		void *at = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
		if (at == MAP_FAILED) {
			const int err = errno;
			return make_error(kind_of_errno(err), path + ": cannot map (" + std::strerror(err) + ")");
		}
		return std::shared_ptr<MappedFile>(new MappedFile(static_cast<char *>(at), st.st_size));
	}
	~MappedFile() { munmap(data_, size_); }
	MappedFile(const MappedFile &) = delete;
	MappedFile &operator=(const MappedFile &) = delete;

	char *data() const { return data_; }
	size_t size() const { return size_; }
	// Gives the pages read so far back (they are read again where used):
	// reading a million names touches a few hundred MB that a lookup later
	// needs a few pages of.
	void release_pages() const { madvise(data_, size_, MADV_DONTNEED); }

private:
	MappedFile(char *data, size_t size) : data_(data), size_(size) {}
	char *data_;
	size_t size_;
};

std::string demangle(std::string_view name)
{
	if (!name.starts_with("_Z"))
		return std::string(name); // C names, Rust v0, ...
	std::string s(name);
	int status = 0;
	char *out = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
	if (status == 0 && out)
		s = out;
	std::free(out);
	return s;
}

std::optional<std::string> demangle_type(std::string_view mangled)
{
	if (mangled.starts_with('*'))
		mangled.remove_prefix(1);
	if (mangled.empty())
		return std::nullopt;
	const std::string s(mangled);
	int status = 0;
	char *out = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
	std::optional<std::string> type;
	if (status == 0 && out)
		type = out;
	std::free(out);
	return type;
}

bool may_demangle_to(std::string_view mangled, std::string_view prefix)
{
	// A demangled name that starts with "a::b::" is a nested name: mangled as
	// _ZN (or _ZZN, an entity local to a function), CV- and ref-qualifiers,
	// then each leading component as <length><identifier>.
	std::vector<std::string_view> parts;
	for (size_t at; (at = prefix.find("::")) != prefix.npos; prefix.remove_prefix(at + 2))
		parts.push_back(prefix.substr(0, at));
	if (parts.empty() || parts[0] == "std" || !mangled.starts_with("_Z"))
		return true; // unqualified, std:: (mangled St), or not a C++ name
	for (auto part : parts)
		if (part.empty() ||
		    part.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
			    part.npos)
			return true; // a template or operator: not worth spelling out
	mangled.remove_prefix(2);
	if (mangled.starts_with("Z"))
		mangled.remove_prefix(1);
	if (!mangled.starts_with("N"))
		return false;
	mangled.remove_prefix(1);
	while (!mangled.empty() && std::string_view("rVKRO").find(mangled[0]) != std::string_view::npos)
		mangled.remove_prefix(1);
	for (auto part : parts) {
		std::string len = std::to_string(part.size());
		if (!mangled.starts_with(len) || mangled.substr(len.size(), part.size()) != part)
			return false;
		mangled.remove_prefix(len.size() + part.size());
	}
	return true;
}

namespace {

// The symbol tables (.dynsym first), the version table and DT_SONAME.
struct Sections {
	std::vector<Elf_Scn *> tables;
	Elf_Data *versym = nullptr;
};

Sections read_sections(Elf *elf, std::string &soname)
{
	// .dynsym goes first: on a (name, addr) duplicate the first copy is kept, and
	// only .dynsym has the version info (.gnu.version) that marks hidden versions.
	Sections out;
	for (Elf_Scn *scn = nullptr; (scn = elf_nextscn(elf, scn));) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM)
			out.tables.insert(out.tables.begin(), scn);
		else if (sh.sh_type == SHT_SYMTAB)
			out.tables.push_back(scn);
		else if (sh.sh_type == SHT_GNU_versym)
			out.versym = elf_getdata(scn, nullptr);
		else if (sh.sh_type == SHT_DYNAMIC && sh.sh_entsize) {
			Elf_Data *d = elf_getdata(scn, nullptr);
			GElf_Dyn dyn;
			for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize && gelf_getdyn(d, int(i), &dyn); ++i) {
				if (dyn.d_tag == DT_NULL)
					break;
				if (dyn.d_tag != DT_SONAME)
					continue;
				if (const char *s = elf_strptr(elf, sh.sh_link, dyn.d_un.d_val))
					soname = s;
			}
		}
	}
	return out;
}

// Whether a symbol of this name, defined or imported, makes its file take
// part in C++ exceptions (ElfFile::cxx_exceptions).
bool names_exceptions(std::string_view name)
{
	return name == "__gxx_personality_v0" || name == "_Unwind_Resume" || name == "__cxa_throw";
}

// Appends one table's defined symbols (and their ranks: lower is preferred);
// `exceptions` set where the table names a symbol of C++ exceptions.
void read_table(Elf *elf, Elf_Scn *scn, Elf_Data *versym, std::vector<ElfSymbol> &symbols, std::vector<uint8_t> &rank,
		bool &exceptions)
{
	GElf_Shdr sh;
	gelf_getshdr(scn, &sh);
	const bool dynsym = sh.sh_type == SHT_DYNSYM;
	Elf_Data *data = elf_getdata(scn, nullptr);
	const size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
	GElf_Sym s;
	for (size_t i = 1; data && i < n && gelf_getsym(data, int(i), &s); ++i) {
		const int type = GELF_ST_TYPE(s.st_info), bind = GELF_ST_BIND(s.st_info);
		// Imports and absolute values are not code in this file; TLS values are
		// offsets into the TLS block, not addresses.
		if (s.st_shndx == SHN_UNDEF && !exceptions)
			if (const char *raw = elf_strptr(elf, sh.sh_link, s.st_name))
				exceptions = names_exceptions(
					std::string_view(raw).substr(0, std::string_view(raw).find('@')));
		if (s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS)
			continue;
		const bool func = type == STT_FUNC || type == STT_GNU_IFUNC;
		if (!func && type != STT_OBJECT && !(type == STT_NOTYPE && bind != STB_LOCAL))
			continue;
		// A pointer into the mapped image (string tables are not converted).
		const char *raw = elf_strptr(elf, sh.sh_link, s.st_name);
		if (!raw || !*raw)
			continue;
		std::string_view name(raw);
		const size_t at = name.find('@'); // .symtab may carry "foo@VER" / "foo@@VER"
		bool hidden = at != name.npos && name.substr(at, 2) != "@@";
		GElf_Versym v;
		if (dynsym && versym && gelf_getversym(versym, int(i), &v) && (v & kVersymHidden))
			hidden = true;
		exceptions = exceptions || names_exceptions(name.substr(0, at));
		symbols.push_back({name.substr(0, at), s.st_value, s.st_size, bind == STB_WEAK, func});
		rank.push_back((bind == STB_LOCAL ? 2 : bind == STB_WEAK ? 1 : 0) + (hidden ? 3 : 0));
	}
}

// Keeps the first of each (name, addr): .dynsym's copy of a .symtab symbol.
// Sorted rather than hashed: a million names would each be hashed whole.
void drop_duplicates(std::vector<ElfSymbol> &symbols, std::vector<uint8_t> &rank)
{
	std::vector<uint32_t> order(symbols.size());
	std::iota(order.begin(), order.end(), 0u);
	std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
		const ElfSymbol &x = symbols[a], &y = symbols[b];
		return x.addr != y.addr ? x.addr < y.addr : x.name < y.name;
	});
	std::vector<bool> keep(symbols.size(), true);
	for (size_t i = 1; i < order.size(); ++i) {
		const ElfSymbol &prev = symbols[order[i - 1]], &cur = symbols[order[i]];
		if (prev.addr == cur.addr && prev.name == cur.name)
			keep[order[i]] = false;
	}
	size_t out = 0;
	for (size_t i = 0; i < symbols.size(); ++i)
		if (keep[i]) {
			symbols[out] = symbols[i];
			rank[out++] = rank[i];
		}
	symbols.resize(out);
	rank.resize(out);
	symbols.shrink_to_fit();
	rank.shrink_to_fit();
}

} // namespace

Result<ElfFile> ElfFile::open(const std::string &path, bool require_symbols)
{
	slow_work("opening an ELF file");
	if (elf_version(EV_CURRENT) == EV_NONE)
		return make_error(ErrorKind::Other, std::string("libelf cannot be initialised: ") + elf_errmsg(-1));
	auto image = MappedFile::open(path);
	if (!image)
		return image.error();
	ElfHandle h;
	h.elf = elf_memory(image.value()->data(), image.value()->size());
	if (!h.elf || elf_kind(h.elf) != ELF_K_ELF)
		return make_error(ErrorKind::BadInput,
				  path + ": not an ELF file; give the path of an executable or a shared library (.so)");

	ElfFile f;
	f.path_ = path;
	f.image_ = image.value();
	size_t nph = 0;
	if (elf_getphdrnum(h.elf, &nph) == 0)
		for (size_t i = 0; i < nph; ++i) {
			GElf_Phdr p;
			if (gelf_getphdr(h.elf, int(i), &p) && p.p_type == PT_LOAD)
				f.loads_.push_back({p.p_vaddr, p.p_offset, p.p_filesz});
		}
	GElf_Ehdr eh;
	if (gelf_getehdr(h.elf, &eh))
		f.machine_ = eh.e_machine;
	Sections sections = read_sections(h.elf, f.soname_);
	for (Elf_Scn *scn : sections.tables)
		read_table(h.elf, scn, sections.versym, f.symbols_, f.rank_, f.cxx_exceptions_);
	drop_duplicates(f.symbols_, f.rank_);
	if (require_symbols && f.symbols_.empty())
		return make_error(
			ErrorKind::NotFound,
			path +
				": no symbol table (.symtab and .dynsym are empty or missing); the file is stripped, "
				"use an unstripped build or one with exported symbols");
	for (uint32_t i = 0; i < f.symbols_.size(); ++i)
		if (f.symbols_[i].func)
			f.funcs_.push_back({f.symbols_[i].addr, f.rank_[i], i});
	std::sort(f.funcs_.begin(), f.funcs_.end(), [](const Func &a, const Func &b) {
		return a.addr != b.addr ? a.addr < b.addr : a.rank != b.rank ? a.rank < b.rank : a.idx < b.idx;
	});
	f.image_->release_pages();
	return f;
}

const ElfSymbol *ElfFile::find(std::string_view name) const
{
	const ElfSymbol *best = nullptr;
	uint8_t best_rank = 255;
	for (size_t i = 0; i < symbols_.size(); ++i)
		if (rank_[i] < best_rank && symbols_[i].name == name)
			best = &symbols_[i], best_rank = rank_[i];
	return best;
}

const ElfSymbol *ElfFile::object_at(uint64_t vaddr) const
{
	if (objects_.empty()) {
		for (uint32_t i = 0; i < symbols_.size(); ++i)
			if (!symbols_[i].func)
				objects_.push_back({symbols_[i].addr, rank_[i], i});
		std::sort(objects_.begin(), objects_.end(), [](const Func &a, const Func &b) {
			return a.addr != b.addr ? a.addr < b.addr : a.rank < b.rank;
		});
	}
	auto it = std::lower_bound(objects_.begin(), objects_.end(), vaddr,
				   [](const Func &f, uint64_t v) { return f.addr < v; });
	return it != objects_.end() && it->addr == vaddr ? &symbols_[it->idx] : nullptr;
}

const ElfSymbol *ElfFile::symbol_at(uint64_t vaddr) const
{
	auto it = std::upper_bound(funcs_.begin(), funcs_.end(), vaddr,
				   [](uint64_t v, const Func &f) { return v < f.addr; });
	// Walk back address group by group: usually the nearest group holds the
	// answer; a few more cover a small symbol nested inside a big one. Bounded so
	// a miss (address in a gap) does not scan the whole table.
	for (int groups = 0; it != funcs_.begin() && groups < 8; ++groups) {
		const uint64_t a = std::prev(it)->addr;
		auto first =
			std::lower_bound(funcs_.begin(), it, a, [](const Func &f, uint64_t v) { return f.addr < v; });
		for (auto g = first; g != it; ++g) { // best rank first
			const ElfSymbol &s = symbols_[g->idx];
			if (s.size ? vaddr - s.addr < s.size : vaddr == s.addr)
				return &s;
		}
		it = first;
	}
	return nullptr;
}

std::vector<const ElfSymbol *> ElfFile::aliases(uint64_t addr) const
{
	auto [lo, hi] = std::equal_range(funcs_.begin(), funcs_.end(), Func{addr, 0, 0},
					 [](const Func &a, const Func &b) { return a.addr < b.addr; });
	std::vector<const ElfSymbol *> out;
	for (auto g = lo; g != hi; ++g)
		out.push_back(&symbols_[g->idx]);
	return out;
}

Result<uint64_t> ElfFile::vaddr_to_offset(uint64_t vaddr) const
{
	for (const Segment &s : loads_)
		if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
			return vaddr - s.vaddr + s.offset;
	return make_error(ErrorKind::BadInput,
			  path_ + ": address " + hex(vaddr) +
				  " is not in the file bytes of any PT_LOAD segment (wrong file, or a .bss address)");
}

Result<uint64_t> ElfFile::offset_to_vaddr(uint64_t off) const
{
	for (const Segment &s : loads_)
		if (off >= s.offset && off - s.offset < s.filesz)
			return off - s.offset + s.vaddr;
	return make_error(ErrorKind::BadInput,
			  path_ + ": file offset " + hex(off) +
				  " is not inside any PT_LOAD segment (not code or data of this file)");
}

} // namespace eacgm
