#include "probe/elf_symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace eacgm {
namespace {

constexpr GElf_Versym kVersymHidden = 0x8000; // binutils' VERSYM_HIDDEN: a non-default "@VER"

std::string hex(uint64_t v)
{
	char buf[24];
	std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
	return buf;
}

// Owns the fd and Elf* only while open() reads; the ElfFile keeps copies.
struct ElfHandle {
	int fd = -1;
	Elf *elf = nullptr;
	~ElfHandle()
	{
		if (elf)
			elf_end(elf);
		if (fd >= 0)
			::close(fd);
	}
};

} // namespace

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

Result<ElfFile> ElfFile::open(const std::string &path, bool require_symbols)
{
	if (elf_version(EV_CURRENT) == EV_NONE)
		return make_error(std::string("libelf cannot be initialised: ") + elf_errmsg(-1));
	ElfHandle h;
	h.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (h.fd < 0)
		return make_error(path + ": cannot open (" + std::strerror(errno) +
				  "); check that the file exists and is readable");
	// READ_MMAP: big libraries (libnccl is 200 MiB) are paged in only where read.
	h.elf = elf_begin(h.fd, ELF_C_READ_MMAP, nullptr);
	if (!h.elf || elf_kind(h.elf) != ELF_K_ELF)
		return make_error(path + ": not an ELF file; give the path of an executable or a shared library (.so)");

	ElfFile f;
	f.path_ = path;

	size_t nph = 0;
	if (elf_getphdrnum(h.elf, &nph) == 0)
		for (size_t i = 0; i < nph; ++i) {
			GElf_Phdr p;
			if (gelf_getphdr(h.elf, int(i), &p) && p.p_type == PT_LOAD)
				f.loads_.push_back({p.p_vaddr, p.p_offset, p.p_filesz});
		}

	// .dynsym goes first: on a (name, addr) duplicate the first copy is kept, and
	// only .dynsym has the version info (.gnu.version) that marks hidden versions.
	std::vector<Elf_Scn *> tables;
	Elf_Data *versym = nullptr;
	for (Elf_Scn *scn = nullptr; (scn = elf_nextscn(h.elf, scn));) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM)
			tables.insert(tables.begin(), scn);
		else if (sh.sh_type == SHT_SYMTAB)
			tables.push_back(scn);
		else if (sh.sh_type == SHT_GNU_versym)
			versym = elf_getdata(scn, nullptr);
		else if (sh.sh_type == SHT_DYNAMIC && sh.sh_entsize) {
			Elf_Data *d = elf_getdata(scn, nullptr);
			GElf_Dyn dyn;
			for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize && gelf_getdyn(d, int(i), &dyn); ++i) {
				if (dyn.d_tag == DT_NULL)
					break;
				if (dyn.d_tag != DT_SONAME)
					continue;
				if (const char *s = elf_strptr(h.elf, sh.sh_link, dyn.d_un.d_val))
					f.soname_ = s;
			}
		}
	}

	std::unordered_map<std::string, size_t> seen; // name '\0' addr -> index
	for (Elf_Scn *scn : tables) {
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
			if (s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS)
				continue;
			const bool func = type == STT_FUNC || type == STT_GNU_IFUNC;
			if (!func && type != STT_OBJECT && !(type == STT_NOTYPE && bind != STB_LOCAL))
				continue;
			const char *raw = elf_strptr(h.elf, sh.sh_link, s.st_name);
			if (!raw || !*raw)
				continue;
			std::string_view name(raw);
			const size_t at = name.find('@'); // .symtab may carry "foo@VER" / "foo@@VER"
			bool hidden = at != name.npos && name.substr(at, 2) != "@@";
			GElf_Versym v;
			if (dynsym && versym && gelf_getversym(versym, int(i), &v) && (v & kVersymHidden))
				hidden = true;
			name = name.substr(0, at);

			std::string key(name);
			key.push_back('\0');
			key.append(reinterpret_cast<const char *>(&s.st_value), sizeof s.st_value);
			if (!seen.emplace(std::move(key), f.symbols_.size()).second)
				continue;
			const uint8_t rank = (bind == STB_LOCAL ? 2 : bind == STB_WEAK ? 1 : 0) + (hidden ? 3 : 0);
			f.symbols_.push_back(
				{std::string(name), demangle(name), s.st_value, s.st_size, bind == STB_WEAK, func});
			f.rank_.push_back(rank);
			if (func)
				f.funcs_.push_back({s.st_value, rank, uint32_t(f.symbols_.size() - 1)});
		}
	}
	if (require_symbols && f.symbols_.empty())
		return make_error(path +
				  ": no symbol table (.symtab and .dynsym are empty or missing); the file is stripped, "
				  "use an unstripped build or one with exported symbols");
	std::sort(f.funcs_.begin(), f.funcs_.end(), [](const Func &a, const Func &b) {
		return a.addr != b.addr ? a.addr < b.addr : a.rank != b.rank ? a.rank < b.rank : a.idx < b.idx;
	});
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
	return make_error(path_ + ": address " + hex(vaddr) +
			  " is not in the file bytes of any PT_LOAD segment (wrong file, or a .bss address)");
}

Result<uint64_t> ElfFile::offset_to_vaddr(uint64_t off) const
{
	for (const Segment &s : loads_)
		if (off >= s.offset && off - s.offset < s.filesz)
			return off - s.offset + s.vaddr;
	return make_error(path_ + ": file offset " + hex(off) +
			  " is not inside any PT_LOAD segment (not code or data of this file)");
}

} // namespace eacgm
