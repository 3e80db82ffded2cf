// SPDX-License-Identifier: Apache-2.0
#include "probe/attacher.h"

#include <cerrno>
#include <cstdio>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch/arch.h"
#include "probe/elf_symbols.h"
#include "probe/proc_maps.h"
#include "probe/symbol_search.h"
#include "probe/unwind_guard.h"
#include "common/threads.h"

namespace eacgm {

Attacher::Attacher(SpanEngine &engine, ProcTracker &tracker, SpecSet specs)
	: engine_(engine), tracker_(tracker), specs_(std::move(specs))
{}

Result<void> Attacher::load_specs()
{
	for (uint32_t id = 0; id < specs_.probes.size(); id++) {
		auto c = compile_probe(specs_.probes[id]);
		if (!c)
			return c.error();
		if (auto r = engine_.set_spec(id, c.value()); !r)
			return r;
	}
	return {};
}

bool Attacher::wanted(const std::string &path) const
{
	if (libraries_for_ != specs_.probes.size()) { // patterns add specs as they expand
		libraries_ = distinct_libraries(specs_.probes);
		libraries_for_ = specs_.probes.size();
	}
	return any_library_matches(libraries_, path);
}

static bool is_dynamic_linker(const std::string &path)
{
	std::string base = path.substr(path.rfind('/') + 1);
	return base.rfind("ld-linux", 0) == 0 || base.rfind("ld-2.", 0) == 0 || base == "ld.so";
}

Result<void> Attacher::attach_library(const std::string &path)
{
	char real[PATH_MAX];
	if (!realpath(path.c_str(), real))
		return {}; // gone, or a path inside another mount namespace we cannot see
	struct stat st;
	if (stat(real, &st) != 0 || !S_ISREG(st.st_mode))
		return {};
	// Specs match the name a library is known by (libcudart.so.13), which is
	// often a symlink to a longer versioned name: test both. Indices, not
	// pointers: pattern probes add specs as they expand.
	std::vector<size_t> matching;
	for (size_t i = 0; i < specs_.probes.size(); i++) {
		const ProbeSpec &p = specs_.probes[i];
		if (library_matches(p, path) || library_matches(p, real))
			matching.push_back(i);
	}
	if (matching.empty())
		return {};
	if (!done_files_.insert({st.st_dev, st.st_ino}).second)
		return {};
	std::optional<PrefetchedElf> ahead = prefetch_ ? prefetch_->take(real) : std::nullopt;
	Result<ElfFile> elf = ahead ? std::move(ahead->elf) : ElfFile::open(real);
	const auto *matched = ahead ? &ahead->matches : nullptr;
	if (!elf) {
		for (size_t i : matching)
			if (specs_.probes[i].user)
				return elf.error();
		warnings_.push_back(elf.error().message);
		return {};
	}
	// A library with an unwinder of its own is guarded before its
	// functions get return probes.
	if (auto r = guard_elf(real, elf.value()); !r)
		return r;
	if (unguarded_refusal(real, elf.value()))
		return {};
	std::set<uint64_t> done_addrs; // aliases share an address: attach once
	std::vector<SpanEngine::Target> targets;
	std::vector<AttachedProbe> attached;
	auto add = [&](uint32_t id, const ElfSymbol &sym) -> Result<void> {
		if (!done_addrs.insert(sym.addr).second)
			return {};
		auto off = elf->vaddr_to_offset(sym.addr);
		if (!off)
			return off.error();
		const uint64_t at = decoder_.probe_offset(real, off.value(), sym.size);
		targets.push_back({at, id});
		attached.push_back({id, real, std::string(sym.name), at});
		return {};
	};
	for (size_t i : matching) {
		if (!specs_.probes[i].match.empty()) {
			auto r = expand_pattern(i, elf.value(), matched, add);
			if (!r)
				return r;
			continue;
		}
		const ProbeSpec &p = specs_.probes[i];
		bool any = false;
		for (auto &name : p.symbols) {
			const ElfSymbol *sym = elf->find(name);
			if (!sym)
				continue;
			any = true;
			if (auto r = add(i, *sym); !r)
				return r;
		}
		if (!any && p.user)
			return make_error(ErrorKind::NotFound,
					  p.origin + ": symbol " + p.symbols.front() + " of probe '" + p.function +
						  "' not found in " + std::string(real) +
						  " (searched its .symtab and .dynsym); check the name with 'nm -D'");
	}
	if (auto r = engine_.attach(real, targets); !r)
		return r;
	attached_.insert(attached_.end(), attached.begin(), attached.end());
	return {};
}

Result<void> Attacher::expand_pattern(size_t pattern, const ElfFile &elf,
				      const std::map<std::string, std::vector<uint32_t>> *matched,
				      const std::function<Result<void>(uint32_t, const ElfSymbol &)> &add)
{
	const std::string &match = specs_.probes[pattern].match;
	const std::vector<uint32_t> *ahead = nullptr; // matched while the BPF objects loaded
	if (matched)
		if (auto it = matched->find(match); it != matched->end())
			ahead = &it->second;
	const std::vector<uint32_t> found = ahead ? *ahead : match_symbols(elf, match);
	bool any = false;
	SignatureArgs sig;
	if (reads_layout(specs_.probes[pattern]) && signature_reader_)
		sig = signature_reader_(specs_.probes[pattern], elf.path());
	if (!sig.warning.empty())
		warnings_.push_back(sig.warning);
	for (uint32_t k : found) {
		const ElfSymbol &sym = elf.symbols()[k];
		any = true;
		const std::string demangled = sym.demangled();
		ProbeSpec p = expand_match(specs_.probes[pattern], std::string(sym.name), demangled);
		if (sig.args)
			p.args = sig.args(demangled);
		// One spec per function name and reading, shared by every file that has it.
		auto key = std::make_tuple(pattern, p.function, sig.key);
		auto it = expanded_.find(key);
		if (it == expanded_.end()) {
			uint32_t id = specs_.probes.size();
			auto c = compile_probe(p);
			if (!c)
				return c.error();
			if (auto r = engine_.set_spec(id, c.value()); !r)
				return r;
			specs_.probes.push_back(std::move(p));
			it = expanded_.emplace(key, id).first;
		}
		if (auto r = add(it->second, sym); !r)
			return r;
	}
	const ProbeSpec &p = specs_.probes[pattern];
	if (!any && p.user) {
		std::string close;
		for (auto &name : close_matches(elf, p.match, 5))
			close += (close.empty() ? "" : ", ") + name;
		return make_error(
			ErrorKind::NotFound,
			p.origin + ": pattern \"" + p.match + "\" of probe '" + p.function +
				"' matches no function in " + elf.path() + (close.empty() ? "" : "; close: " + close) +
				"; list candidates with 'eacgm probes list --lib " + elf.path() + " --match REGEX'");
	}
	return {};
}

Result<void> Attacher::guard_elf(const std::string &real, const ElfFile &elf)
{
	struct stat st;
	if (!engine_.guarded() || stat(real.c_str(), &st) != 0 || !guard_files_.insert({st.st_dev, st.st_ino}).second)
		return {};
	std::vector<SpanEngine::Target> targets;
	for (const GuardSite &g : guard_sites(elf, &decoder_))
		targets.push_back({g.file_offset, uint32_t(g.role)});
	return engine_.attach_guard(real, targets);
}

Result<void> Attacher::guard_library(const std::string &path)
{
	char real[PATH_MAX];
	struct stat st;
	if (!engine_.guarded() || !realpath(path.c_str(), real) || stat(real, &st) != 0 || !S_ISREG(st.st_mode) ||
	    guard_files_.count({st.st_dev, st.st_ino}))
		return {};
	auto elf = ElfFile::open(real);
	if (!elf) {
		guard_files_.insert({st.st_dev, st.st_ino});
		warnings_.push_back(elf.error().message);
		return {};
	}
	return guard_elf(real, elf.value());
}

bool Attacher::unguarded_refusal(const std::string &real, const ElfFile &elf)
{
	if (engine_.guarded() || !elf.cxx_exceptions())
		return false;
	warnings_.push_back("not tracing the calls of " + real +
			    ": a C++ exception may unwind through them, and without the exception guard (" +
			    engine_.unguarded_reason() +
			    ") a return probe there would turn a caught exception into the program's abort "
			    "(docs/security.md)");
	return true;
}

std::vector<ProbeSite> Attacher::sites(size_t from) const
{
	std::vector<ProbeSite> out;
	for (size_t i = from; i < attached_.size(); i++) {
		const AttachedProbe &a = attached_[i];
		out.push_back({a.path, specs_.probes[a.spec_id].function, a.offset});
	}
	return out;
}

Result<std::vector<std::string>> Attacher::scan_process(uint32_t pid)
{
	auto maps = read_maps(pid);
	if (!maps)
		return maps.error();
	return scan_maps(pid, maps.value());
}

Result<std::vector<std::string>> Attacher::scan_maps(uint32_t pid, const std::vector<Mapping> &maps)
{
	slow_work("placing probes on a process's libraries");
	std::vector<std::string> fresh;
	auto &judged = judged_[pid];
	const std::vector<std::string> files = mapped_files(maps);
	// The guard first: the process's return probes go on below.
	for (auto &file : files)
		if (!judged.count(file) && holds_unwinder(file))
			if (auto r = guard_library(host_path(pid, file)); !r)
				return r.error();
	for (auto &file : files) {
		if (!judged.insert(file).second)
			continue;
		fresh.push_back(file);
		std::string p = host_path(pid, file);
		if (is_dynamic_linker(file)) {
			if (auto r = tracker_.watch_dynamic_linker(p); !r)
				warnings_.push_back(r.error().message);
			continue;
		}
		if (wanted(file) || wanted(p))
			if (auto r = attach_library(p); !r)
				return r.error();
	}
	return fresh;
}

void Attacher::inherit(uint32_t child, uint32_t parent)
{
	auto it = judged_.find(parent);
	if (it != judged_.end())
		judged_[child] = it->second;
}

Result<void> Attacher::attach_installed(const std::vector<std::string> &extra_libraries)
{
	auto libs = installed_libraries();
	libs.insert(libs.end(), extra_libraries.begin(), extra_libraries.end());
	// The guard first, on the unwinders every process may load: no return
	// probe below can be live in a process before its unwinder is guarded.
	for (auto &lib : libs)
		if (holds_unwinder(lib))
			if (auto r = guard_library(lib); !r)
				return r;
	for (auto &p : specs_.probes)
		if (!p.library.empty() && p.library[0] == '/') {
			if (access(p.library.c_str(), R_OK) != 0)
				return make_error(ErrorKind::NotFound,
						  p.origin + ": library " + p.library + " does not exist");
			if (auto r = attach_library(p.library); !r)
				return r;
		}
	for (auto &lib : libs)
		if (wanted(lib))
			if (auto r = attach_library(lib); !r)
				return r;
	return {};
}

// Runs a helper program (the dynamic linker, ldconfig) and returns its
// standard output; empty when it cannot run. eacgm has threads by now, so
// everything the child needs is made before fork (no allocation after it).
static std::string run_capture(const std::vector<std::string> &argv)
{
	std::vector<char *> args;
	for (auto &a : argv)
		args.push_back(const_cast<char *>(a.c_str()));
	args.push_back(nullptr);
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return "";
	int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
	pid_t pid = fork();
	if (pid == 0) {
		// dup2 clears close-on-exec on the copies.
		if (dup2(fds[1], 1) < 0 || (null >= 0 && dup2(null, 2) < 0))
			_exit(127);
		execv(args[0], args.data());
		_exit(127);
	}
	close(fds[1]);
	if (null >= 0)
		close(null);
	std::string out;
	if (pid < 0) { // fork failed: nothing to wait for
		close(fds[0]);
		return out;
	}
	char buf[4096];
	ssize_t n;
	while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			out.append(buf, n);
	close(fds[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	return out;
}

static bool is_elf(const std::string &path)
{
	std::ifstream in(path, std::ios::binary);
	char magic[4] = {};
	in.read(magic, 4);
	return in && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

// Lists that cost a program run (the dynamic linker, ldconfig), read once
// per run and key: the prefetch at start and the attach that follows ask
// for the same ones.
static std::vector<std::string> once_per_run(const std::string &key,
					     const std::function<std::vector<std::string>()> &read)
{
	static std::mutex mu;
	static std::map<std::string, std::vector<std::string>> lists;
	std::lock_guard<std::mutex> lock(mu);
	auto it = lists.find(key);
	if (it == lists.end())
		it = lists.emplace(key, read()).first;
	return it->second;
}

static std::vector<std::string> read_linked_libraries(const std::string &program)
{
	std::vector<std::string> libs;
	if (!is_elf(program))
		return libs;
	// The dynamic linker in list mode resolves RPATH, RUNPATH and $ORIGIN
	// exactly as at run time, without running the program.
	// The linker of eacgm's own processor: a program of another (run by an
	// emulator) is not one eacgm's probes could trace.
	if (const char *ld = arch::dynamic_linker(); access(ld, X_OK) == 0) {
		std::string out = run_capture({ld, "--list", program});
		size_t pos = 0;
		while (pos < out.size()) {
			size_t eol = out.find('\n', pos);
			std::string line = out.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
			pos = eol == std::string::npos ? out.size() : eol + 1;
			auto arrow = line.find("=> /");
			if (arrow == std::string::npos)
				continue;
			std::string path = line.substr(arrow + 3);
			path = path.substr(0, path.find(" ("));
			libs.push_back(path);
		}
	}
	return libs;
}

static std::vector<std::string> read_installed_libraries()
{
	std::vector<std::string> libs;
	// The loader cache: what a program finds by soname.
	std::string out = run_capture({"/sbin/ldconfig", "-p"});
	size_t pos = 0;
	while ((pos = out.find("=> ", pos)) != std::string::npos) {
		size_t eol = out.find('\n', pos);
		libs.push_back(out.substr(pos + 3, eol - pos - 3));
		pos = eol == std::string::npos ? out.size() : eol;
	}
	// CUDA toolkits are often outside the cache.
	std::vector<std::string> dirs = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
					 std::string("/usr/local/cuda/targets/") + arch::cuda_target_dir() + "/lib"};
	if (const char *home = getenv("CUDA_HOME"))
		dirs.push_back(std::string(home) + "/lib64");
	for (auto &d : dirs) {
		DIR *dir = opendir(d.c_str());
		if (!dir)
			continue;
		while (auto *ent = readdir(dir)) {
			std::string name = ent->d_name;
			if (name.find(".so") != std::string::npos)
				libs.push_back(d + "/" + name);
		}
		closedir(dir);
	}
	return libs;
}

std::vector<std::string> linked_libraries(const std::string &program)
{
	return once_per_run(program, [&] { return read_linked_libraries(program); });
}

std::vector<std::string> installed_libraries()
{
	return once_per_run("ldconfig -p", read_installed_libraries); // programs' keys are paths
}

} // namespace eacgm
