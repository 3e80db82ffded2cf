// SPDX-License-Identifier: Apache-2.0
// Code objects to names, files and lines, read from the target process.
// Formats follow CPython's Objects/lnotab_notes.txt (3.8-3.10) and
// Objects/locations.md (3.11+); the algorithms mirror PyCode_Addr2Line.
#include "layers/python_resolver.h"

#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/clock.h"

namespace eacgm {

namespace {

// Layout that did not change from 3.8 to 3.13 on 64-bit Linux (x86-64 and
// arm64 lay CPython out alike), so not in the table:
// PyObject.ob_type, PyTypeObject.tp_name, and PyASCIIObject's length and
// state bit field (interned:2, kind:3, compact:1, ascii:1).
constexpr size_t kObType = 8, kTpName = 24, kStrLength = 16, kStrState = 32;

template <class T>
T load_at(const uint8_t *buf, size_t off)
{
	T v;
	memcpy(&v, buf + off, sizeof v);
	return v;
}

void push_range(std::vector<PyLineRange> &out, uint32_t start, uint32_t end, int64_t line)
{
	if (end <= start)
		return; // CPython skips empty ranges too
	int32_t l = line < INT32_MIN || line > INT32_MAX ? -1 : int32_t(line);
	if (!out.empty() && out.back().end == start && out.back().line == l)
		out.back().end = end; // merged: 3.11+ tables repeat a line per instruction
	else
		out.push_back({start, end, l});
}

void append_utf8(std::string &s, uint32_t c)
{
	if (c >= 0xd800 && c < 0xe000)
		c = 0xfffd; // a lone surrogate (str allows them) is not UTF-8
	if (c < 0x80) {
		s += char(c);
	} else if (c < 0x800) {
		s += char(0xc0 | c >> 6);
		s += char(0x80 | (c & 0x3f));
	} else if (c < 0x10000) {
		s += char(0xe0 | c >> 12);
		s += char(0x80 | (c >> 6 & 0x3f));
		s += char(0x80 | (c & 0x3f));
	} else if (c < 0x110000) {
		s += char(0xf0 | c >> 18);
		s += char(0x80 | (c >> 12 & 0x3f));
		s += char(0x80 | (c >> 6 & 0x3f));
		s += char(0x80 | (c & 0x3f));
	} else {
		append_utf8(s, 0xfffd);
	}
}

bool supported(const PyOffsets &o)
{
	if (o.major != 3 || o.minor < 8 || o.minor > 13)
		return false;
	// Fields are read from one buffer that starts at ob_type: all lie past it.
	for (uint16_t f : {o.code_filename, o.code_name, o.code_firstlineno, o.code_linetable})
		if (f < 16 || f > 256)
			return false;
	if (o.minor >= 11 && (o.code_qualname < 16 || o.code_qualname > 256 || o.code_adaptive == kNoOffset))
		return false;
	return o.unicode_ascii_data != kNoOffset && o.bytes_size != kNoOffset && o.bytes_data != kNoOffset;
}

} // namespace

bool read_process_memory(uint32_t pid, uint64_t addr, void *dst, size_t len)
{
	if (len == 0)
		return true;
	if (addr == 0 || addr + len < addr)
		return false;
	iovec local{dst, len};
	iovec remote{reinterpret_cast<void *>(addr), len};
	return process_vm_readv(pid_t(pid), &local, 1, &remote, 1, 0) == ssize_t(len);
}

// --- line tables ---

std::vector<PyLineRange> decode_lnotab(const uint8_t *p, size_t n, int first_line)
{
	// Pairs (byte increment, signed line increment): the line in force at an
	// address is the one before the first pair whose running address passes it.
	std::vector<PyLineRange> out;
	uint32_t addr = 0;
	int64_t line = first_line;
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint32_t next = addr + p[i];
		push_range(out, addr, next, line);
		addr = next;
		line += int8_t(p[i + 1]);
	}
	push_range(out, addr, UINT32_MAX, line); // the last line runs to the end
	return out;
}

std::vector<PyLineRange> decode_linetable310(const uint8_t *p, size_t n, int first_line)
{
	// Pairs (byte length, signed line delta), a delta of -128 meaning "no line"
	// for that range without moving the running line.
	std::vector<PyLineRange> out;
	uint32_t end = 0;
	int64_t line = first_line;
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint32_t start = end;
		end += p[i];
		int8_t delta = int8_t(p[i + 1]);
		if (delta != -128)
			line += delta;
		push_range(out, start, end, delta == -128 ? -1 : line);
	}
	return out;
}

