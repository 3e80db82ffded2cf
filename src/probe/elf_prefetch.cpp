// SPDX-License-Identifier: Apache-2.0
#include "probe/elf_prefetch.h"

#include <climits>
#include <regex>
#include <cstdlib>
#include <set>

#include "probe/attacher.h"
#include "probe/proc_maps.h"

namespace eacgm {

namespace {

std::string real_path(const std::string &path)
{
	char real[PATH_MAX];
	return realpath(path.c_str(), real) ? std::string(real) : std::string();
}

} // namespace

std::vector<uint32_t> match_symbols(const ElfFile &elf, const std::string &pattern)
{
	std::regex re(pattern);
	const std::string prefix = anchored_literal_prefix(pattern);
	std::vector<uint32_t> out;
	const auto &syms = elf.symbols();
	for (uint32_t i = 0; i < syms.size(); i++) {
		if (!syms[i].func || !may_demangle_to(syms[i].name, prefix))
			continue;
		const std::string name = syms[i].demangled();
		if (name.starts_with(prefix) && std::regex_search(name, re))
			out.push_back(i);
	}
	return out;
}

ElfPrefetch::~ElfPrefetch()
{
	if (work_.valid())
		work_.wait();
}

void ElfPrefetch::start(const SpecSet &specs, uint32_t pid, const std::string &program)
{
	std::vector<ProbeSpec> probes = specs.probes; // the thread's own copy
	work_ = std::async(std::launch::async, [this, probes = std::move(probes), pid, program] {
		const std::vector<std::string> libraries = distinct_libraries(probes);
		auto wanted = [&](const std::string &path) { return any_library_matches(libraries, path); };
		std::vector<std::string> candidates;
		try {
			if (pid)
				if (auto maps = read_maps(pid))
					candidates = mapped_files(maps.value());
			if (!program.empty())
				for (auto &lib : linked_libraries(program))
					candidates.push_back(lib);
			for (auto &lib : installed_libraries())
				candidates.push_back(lib);
		} catch (...) {
			candidates.clear(); // nothing read ahead: each file is read when attached
		}
		// The list first, so that take() knows what will come; then each file.
		std::vector<std::string> order;
		{
			std::lock_guard<std::mutex> lock(mu_);
			std::set<std::string> seen;
			for (auto &c : candidates) {
				std::string real = real_path(c);
				if (real.empty() || !(wanted(c) || wanted(real)) || !seen.insert(real).second)
					continue;
				files_[real] = pending_[real].get_future();
				order.push_back(real);
			}
			listed_ = true;
		}
		listed_cv_.notify_all();
		for (auto &real : order) {
			PrefetchedElf got{ElfFile::open(real), {}};
			if (got.elf)
				for (auto &p : probes)
					if (!p.match.empty() && library_matches(p, real) && !got.matches.count(p.match))
						got.matches[p.match] = match_symbols(got.elf.value(), p.match);
			std::lock_guard<std::mutex> lock(mu_);
			pending_[real].set_value(std::move(got));
		}
	});
}

std::optional<PrefetchedElf> ElfPrefetch::take(const std::string &real_path)
{
	// Waits for the list (a read of /proc/PID/maps and the loader cache),
	// then, for a file on it, for that file alone.
	std::future<PrefetchedElf> f;
	{
		std::unique_lock<std::mutex> lock(mu_);
		if (!work_.valid())
			return std::nullopt;
		listed_cv_.wait(lock, [&] { return listed_; });
		auto it = files_.find(real_path);
		if (it == files_.end())
			return std::nullopt;
		f = std::move(it->second);
		files_.erase(it);
	}
	return f.get();
}

} // namespace eacgm
