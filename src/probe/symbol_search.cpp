// SPDX-License-Identifier: Apache-2.0
// Finding functions in a library by pattern, and near misses for a pattern
// that finds none. Shared by `eacgm probes` and pattern probes in specs.
#include "probe/symbol_search.h"

#include "probe/spec.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <regex>
#include <set>
#include <tuple>

namespace eacgm {

// GCC's cold partitions ("f.cold", "f.cold.12") are jumped to, never called:
// not functions to trace.
static bool cold_part(std::string_view raw)
{
	static const std::regex re("\\.cold(\\.[0-9]+)?$");
	const size_t at = raw.rfind(".cold");
	if (at == raw.npos)
		return false;
	const std::string tail(raw.substr(at));
	return std::regex_search(tail, re);
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
	auto has = [&](std::string_view n) {
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
	m.demangled = pick->demangled();
	for (auto *s : names)
		if (s != pick)
			m.aliases.push_back(s->demangled());
	return m;
}

Result<std::vector<FunctionMatch>> match_functions(const ElfFile &elf, const std::string &regex)
{
	std::set<uint64_t> addrs;
	try { // a valid pattern may still throw while matching (error_complexity)
		std::regex re(regex);
		const std::string prefix = anchored_literal_prefix(regex);
		for (auto &s : elf.symbols()) {
			if (!s.func || cold_part(s.name) || !may_demangle_to(s.name, prefix))
				continue;
			const std::string raw(s.name), demangled = s.demangled();
			if (std::regex_search(demangled, re) || (raw != demangled && std::regex_search(raw, re)))
				addrs.insert(s.addr);
		}
	} catch (const std::regex_error &e) {
		return make_error(ErrorKind::BadInput,
				  "--match '" + regex + "' is not a valid regular expression: " + e.what());
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

} // namespace eacgm