std::vector<PyLineRange> decode_locations(const uint8_t *p, size_t n, int first_line)
{
	// Entries start with a byte with bit 7 set: bits 3-6 a kind, bits 0-2 the
	// length in code units minus one. Only the start line matters here.
	auto varint = [&](size_t i) {
		uint32_t v = 0;
		for (unsigned shift = 0; i < n && shift < 32; shift += 6) {
			uint8_t b = p[i++];
			v |= uint32_t(b & 63) << shift;
			if (!(b & 64))
				break;
		}
		return v;
	};
	std::vector<PyLineRange> out;
	uint32_t end = 0;
	int64_t line = first_line;
	for (size_t i = 0; i < n;) {
		uint8_t b = p[i++];
		if (!(b & 0x80))
			continue; // not an entry start: only in a corrupt table
		int kind = b >> 3 & 15;
		uint32_t start = end;
		end += ((b & 7) + 1) * 2;
		if (kind == 13 || kind == 14) { // no columns / long form: svarint delta
			uint32_t u = varint(i);
			line += (u & 1) ? -int64_t(u >> 1) : int64_t(u >> 1);
		} else if (kind >= 10 && kind <= 12) { // one-line forms
			line += kind - 10;
		} // 0-9 short forms: same line; 15: no location
		push_range(out, start, end, kind == 15 ? -1 : line);
	}
	return out;
}

int line_at(const std::vector<PyLineRange> &ranges, std::optional<int64_t> offset, int first_line)
{
	if (!offset)
		return 0;
	if (*offset < 0)
		return first_line; // not started: PyCode_Addr2Line answers co_firstlineno
	auto it = std::upper_bound(ranges.begin(), ranges.end(), *offset,
				   [](int64_t off, const PyLineRange &r) { return off < int64_t(r.end); });
	if (it == ranges.end() || int64_t(it->start) > *offset || it->line < 0)
		return 0;
	return it->line;
}

std::optional<int64_t> instr_byte_offset(const PyOffsets &o, uint64_t code_addr, uint64_t instr)
{
	if (o.minor <= 10) {
		// An int: the walker may hand it zero- or sign-extended; only 32 bits count.
		int32_t lasti = int32_t(uint32_t(instr));
		if (lasti < 0)
			return -1;
		return o.minor == 10 ? 2 * int64_t(lasti) : int64_t(lasti);
	}
	// 3.11/3.12 prev_instr: the last code unit started (code - 1 before the
	// first); 3.13 instr_ptr: the instruction executing or about to (code at
	// first). During a call both lie inside the CALL's range of the table.
	int64_t d = int64_t(instr - (code_addr + o.code_adaptive));
	if (d < -2 || d > INT32_MAX || (d & 1))
		return std::nullopt;
	return d < 0 ? -1 : d;
}

// --- the resolver ---

PythonResolver::PythonResolver(PyMemReader reader) : read_(std::move(reader)) {}

void PythonResolver::forget(uint32_t pid) { procs_.erase(pid); }

bool PythonResolver::read_identity(uint32_t pid, const PyOffsets &o, uint64_t code_addr, Identity &id)
{
	// One read spanning ob_type to the last field compared.
	size_t end = std::max({o.code_filename, o.code_name, o.code_firstlineno, o.code_linetable}) + 8;
	if (o.minor >= 11)
		end = std::max<size_t>(end, o.code_qualname + 8);
	uint8_t buf[512];
	if (end > sizeof buf || !read_(pid, code_addr + kObType, buf, end - kObType))
		return false;
	auto at = [&](uint16_t off) { return load_at<uint64_t>(buf, off - kObType); };
	id.type = at(kObType);
	id.filename = at(o.code_filename);
	id.name = at(o.code_name);
	id.qualname = o.minor >= 11 ? at(o.code_qualname) : id.name;
	id.linetable = at(o.code_linetable);
	id.first_line = load_at<int32_t>(buf, o.code_firstlineno - kObType);
	return true;
}

bool PythonResolver::is_type(uint32_t pid, uint64_t type, uint64_t &known, const char *name)
{
	if (type == 0)
		return false;
	if (type == known)
		return true;
	// Proven once by name, then by address; a different address with the
	// right name means the pid now runs another process (pid reuse).
	uint64_t name_ptr;
	char got[16];
	size_t len = strlen(name) + 1;
	if (!read_(pid, type + kTpName, &name_ptr, sizeof name_ptr) || !read_(pid, name_ptr, got, len) ||
	    memcmp(got, name, len) != 0)
		return false;
	known = type;
	return true;
}

std::optional<std::string> PythonResolver::read_str(uint32_t pid, const PyOffsets &o, Process &p, uint64_t addr)
{
	uint8_t head[64];
	if (o.unicode_ascii_data > sizeof head || o.unicode_ascii_data < kStrState + 4 ||
	    !read_(pid, addr, head, o.unicode_ascii_data) ||
	    !is_type(pid, load_at<uint64_t>(head, kObType), p.str_type, "str"))
		return std::nullopt;
	int64_t length = load_at<int64_t>(head, kStrLength);
	uint32_t state = load_at<uint32_t>(head, kStrState);
	unsigned kind = state >> 2 & 7, compact = state >> 5 & 1, ascii = state >> 6 & 1;
	if (length < 0 || (kind != 1 && kind != 2 && kind != 4))
		return std::nullopt;
	if (!compact)
		return "?"; // a legacy string with a separate buffer: code objects never hold one
	// Compact non-ASCII data follows PyCompactUnicodeObject: utf8_length and
	// utf8 (and wstr_length before 3.12) after the PyASCIIObject header.
	uint64_t data = addr + o.unicode_ascii_data + (ascii ? 0 : o.minor <= 11 ? 24 : 16);
	size_t count = std::min<size_t>(length, kMaxString / kind);
	std::vector<uint8_t> raw(count * kind);
	if (!read_(pid, data, raw.data(), raw.size()))
		return std::nullopt;
	std::string s;
	s.reserve(count);
	for (size_t i = 0; i < count; i++) {
		append_utf8(s,
			    kind == 1           ? raw[i]
				    : kind == 2 ? load_at<uint16_t>(raw.data(), 2 * i)
						: load_at<uint32_t>(raw.data(), 4 * i));
	}
	return s;
}

