// eacgm probes list|generate: the functions of a library that a pattern finds,
// and a spec that traces them.
#include "app/probes.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <regex>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/target.h"
#include "common/fs.h"
#include "probe/attacher.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"
#include "probe/spec.h"

// What measure_probe_cost() probes and calls: a function of eacgm itself that
// starts with "push %rbp" like the functions of real libraries (the kernel
// emulates that instruction; another first instruction costs a second trap).
__asm__(".pushsection .text\n"
	".globl eacgm_probes_cost_target\n"
	".type eacgm_probes_cost_target, @function\n"
	".p2align 4\n"
	"eacgm_probes_cost_target:\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  lea 1(%rdi), %rax\n"
	"  pop %rbp\n"
	"  ret\n"
	".size eacgm_probes_cost_target, . - eacgm_probes_cost_target\n"
	".popsection\n");
extern "C" long eacgm_probes_cost_target(long x);

namespace eacgm {

static std::string base_name(const std::string &p) { return p.substr(p.rfind('/') + 1); }

// GCC's cold partitions ("f.cold", "f.cold.12") are jumped to, never called:
// not functions to trace.
static bool cold_part(const std::string &raw)
{
	static const std::regex re("\\.cold(\\.[0-9]+)?$");
	return raw.find(".cold") != std::string::npos && std::regex_search(raw, re);
}

// Every name at one address, the preferred one first.
static FunctionMatch function_at(const ElfFile &elf, uint64_t addr)
{
	std::vector<const ElfSymbol *> names; // unique names, best first
	uint64_t size = 0;
	for (auto *s : elf.aliases(addr)) {
		size = std::max(size, s->size);
		if (std::none_of(names.begin(), names.end(), [&](auto *n) { return n->name == s->name; }))
			names.push_back(s);
	}
	auto has = [&](const std::string &n) {
		return std::any_of(names.begin(), names.end(), [&](auto *x) { return x->name == n; });
	};
	auto best = std::find_if(names.begin(), names.end(), [&](auto *s) {
		return !(s->name.size() > 1 && s->name[0] == 'p' && has(s->name.substr(1)));
	});
	FunctionMatch m;
	if (names.empty())
		return m;
	const ElfSymbol *pick = best == names.end() ? names[0] : *best;
	auto off = elf.vaddr_to_offset(addr);
	m.offset = off ? off.value() : addr;
	m.size = size;
	m.raw = pick->name;
	m.demangled = pick->demangled;
	for (auto *s : names)
		if (s != pick)
			m.aliases.push_back(s->demangled);
	return m;
}

Result<std::vector<FunctionMatch>> match_functions(const ElfFile &elf, const std::string &regex)
{
	std::set<uint64_t> addrs;
	try { // a valid pattern may still throw while matching (error_complexity)
		std::regex re(regex);
		for (auto &s : elf.symbols())
			if (s.func && !cold_part(s.name) &&
			    (std::regex_search(s.demangled, re) || (s.name != s.demangled && std::regex_search(s.name, re))))
				addrs.insert(s.addr);
	} catch (const std::regex_error &e) {
		return make_error("--match '" + regex + "' is not a valid regular expression: " + e.what());
	}
	std::vector<FunctionMatch> out;
	for (uint64_t addr : addrs)
		if (auto m = function_at(elf, addr); !m.raw.empty())
			out.push_back(std::move(m));
	std::sort(out.begin(), out.end(), [](const FunctionMatch &a, const FunctionMatch &b) {
		return std::tie(a.demangled, a.offset) < std::tie(b.demangled, b.offset);
	});
	return out;
}

std::string format_match(const FunctionMatch &m, size_t size_width)
{
	char head[64];
	snprintf(head, sizeof head, "0x%08llx  %*llu  ", (unsigned long long)m.offset, (int)size_width,
		 (unsigned long long)m.size);
	std::string line = head + m.demangled;
	for (size_t i = 0; i < m.aliases.size(); i++)
		line += (i ? ", " : m.aliases.size() > 1 ? "  (aliases: " : "  (alias: ") + m.aliases[i];
	return line + (m.aliases.empty() ? "" : ")");
}

// The characters of a regex a name would contain: letters, digits and _:~
// outside escapes such as \d.
static std::string literal_text(const std::string &pattern)
{
	std::string lit;
	for (size_t i = 0; i < pattern.size(); i++) {
		unsigned char c = pattern[i];
		if (c == '\\' && i + 1 < pattern.size() && std::isalpha((unsigned char)pattern[i + 1]))
			i++;
		else if (std::isalnum(c) || c == '_' || c == ':' || c == '~')
			lit += char(std::tolower(c));
	}
	return lit;
}

static size_t common_substring(const std::string &a, const std::string &b)
{
	std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
	size_t best = 0;
	for (size_t i = 1; i <= a.size(); i++) {
		for (size_t j = 1; j <= b.size(); j++) {
			cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : 0;
			best = std::max(best, cur[j]);
		}
		std::swap(prev, cur);
	}
	return best;
}

static size_t edit_distance(const std::string &a, const std::string &b)
{
	std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
	for (size_t j = 0; j <= b.size(); j++)
		prev[j] = j;
	for (size_t i = 1; i <= a.size(); i++) {
		cur[0] = i;
		for (size_t j = 1; j <= b.size(); j++)
			cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
		std::swap(prev, cur);
	}
	return prev[b.size()];
}

std::vector<std::string> close_matches(const ElfFile &elf, const std::string &pattern, size_t n)
{
	std::string lit = literal_text(pattern);
	if (lit.empty())
		return {};
	std::set<uint64_t> addrs;
	for (auto &s : elf.symbols())
		if (s.func && !cold_part(s.name))
			addrs.insert(s.addr);
	std::set<std::string> names; // the preferred name of each function
	for (uint64_t addr : addrs)
		if (auto m = function_at(elf, addr); !m.raw.empty())
			names.insert(function_name(m.demangled));
	std::vector<std::tuple<size_t, size_t, std::string>> ranked; // (-common, distance, name)
	const size_t need = std::min<size_t>(3, lit.size());
	for (auto &name : names) {
		std::string low = name;
		for (auto &c : low)
			c = char(std::tolower((unsigned char)c));
		size_t common = common_substring(lit, low);
		if (common >= need)
			ranked.emplace_back(SIZE_MAX - common, edit_distance(lit, low), name);
	}
	n = std::min(n, ranked.size());
	std::partial_sort(ranked.begin(), ranked.begin() + n, ranked.end());
	std::vector<std::string> out;
	for (size_t i = 0; i < n; i++)
		out.push_back(std::get<2>(ranked[i]));
	return out;
}

static bool strip_suffix(std::string &s, const std::string &suffix)
{
	if (s.size() <= suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix))
		return false;
	s.resize(s.size() - suffix.size());
	return true;
}

