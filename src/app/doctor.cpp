// SPDX-License-Identifier: Apache-2.0
// eacgm doctor: can this machine trace, and what would be traced?
#include <bpf/libbpf.h>
#include <dirent.h>
#include <dlfcn.h>
#include <glob.h>
#include <iostream>
#include <map>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "app/commands.h"
#include "app/target.h"
#include "common/layers.h"
#include "layers/python_offsets.h"
#include "pipeline/record_loop.h"
#include "probe/attacher.h"
#include "probe/elf_symbols.h"
#include "probe/self_probe.h"
#include "probe/symbol_search.h"
#include "probe/unwind_guard.h"

// A function in eacgm itself for the self-test: probed, called, recorded.
extern "C" __attribute__((noinline, used)) long eacgm_doctor_probe_target(long x)
{
	__asm__ volatile("" ::: "memory");
	return x + 1;
}

namespace eacgm {

namespace {

struct Check {
	int failures = 0;
	void line(bool ok, const std::string &what, const std::string &detail, bool required = true)
	{
		const char *mark = ok ? "ok  " : required ? "FAIL" : "--  ";
		std::cout << "  [" << mark << "] " << what << (detail.empty() ? "" : ": " + detail) << "\n";
		if (!ok && required)
			failures++;
	}
};

bool exists(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0;
}

// Loads the real programs, probes a function of this binary, calls it and
// checks that exactly the expected span comes back.
Result<std::string> self_test()
{
	auto probe = probe_own_function("eacgm_doctor_probe_target");
	if (!probe)
		return probe.error();
	for (int i = 0; i < 3; i++)
		eacgm_doctor_probe_target(i);
	int spans = 0;
	auto cb = [](void *ctx, void *, size_t) {
		++*static_cast<int *>(ctx);
		return 0;
	};
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(probe->engine->events_map()), cb, &spans, nullptr);
	if (!rb)
		return make_error(kind_of_errno(errno), "cannot open the span ring buffer");
	ring_buffer__consume(rb);
	ring_buffer__free(rb);
	if (spans != 3)
		return make_error(ErrorKind::Other, "3 probed calls gave " + std::to_string(spans) + " spans");
	return std::string("uprobe + uretprobe on a function of eacgm: 3 calls, 3 spans");
}

// Whether C++ exceptions, pthread_exit and backtraces through traced calls
// are safe here: the exception guard runs on this processor, and the
// installed unwinder (libgcc_s) has the functions it probes.
void guard_line(Check &c)
{
	if (auto refusal = guard_refusal()) {
		c.line(false, "exception guard", *refusal + "; libraries a C++ exception may cross are not traced",
		       false);
		return;
	}
	std::string unwinder;
	for (const std::string &lib : installed_libraries())
		if (unwinder.empty() && lib.find("libgcc_s.so") != std::string::npos)
			if (auto elf = ElfFile::open(lib); elf && guard_sites(elf.value()).size() >= 5)
				unwinder = lib;
	c.line(!unwinder.empty(), "exception guard",
	       unwinder.empty() ? "no libgcc_s with the unwinder's functions in the loader cache; the guard "
				  "probes each process's own when it maps one"
				: "C++ exceptions, pthread_exit and backtrace() through traced calls run as untraced "
				  "(the unwinder: " +
			       unwinder + ")",
	       false);
}

} // namespace

