// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "probe/elf_prefetch.h"
#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "probe/spec.h"

namespace eacgm {
namespace {

const std::string kCudart = "/usr/local/cuda/lib64/libcudart.so.13";
const std::string kNccl = "/usr/local/cuda/lib64/libnccl.so.2";

#define REQUIRE_FILE(p)                                                                                                \
	if (access((p).c_str(), R_OK) != 0)                                                                            \
	GTEST_SKIP() << (p) << " is not installed on this machine"

struct TempDir {
	std::filesystem::path path;
	TempDir()
	{
		char tmpl[] = "/tmp/eacgm_elf_XXXXXX";
		path = mkdtemp(tmpl);
	}
	~TempDir() { std::filesystem::remove_all(path); }
	std::string write(const std::string &name, const std::string &content) const
	{
		std::ofstream(path / name, std::ios::binary) << content;
		return (path / name).string();
	}
};

TEST(ElfSymbols, CudartVersionedDynsym)
{
	REQUIRE_FILE(kCudart);
	auto f = ElfFile::open(kCudart, true);
	ASSERT_TRUE(f.ok()) << f.error().message;
	EXPECT_EQ(f->soname(), "libcudart.so.13");
	EXPECT_EQ(f->path(), kCudart);
	const ElfSymbol *s = f->find("cudaMalloc");
	ASSERT_NE(s, nullptr);
	EXPECT_EQ(s->name, "cudaMalloc"); // "@@libcudart.so.13" stripped
	EXPECT_EQ(s->demangled(), "cudaMalloc");
	EXPECT_TRUE(s->func);
	EXPECT_FALSE(s->weak);
	EXPECT_NE(s->addr, 0u);
	EXPECT_GT(s->size, 0u);
	EXPECT_EQ(f->find("cudaMalloc@@libcudart.so.13"), nullptr);
	for (const ElfSymbol &sym : f->symbols())
		EXPECT_EQ(sym.name.find('@'), std::string::npos) << sym.name;

	auto off = f->vaddr_to_offset(s->addr);
	ASSERT_TRUE(off.ok()) << off.error().message;
	auto back = f->offset_to_vaddr(*off);
	ASSERT_TRUE(back.ok()) << back.error().message;
	EXPECT_EQ(*back, s->addr);

	EXPECT_EQ(f->symbol_at(s->addr + s->size / 2), s);
	EXPECT_EQ(f->symbol_at(s->addr + s->size - 1), s);
	EXPECT_NE(f->symbol_at(s->addr + s->size), s);
}

TEST(ElfSymbols, NcclWeakAliases)
{
	REQUIRE_FILE(kNccl);
	auto f = ElfFile::open(kNccl, true);
	ASSERT_TRUE(f.ok()) << f.error().message;
	EXPECT_EQ(f->soname(), "libnccl.so.2");
	const ElfSymbol *weak = f->find("ncclAllReduce");
	const ElfSymbol *strong = f->find("pncclAllReduce");
	ASSERT_NE(weak, nullptr);
	ASSERT_NE(strong, nullptr);
	EXPECT_TRUE(weak->weak);
	EXPECT_FALSE(strong->weak);
	EXPECT_TRUE(weak->func && strong->func);
	EXPECT_EQ(weak->addr, strong->addr);
	EXPECT_EQ(weak->size, strong->size);

	auto al = f->aliases(weak->addr);
	std::vector<std::string> names;
	for (const ElfSymbol *a : al)
		names.push_back(std::string(a->name));
	EXPECT_NE(std::find(names.begin(), names.end(), "ncclAllReduce"), names.end());
	EXPECT_NE(std::find(names.begin(), names.end(), "pncclAllReduce"), names.end());
	EXPECT_EQ(al.front(), strong); // best (global) first
	// Middle of the function: the global alias wins over the weak one.
	EXPECT_EQ(f->symbol_at(weak->addr + weak->size / 2), strong);
	EXPECT_TRUE(f->aliases(weak->addr + 1).empty());
}

// glibc exports two pthread_cond_wait versions; find() must pick the default
// (@@GLIBC_2.3.2), the one the dynamic linker binds: same as dlsym's answer.
TEST(ElfSymbols, PrefersDefaultVersion)
{
	auto maps = read_maps(getpid());
	ASSERT_TRUE(maps.ok()) << maps.error().message;
	void *p = dlsym(RTLD_DEFAULT, "pthread_cond_wait");
	ASSERT_NE(p, nullptr);
	const Mapping *m = mapping_for(*maps, reinterpret_cast<uint64_t>(p));
	ASSERT_NE(m, nullptr);
	auto f = ElfFile::open(m->path);
	ASSERT_TRUE(f.ok()) << f.error().message;
	auto vaddr = f->offset_to_vaddr(reinterpret_cast<uint64_t>(p) - m->start + m->offset);
	ASSERT_TRUE(vaddr.ok()) << vaddr.error().message;
	const ElfSymbol *s = f->find("pthread_cond_wait");
	ASSERT_NE(s, nullptr);
	EXPECT_EQ(s->addr, *vaddr);
}

TEST(ElfSymbols, Demangle)
{
	EXPECT_EQ(demangle("_ZN2at4_ops6linear4callERKNS_6TensorES4_RKN3c108optionalIS2_EE"),
		  "at::_ops::linear::call(at::Tensor const&, at::Tensor const&, c10::optional<at::Tensor> const&)");
	EXPECT_EQ(demangle("cudaMalloc"), "cudaMalloc");
	EXPECT_EQ(demangle("_Znot_really_mangled"), "_Znot_really_mangled");
	EXPECT_EQ(demangle(""), "");
}

// The pre-filter that spares demangling most of a library: false only for a
// name that cannot demangle to one starting with the prefix.
TEST(ElfSymbols, MayDemangleTo)
{
	const std::string ops = "at::_ops::";
	EXPECT_TRUE(may_demangle_to("_ZN2at4_ops6linear4callERKNS_6TensorES4_RKN3c108optionalIS2_EE", ops));
	EXPECT_TRUE(may_demangle_to("_ZNK2at4_ops6linear4callEv", ops));             // const member
	EXPECT_TRUE(may_demangle_to("_ZNKR2at4_ops6linear4callEv", ops));            // & qualified
	EXPECT_TRUE(may_demangle_to("_ZZN2at4_ops6linear4callEvENKUlvE_clEv", ops)); // a lambda inside
	EXPECT_TRUE(may_demangle_to("_ZN2at4_ops6linear4callEv", "at::_ops::lin"));  // partial last part
	EXPECT_FALSE(may_demangle_to("_ZN2at6native3addEv", ops));                   // another namespace
	EXPECT_FALSE(may_demangle_to("_ZN3att4_ops3fooEv", ops));                    // a longer name
	EXPECT_FALSE(may_demangle_to("_Z3foov", "at::"));                            // unqualified
	EXPECT_FALSE(may_demangle_to("_ZTV3Foo", "at::"));                           // a vtable
	EXPECT_TRUE(may_demangle_to("cudaMalloc", ops));                             // not C++: unsure
	EXPECT_TRUE(may_demangle_to("_ZNSt6vectorIiSaIiEE4sizeEv", "std::"));        // St: unsure
	EXPECT_TRUE(may_demangle_to("_ZN4c10d16ProcessGroupGloo9allreduceEv", "c10d::"));
	EXPECT_TRUE(may_demangle_to("_ZN3fooIiE3barEv", "foo<int>::")); // templates: unsure
	EXPECT_TRUE(may_demangle_to("_Z3foov", ""));
}

// On a real library, the pre-filter changes nothing the torch spec finds:
// each of its patterns matches the same functions as a regex search of every
// demangled name. (What it can skip: a template function whose return type,
// printed first, happens to start with the prefix, such as
// "c10d::GradBucket* std::__do_uninit_copy<...>", which no pattern meant.)
TEST(ElfSymbols, MayDemangleToKeepsEveryMatchOfLibtorch)
{
	auto f = ElfFile::open("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0");
	ASSERT_TRUE(f.ok()) << f.error().message;
	auto spec = load_builtin_spec("torch");
	ASSERT_TRUE(spec.ok()) << spec.error().message;
	size_t patterns = 0, total = 0;
	for (auto &p : spec->probes) {
		if (p.match.empty())
			continue;
		patterns++;
		const std::regex re(p.match);
		std::vector<uint32_t> every;
		for (uint32_t i = 0; i < f->symbols().size(); i++)
			if (f->symbols()[i].func && std::regex_search(f->symbols()[i].demangled(), re))
				every.push_back(i);
		EXPECT_EQ(match_symbols(f.value(), p.match), every) << p.match;
		total += every.size();
	}
	// operators, c10d collectives (cpu, cuda), ProcessGroupGloo's eight that
	// issue gloo's, c10d waits (cpu, cuda)
	EXPECT_EQ(patterns, 13u);
	EXPECT_GT(total, 200u);
	size_t skipped = 0;
	for (const ElfSymbol &s : f->symbols())
		skipped += !may_demangle_to(s.name, "at::_ops::");
	EXPECT_GT(skipped, f->symbols().size() / 2);
}

TEST(ElfSymbols, MissingFile)
{
	auto f = ElfFile::open("/nonexistent/libnothing.so");
	ASSERT_FALSE(f.ok());
	EXPECT_NE(f.error().message.find("/nonexistent/libnothing.so"), std::string::npos) << f.error().message;
	EXPECT_EQ(f.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(f.error().message,
		  "/nonexistent/libnothing.so: cannot open (No such file or directory); check that "
		  "the file exists and is readable");
}

TEST(ElfSymbols, NotElf)
{
	TempDir dir;
	const std::string path = dir.write("notes.txt", "this is plain text, not a library\n");
	auto f = ElfFile::open(path);
	ASSERT_FALSE(f.ok());
	EXPECT_NE(f.error().message.find(path), std::string::npos) << f.error().message;
	EXPECT_NE(f.error().message.find("not an ELF file"), std::string::npos) << f.error().message;
	EXPECT_EQ(f.error().kind, ErrorKind::BadInput);
	auto directory = ElfFile::open(dir.path.string());
	ASSERT_FALSE(directory.ok());
	EXPECT_EQ(directory.error().kind, ErrorKind::BadInput);
}

// A bare ELF header: valid ELF, no sections at all (like a fully stripped file).
TEST(ElfSymbols, NoSymbolTableOnlyWhenAsked)
{
	Elf64_Ehdr h{};
	std::copy_n(ELFMAG, SELFMAG, h.e_ident);
	h.e_ident[EI_CLASS] = ELFCLASS64;
	h.e_ident[EI_DATA] = ELFDATA2LSB;
	h.e_ident[EI_VERSION] = EV_CURRENT;
	h.e_type = ET_DYN;
	h.e_machine = EM_X86_64;
	h.e_version = EV_CURRENT;
	h.e_ehsize = sizeof h;
	TempDir dir;
	const std::string path = dir.write("stripped.so", std::string(reinterpret_cast<const char *>(&h), sizeof h));

	auto plain = ElfFile::open(path);
	ASSERT_TRUE(plain.ok()) << plain.error().message;
	EXPECT_TRUE(plain->symbols().empty());
	EXPECT_EQ(plain->soname(), "");
	EXPECT_EQ(plain->find("main"), nullptr);
	EXPECT_EQ(plain->symbol_at(0x1000), nullptr);
	ASSERT_FALSE(plain->vaddr_to_offset(0x1000).ok());
	EXPECT_EQ(plain->vaddr_to_offset(0x1000).error().kind, ErrorKind::BadInput);

	auto strict = ElfFile::open(path, true);
	ASSERT_FALSE(strict.ok());
	EXPECT_NE(strict.error().message.find(path), std::string::npos) << strict.error().message;
	EXPECT_NE(strict.error().message.find("no symbol table"), std::string::npos) << strict.error().message;
	EXPECT_EQ(strict.error().kind, ErrorKind::NotFound);
}

} // namespace
} // namespace eacgm