std::string function_name(const std::string &demangled)
{
	std::string s = demangled;
	for (bool more = true; more;) {
		more = strip_suffix(s, " const") || strip_suffix(s, " volatile") || strip_suffix(s, " &&") ||
		       strip_suffix(s, " &") || strip_suffix(s, " noexcept");
		if (!s.empty() && s.back() == ']' && s.rfind(" [clone ") != std::string::npos) {
			s.resize(s.rfind(" [clone "));
			more = true;
		}
	}
	if (s.empty() || s.back() != ')')
		return s;
	int depth = 0;
	size_t i = s.size();
	while (i-- > 0) {
		depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
		if (depth == 0)
			break;
	}
	if (i == 0 || i == std::string::npos)
		return s; // "(anonymous namespace)" alone, or unbalanced: leave it
	s.resize(i);
	// A function template carries its return type: "void f<int>(int)".
	if (!s.empty() && s.back() == '>') {
		depth = 0;
		for (size_t j = s.size(); j-- > 0;) {
			depth += s[j] == '>' || s[j] == ')' ? 1 : s[j] == '<' || s[j] == '(' ? -1 : 0;
			if (depth == 0 && s[j] == ' ')
				return s.substr(j + 1);
		}
	}
	return s;
}

std::string library_glob(const std::string &path)
{
	std::string base = base_name(path);
	for (size_t at = base.find(".so"); at != std::string::npos; at = base.find(".so", at + 1))
		if (at + 3 == base.size() || base[at + 3] == '.')
			return base.substr(0, at + 3) + "*";
	return path;
}