std::optional<PythonResolver::Entry> PythonResolver::load(uint32_t pid, const PyOffsets &o, Process &p,
							  uint64_t code_addr)
{
	Entry e;
	if (!read_identity(pid, o, code_addr, e.id) || !is_type(pid, e.id.type, p.code_type, "code"))
		return std::nullopt;
	auto qualname = read_str(pid, o, p, e.id.qualname);
	auto filename = qualname ? read_str(pid, o, p, e.id.filename) : std::nullopt;
	if (!filename)
		return std::nullopt;
	e.info.qualname = std::move(*qualname);
	e.info.filename = std::move(*filename);
	e.info.first_line = e.id.first_line;

	uint64_t table_type = 0;
	int64_t size = -1;
	if (!read_(pid, e.id.linetable + kObType, &table_type, 8) || !is_type(pid, table_type, p.bytes_type, "bytes") ||
	    !read_(pid, e.id.linetable + o.bytes_size, &size, 8) || size < 0)
		return std::nullopt;
	// A longer table is cut: lines past its end read as unknown, not wrong.
	std::vector<uint8_t> table(std::min<size_t>(size, kMaxLineTable));
	if (!read_(pid, e.id.linetable + o.bytes_data, table.data(), table.size()))
		return std::nullopt;
	e.lines = o.minor <= 9  ? decode_lnotab(table.data(), table.size(), e.id.first_line)
		: o.minor == 10 ? decode_linetable310(table.data(), table.size(), e.id.first_line)
				: decode_locations(table.data(), table.size(), e.id.first_line);
	e.lines.shrink_to_fit();
	return e;
}

// The process's memory is gone: it was reaped, or it is exiting (its memory
// is released in do_exit, before it becomes a zombie: its maps read empty).
static bool memory_gone(uint32_t pid)
{
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return true;
	char path[64];
	snprintf(path, sizeof path, "/proc/%u/maps", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	bool empty = fgetc(f) == EOF;
	fclose(f);
	return empty;
}

std::optional<PyFrameInfo> PythonResolver::resolve(uint32_t pid, const PyOffsets &o, uint64_t code_addr, uint64_t instr,
						   uint64_t name_ptr, uint64_t file_ptr)
{
	stats_.lookups++;
	if (!supported(o) || code_addr == 0) {
		stats_.failures++;
		return std::nullopt;
	}
	Process &p = procs_[pid];
	auto it = p.entries.find(code_addr);
	if (it != p.entries.end()) {
		// The cached answer holds while the object at this address still
		// has the same type, names, file, line table and first line.
		Identity now;
		auto cached = [&] {
			stats_.hits++;
			PyFrameInfo info = it->second.info;
			info.line = line_at(it->second.lines, instr_byte_offset(o, code_addr, instr), info.first_line);
			return info;
		};
		uint64_t t = mono_ns();
		if (name_ptr && file_ptr && name_ptr == it->second.id.name && file_ptr == it->second.id.filename &&
		    t - it->second.checked_ns < kTrustNs)
			return cached();
		bool readable = read_identity(pid, o, code_addr, now);
		// Freed since the walk (no longer a code object): the walker's
		// names say whether the cached one is the object it saw.
		if (readable && now.type != it->second.id.type && name_ptr && file_ptr &&
		    name_ptr == it->second.id.name && file_ptr == it->second.id.filename)
			return cached();
		if (!readable) {
			// An exited process's memory can no longer change: what was
			// cached for it is still right (its last samples arrive late).
			if (memory_gone(pid) && (!name_ptr || name_ptr == it->second.id.name))
				return cached();
			stats_.failures++;
			return std::nullopt;
		}
		if (name_ptr && now.name != name_ptr) {
			stats_.stale++;
			stats_.failures++;
			return std::nullopt;
		}
		if (now == it->second.id) {
			it->second.checked_ns = t;
			return cached();
		}
		stats_.stale++;
		p.entries.erase(it);
	}
	stats_.misses++;
	auto e = load(pid, o, p, code_addr);
	if (e && name_ptr && e->id.name != name_ptr) {
		stats_.stale++;
		e.reset();
	}
	if (!e) {
		stats_.failures++;
		return std::nullopt;
	}
	if (p.entries.size() >= kMaxEntries)
		p.entries.clear();
	e->checked_ns = mono_ns();
	PyFrameInfo info = e->info;
	info.line = line_at(e->lines, instr_byte_offset(o, code_addr, instr), info.first_line);
	p.entries.emplace(code_addr, std::move(*e));
	return info;
}

} // namespace eacgm