int run_doctor()
{
	Check c;
	utsname u;
	uname(&u);
	std::cout << "kernel\n";
	c.line(true, "Linux", std::string(u.release) + " " + u.machine);
	c.line(exists("/sys/kernel/btf/vmlinux"), "BTF", "/sys/kernel/btf/vmlinux (needed for CO-RE)");
	c.line(exists("/sys/kernel/tracing/events") || exists("/sys/kernel/debug/tracing/events"), "tracefs",
	       "mounted (not needed: uprobes attach through perf events)", false);
	auto priv = check_bpf_privileges();
	c.line(priv.ok(), "privileges", priv.ok() ? "CAP_BPF and CAP_PERFMON" : priv.error().message);
	if (priv.ok()) {
		auto st = self_test();
		c.line(st.ok(), "span engine self-test", st.ok() ? st.value() : st.error().message);
	}

	guard_line(c);

	std::cout << "libraries\n";
	// Where the probe specs come from: a package's /usr/share/eacgm/specs, or
	// the source tree of a build (src/probe/spec.cpp, find_builtin_file).
	auto spec = find_builtin_file("python.json");
	std::string where = spec ? *spec : spec.error().message;
	char spec_dir[PATH_MAX];
	bool spec_ok = spec && realpath(spec->substr(0, spec->rfind('/')).c_str(), spec_dir);
	c.line(spec_ok, "built-in specs", spec_ok ? std::string(spec_dir) : where);
	auto installed = installed_libraries();
	for (auto &layer : layer_names(Source::spec)) { // python, gpu and host: see below
		auto specs = load_builtin_spec(layer);
		if (!specs) {
			c.line(false, layer + " spec", specs.error().message);
			continue;
		}
		std::map<std::string, std::vector<std::string>> found; // library glob -> files
		std::set<std::string> seen;
		for (auto &p : specs->probes)
			for (auto &lib : installed) {
				char real[PATH_MAX];
				if (library_matches(p, lib) && realpath(lib.c_str(), real) && seen.insert(real).second)
					found[p.library].push_back(real);
			}
		std::set<std::string> globs;
		for (auto &p : specs->probes)
			globs.insert(p.library);
		for (auto &g : globs) {
			std::string files;
			for (auto &f : found[g]) {
				auto elf = ElfFile::open(f);
				int hit = 0, total = 0;
				size_t by_pattern = 0;
				for (auto &p : specs->probes) {
					if (p.library != g)
						continue;
					if (!p.match.empty()) { // functions a pattern finds
						auto m = elf ? match_functions(elf.value(), p.match)
							     : Result<std::vector<FunctionMatch>>(
								       std::vector<FunctionMatch>{});
						by_pattern += m ? m->size() : 0;
						continue;
					}
					total++;
					for (auto &s : p.symbols)
						if (elf && elf->find(s)) {
							hit++;
							break;
						}
				}
				std::string counts =
					total ? std::to_string(hit) + "/" + std::to_string(total) + " functions" : "";
				if (!total || by_pattern)
					counts += (counts.empty() ? "" : ", ") + std::to_string(by_pattern) +
						" by pattern";
				files += (files.empty() ? "" : "; ") + f + " (" + counts + ")";
			}
			c.line(!found[g].empty(), layer + " " + g,
			       files.empty() ? "not installed here (found later if a process maps it)" : files, false);
		}
	}
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
	c.line(nvml != nullptr, "NVML",
	       nvml ? "libnvidia-ml.so.1 loads" : "libnvidia-ml.so.1 not found (no GPU driver)", false);
	if (nvml)
		dlclose(nvml);
	// The host layer's machine-wide pressure (its per-process counts need
	// only the tracepoints the self-test above exercises).
	bool psi = access("/proc/pressure/cpu", R_OK) == 0;
	c.line(psi, "PSI",
	       psi ? "/proc/pressure readable"
		   : "/proc/pressure missing (kernel without CONFIG_PSI): no pressure metrics",
	       false);

	// Which interpreters the Python layer can read: a frame layout is known
	// for their minor version.
	std::cout << "pythons\n";
	auto offsets = load_python_offsets();
	if (!offsets)
		c.line(false, "CPython offsets", offsets.error().message);
	glob_t g{};
	glob("/root/.pyenv/versions/*/bin/python[23].*[0-9]", 0, nullptr, &g);
	glob("/usr/bin/python3.*[0-9]", GLOB_APPEND, nullptr, &g);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		std::string path = g.gl_pathv[i];
		std::string version = path.substr(path.rfind("python") + 6);
		bool known = offsets && offsets->count(version);
		c.line(known, "python " + version,
		       path + (known ? ": frames readable" : ": no frame layout, not traced"), false);
	}
	globfree(&g);

	std::cout << (c.failures ? std::to_string(c.failures) + " problem(s) found\n" : "all required checks passed\n");
	return c.failures ? 1 : 0;
}

} // namespace eacgm