std::string generate_spec(const std::vector<FunctionMatch> &matches, const std::string &layer,
			  const std::string &library, const std::string &about_source)
{
	using nlohmann::json;
	auto dump = [](const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
	std::string about = "Generated by " + about_source +
			    ": one probe per function, no arguments kept. To keep arguments, add to a probe "
			    "\"args\": [{\"name\": \"size\", \"slot\": 1, \"type\": \"bytes\"}] (slot 0-5 = rdi rsi rdx "
			    "rcx r8 r9, 6+ stack words; types u64 i64 u32 i32 ptr bytes dim3 enum symbol) and "
			    "\"returns\": \"i32\" for a status code; see README.md, Probe specs.";
	std::string out = "{\n  \"about\": " + dump(about) + ",\n  \"layer\": " + dump(layer) +
			  ",\n  \"library\": " + dump(library) + ",\n  \"probes\": [\n";
	for (size_t i = 0; i < matches.size(); i++) {
		json p = {{"function", function_name(matches[i].demangled)}, {"symbols", json::array({matches[i].raw})}};
		out += "    " + dump(p) + (i + 1 < matches.size() ? ",\n" : "\n");
	}
	return out + "  ]\n}\n";
}

Result<std::string> resolve_library(const std::string &lib)
{
	std::string path = lib;
	struct stat st;
	if (lib.find('/') == std::string::npos && stat(lib.c_str(), &st) != 0) {
		for (auto &p : installed_libraries())
			if (base_name(p) == lib) {
				path = p;
				break;
			}
		if (path == lib)
			return make_error(lib + ": no such file, and no library of that name in the loader cache "
						"(ldconfig -p) or the CUDA directories; give its path");
	}
	char real[PATH_MAX];
	return realpath(path.c_str(), real) ? std::string(real) : path; // a missing file: ElfFile names it
}

Result<double> measure_probe_cost()
{
	if (auto p = check_bpf_privileges(); !p)
		return p.error();
	auto tracker = ProcTracker::open(false);
	if (!tracker)
		return tracker.error();
	auto engine = SpanEngine::open({}, (*tracker)->traced_map_fd());
	if (!engine)
		return engine.error();
	auto exe = ElfFile::open("/proc/self/exe");
	if (!exe)
		return exe.error();
	const ElfSymbol *sym = exe->find("eacgm_probes_cost_target");
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (!sym || len <= 0)
		return make_error("eacgm's own probe target is missing (stripped binary?)");
	self[len] = 0;
	auto off = exe->vaddr_to_offset(sym->addr);
	if (!off)
		return off.error();
	if (auto r = (*engine)->set_spec(0, eacgm_probe_spec{}); !r)
		return r.error();
	if (auto r = (*engine)->attach(self, {{off.value(), 0}}); !r)
		return r.error();
	if (auto r = (*tracker)->track(getpid()); !r)
		return r.error();
	long (*volatile call)(long) = eacgm_probes_cost_target; // a real call every time
	const int calls = 2000;
	double best = 1e30;
	for (int round = 0; round < 3; round++) {
		auto t0 = std::chrono::steady_clock::now();
		for (long i = 0; i < calls; i++)
			call(i);
		auto t1 = std::chrono::steady_clock::now();
		best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
	}
	return best;
}

static int fail(const std::string &msg, int code)
{
	std::cerr << "eacgm: " << msg << "\n";
	return code;
}

int run_probes(const ProbesArgs &a)
{
	auto path = resolve_library(a.lib);
	if (!path)
		return fail(path.error().message, 2);
	auto elf = ElfFile::open(*path, true);
	if (!elf)
		return fail(elf.error().message, 2);
	auto found = match_functions(*elf, a.match);
	if (!found)
		return fail(found.error().message, 2);
	auto &matches = found.value();
	if (matches.empty()) {
		std::string msg = "no function in " + *path + " matches '" + a.match + "'";
		auto close = close_matches(*elf, a.match);
		msg += close.empty() ? "; nothing close either" : "; close matches:";
		for (auto &c : close)
			msg += "\n  " + c;
		return fail(msg, 1);
	}
	if (!a.all && matches.size() > a.max) {
		std::string cost = "each traced call costs a uprobe hit, a µs or more (run as root to measure)";
		if (auto us = measure_probe_cost(); us) {
			char buf[200];
			snprintf(buf, sizeof buf,
				 "each traced call costs about %.2f µs here (measured now: uprobe+uretprobe recording a "
				 "span, no arguments), so 1,000,000 calls of these functions add about %.1f s",
				 us.value(), us.value());
			cost = buf;
		} else if (geteuid() == 0) {
			cost = "each traced call costs a uprobe hit, a µs or more (cannot measure: " + us.error().message + ")";
		}
		return fail(std::to_string(matches.size()) + " functions in " + *path + " match '" + a.match +
				    "', more than --max " + std::to_string(a.max) +
				    "; give a narrower --match or a larger --max (" + cost + ")",
			    2);
	}
	if (a.action == "list") {
		uint64_t biggest = 0;
		for (auto &m : matches)
			biggest = std::max(biggest, m.size);
		for (auto &m : matches)
			std::cout << format_match(m, std::to_string(biggest).size()) << "\n";
		std::cout << matches.size() << (matches.size() == 1 ? " function matches in " : " functions match in ")
			  << *path << "\n";
		return 0;
	}
	if (auto r = check_writable(a.output); !r)
		return fail(r.error().message, 2);
	std::string glob = library_glob(*path);
	std::string text = generate_spec(matches, a.layer, glob,
					 "eacgm probes generate --lib " + *path + " --match '" + a.match + "'");
	if (auto s = parse_spec(text, "the generated spec (--layer " + a.layer + ")", true); !s)
		return fail(s.error().message, 2);
	if (auto r = write_file_atomic(a.output, text); !r)
		return fail(r.error().message, 2);
	std::cout << "wrote " << matches.size() << " probe" << (matches.size() == 1 ? "" : "s") << " for " << *path
		  << " to " << a.output << " (layer " << a.layer << ", library " << glob << ")\n";
	return 0;
}

} // namespace eacgm
