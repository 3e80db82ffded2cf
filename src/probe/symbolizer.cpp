// SPDX-License-Identifier: Apache-2.0
#include "probe/symbolizer.h"

#include <cstdio>

namespace eacgm {

bool Symbolizer::take(Proc &p, std::vector<Mapping> maps)
{
	// An exited process that is not yet reaped still has a /proc entry, with
	// empty maps: that is no reading, keep what was inherited or read before.
	if (maps.empty())
		return false;
	p.maps = std::make_shared<const std::vector<Mapping>>(std::move(maps));
	p.own = true;
	return true;
}

bool Symbolizer::read(uint32_t pid, Proc &p)
{
	auto maps = read_maps(pid, proc_root_);
	return maps && take(p, std::move(maps).value());
}

const ElfFile *Symbolizer::elf(const std::string &path)
{
	auto it = elfs_.find(path);
	if (it == elfs_.end()) {
		auto f = ElfFile::open(path);
		it = elfs_.emplace(path, f ? std::optional<ElfFile>(std::move(f).value()) : std::nullopt).first;
	}
	return it->second ? &*it->second : nullptr;
}

std::optional<std::string> Symbolizer::lookup(uint32_t pid, const std::vector<Mapping> &maps, uint64_t addr,
					      bool object)
{
	const Mapping *m = mapping_for(maps, addr);
	if (!m || !m->path.starts_with('/') || m->path.ends_with(" (deleted)"))
		return std::nullopt;
	const ElfFile *f = elf(host_path(pid, m->path, proc_root_));
	if (!f)
		return std::nullopt;
	// The mapping gives the file offset exactly; the ELF's PT_LOAD headers turn
	// it into the link-time address its symbols use (works for PIE, shared
	// libraries and non-PIE executables alike, whatever the load base).
	auto vaddr = f->offset_to_vaddr(addr - m->start + m->offset);
	if (!vaddr)
		return std::nullopt;
	const ElfSymbol *s = object ? f->object_at(*vaddr) : f->symbol_at(*vaddr);
	if (!s)
		return std::nullopt;
	std::string name = s->demangled();
	if (*vaddr != s->addr) {
		char buf[24];
		std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(*vaddr - s->addr));
		name += buf;
	}
	return name;
}

std::optional<std::string> Symbolizer::resolve(uint32_t pid, uint64_t addr) { return find(pid, addr, false); }

std::optional<std::string> Symbolizer::resolve_object(uint32_t pid, uint64_t addr) { return find(pid, addr, true); }

std::optional<std::string> Symbolizer::find(uint32_t pid, uint64_t addr, bool object)
{
	std::lock_guard lock(mu_);
	Proc &p = procs_[pid];
	if (auto a = p.aliases.find(addr); !object && a != p.aliases.end())
		addr = a->second;
	auto &results = object ? p.objects : p.results;
	if (auto it = results.find(addr); it != results.end())
		return it->second;
	bool fresh = false;
	if (!p.own)
		fresh = read(pid, p); // first use, or only inherited so far
	std::optional<std::string> name;
	if (p.maps)
		name = lookup(pid, *p.maps, addr, object);
	// A miss on old maps may be a library loaded since (dlopen): re-read once.
	if (!name && !fresh && read(pid, p))
		name = lookup(pid, *p.maps, addr, object);
	if (!name && p.inherited && p.inherited != p.maps)
		name = lookup(pid, *p.inherited, addr, object);
	results.emplace(addr, name);
	return name;
}

void Symbolizer::name_object(uint32_t pid, uint64_t addr, std::string name)
{
	std::lock_guard lock(mu_);
	procs_[pid].objects[addr] = std::move(name);
}

void Symbolizer::snapshot(uint32_t pid)
{
	std::lock_guard lock(mu_);
	Proc &p = procs_[pid];
	if (read(pid, p))
		p.results.clear(), p.objects.clear();
}

void Symbolizer::adopt(uint32_t pid, std::vector<Mapping> maps)
{
	std::lock_guard lock(mu_);
	Proc &p = procs_[pid];
	if (take(p, std::move(maps)))
		p.results.clear(), p.objects.clear();
}

void Symbolizer::inherit(uint32_t child, uint32_t parent)
{
	std::lock_guard lock(mu_);
	Proc &par = procs_[parent];
	if (!par.maps)
		read(parent, par);
	Proc &c = procs_[child];
	c.inherited = par.maps;
	c.aliases = par.aliases; // the child has the parent's memory, handles included
	if (!c.own)
		c.maps = par.maps;
	c.results.clear(); // misses from before the parent's maps were known
	c.objects.clear();
}

void Symbolizer::exec(uint32_t pid)
{
	std::lock_guard lock(mu_);
	// Maps read before the exec describe the old image: a child forked
	// after it must not inherit them (read again at its fork or first use).
	if (auto it = procs_.find(pid); it != procs_.end())
		it->second = Proc{};
}

void Symbolizer::alias(uint32_t pid, uint64_t handle, uint64_t addr)
{
	std::lock_guard lock(mu_);
	Proc &p = procs_[pid];
	p.aliases[handle] = addr; // resolve() looks here first: a miss cached for the handle is passed by
}

void Symbolizer::forget(uint32_t pid)
{
	std::lock_guard lock(mu_);
	procs_.erase(pid);
}

} // namespace eacgm
