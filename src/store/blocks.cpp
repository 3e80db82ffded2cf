// SPDX-License-Identifier: Apache-2.0
// The block codec (blocks.h): columns → varints → one zstd frame, and back.
#include "store/blocks.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <unordered_map>

namespace eacgm {

namespace {

uint64_t zigzag(uint64_t v) { return (v << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(v) >> 63); }
uint64_t unzigzag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

// Writes v as a varint at p, which has room for 10 bytes; returns past it.
uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = static_cast<uint8_t>(v | 0x80);
		v >>= 7;
	}
	*p++ = static_cast<uint8_t>(v);
	return p;
}

void put_varint(std::string &out, uint64_t v)
{
	uint8_t buf[10];
	out.append(reinterpret_cast<char *>(buf), put_varint(buf, v) - buf);
}

// Reads a varint at p (advanced past it); false past `end` or beyond 64 bits.
bool get_varint(const uint8_t *&p, const uint8_t *end, uint64_t &v)
{
	v = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (p == end)
			return false;
		uint8_t b = *p++;
		v |= uint64_t(b & 0x7f) << shift;
		if (!(b & 0x80))
			return shift < 63 || b <= 1;
	}
	return false;
}

// For each row, a small dense number standing for its value in `keys`
// (rows with equal keys get equal numbers), so that DeltaBy keeps its
// "previous value" per key in a vector rather than a map per column.
std::vector<uint32_t> key_groups(const std::vector<uint64_t> &keys, size_t &groups)
{
	std::vector<uint32_t> out(keys.size());
	// Small keys (function ids) are their own numbers: no map at all.
	const uint64_t most = keys.empty() ? 0 : *std::max_element(keys.begin(), keys.end());
	if (most < 65536) {
		std::copy(keys.begin(), keys.end(), out.begin());
		groups = most + 1;
		return out;
	}
	std::unordered_map<uint64_t, uint32_t> ids;
	uint64_t last_key = 0;
	uint32_t last_id = UINT32_MAX;
	for (size_t r = 0; r < keys.size(); r++) {
		if (last_id == UINT32_MAX || keys[r] != last_key) {
			last_id = ids.try_emplace(keys[r], static_cast<uint32_t>(ids.size())).first->second;
			last_key = keys[r];
		}
		out[r] = last_id;
	}
	groups = ids.size();
	return out;
}

// Writes one column's rows at p by its coding (room for 10 bytes a row);
// returns past them. `groups` is the key column's key_groups for DeltaBy.
uint8_t *put_column(uint8_t *p, const std::vector<uint64_t> &col, Coding coding, const std::vector<uint32_t> &groups,
		    size_t n_groups)
{
	switch (coding) {
	case Coding::Plain:
		for (uint64_t v : col)
			p = put_varint(p, v);
		return p;
	case Coding::Signed:
		for (uint64_t v : col)
			p = put_varint(p, zigzag(v));
		return p;
	case Coding::Delta: {
		uint64_t prev = 0;
		for (uint64_t v : col) {
			p = put_varint(p, zigzag(v - prev));
			prev = v;
		}
		return p;
	}
	case Coding::DeltaBy: {
		std::vector<uint64_t> prev(n_groups, 0);
		for (size_t r = 0; r < col.size(); r++) {
			p = put_varint(p, zigzag(col[r] - prev[groups[r]]));
			prev[groups[r]] = col[r];
		}
		return p;
	}
	case Coding::Const: return put_varint(p, col[0]);
	}
	return p;
}

bool constant(const std::vector<uint64_t> &col)
{
	return !col.empty() && std::all_of(col.begin(), col.end(), [&](uint64_t v) { return v == col[0]; });
}

bool valid_coding(uint64_t c) { return c <= static_cast<uint64_t>(Coding::Const); }

// The header's own check: crc32 (zlib) of every byte before it, 4 bytes
// little-endian. The frame after it carries zstd's checksum of the payload,
// so any byte of a block altered on disk is an error, not other values.
uint32_t header_crc(std::string_view head)
{
	return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef *>(head.data()), head.size()));
}

} // namespace

BlockEncoder::BlockEncoder(int level) : cctx_(ZSTD_createCCtx())
{
	if (cctx_ &&
	    (ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level)) ||
	     ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1)))) {
		ZSTD_freeCCtx(cctx_);
		cctx_ = nullptr;
	}
}
BlockEncoder::~BlockEncoder() { ZSTD_freeCCtx(cctx_); }

Result<std::string> BlockEncoder::encode(const Columns &cols, const std::vector<ColumnCoding> &codings)
{
	if (!cctx_)
		return make_error(ErrorKind::NoSpace,
				  "cannot encode a block: zstd could not make a compression context (out of memory)");
	if (cols.size() != codings.size() || cols.empty() || cols.size() > kMaxBlockColumns)
		return make_error(ErrorKind::Other,
				  "block encoder: " + std::to_string(cols.size()) + " columns and " +
					  std::to_string(codings.size()) + " codings (1 to 64 columns, a coding each)");
	const size_t rows = cols[0].size();
	if (rows > kMaxBlockRows)
		return make_error(ErrorKind::Other,
				  "block encoder: " + std::to_string(rows) + " rows, more than a block holds");
	std::string head;
	head.push_back(static_cast<char>(kBlockVersion));
	put_varint(head, rows);
	put_varint(head, cols.size());
	// Key groups are made once per key column, however many columns use it.
	std::vector<std::vector<uint32_t>> groups(cols.size());
	std::vector<size_t> n_groups(cols.size(), 0);
	// Grown, never shrunk: resizing a string up again zeroes what it grows.
	if (payload_.size() < rows * cols.size() * 10)
		payload_.resize(rows * cols.size() * 10);
	auto *const begin = reinterpret_cast<uint8_t *>(payload_.data());
	auto *p = begin;
	for (size_t c = 0; c < cols.size(); c++) {
		auto [coding, key] = codings[c];
		if (cols[c].size() != rows || coding == Coding::Const || !valid_coding(static_cast<uint64_t>(coding)) ||
		    (coding == Coding::DeltaBy && key >= c))
			return make_error(
				ErrorKind::Other,
				"block encoder: column " + std::to_string(c) +
					" is malformed (rows unequal, a DeltaBy key that is not an earlier column, or"
					" Const asked for: that one is the encoder's choice)");
		if (constant(cols[c]))
			coding = Coding::Const; // an unused argument slot, a block's one pid: one value
		head.push_back(static_cast<char>(coding));
		head.push_back(static_cast<char>(coding == Coding::DeltaBy ? key : 0));
		if (coding == Coding::DeltaBy && groups[key].empty())
			groups[key] = key_groups(cols[key], n_groups[key]);
		p = put_column(p, cols[c], coding, groups[key], n_groups[key]);
	}
	const size_t payload = payload_len_ = size_t(p - begin);
	put_varint(head, payload);
	const uint32_t crc = header_crc(head);
	for (int i = 0; i < 4; i++)
		head.push_back(static_cast<char>(crc >> (8 * i)));
	std::string blob = std::move(head);
	const size_t at = blob.size();
	blob.resize(at + ZSTD_compressBound(payload));
	size_t z = ZSTD_compress2(cctx_, blob.data() + at, blob.size() - at, payload_.data(), payload);
	if (ZSTD_isError(z))
		return make_error(ErrorKind::Other, std::string("cannot compress a block: ") + ZSTD_getErrorName(z));
	blob.resize(at + z);
	return blob;
}

BlockDecoder::BlockDecoder() : dctx_(ZSTD_createDCtx()) {}
BlockDecoder::~BlockDecoder() { ZSTD_freeDCtx(dctx_); }

namespace {

// Reads one column of `rows` values from the payload at p; false if it ends
// early. `groups` is the key column's key_groups for DeltaBy.
bool get_column(const uint8_t *&p, const uint8_t *end, std::vector<uint64_t> &col, size_t rows, Coding coding,
		const std::vector<uint32_t> &groups, size_t n_groups)
{
	col.resize(rows);
	if (coding == Coding::Const) {
		uint64_t v;
		if (!get_varint(p, end, v))
			return false;
		std::fill(col.begin(), col.end(), v);
		return true;
	}
	uint64_t prev = 0;
	std::vector<uint64_t> prev_by(coding == Coding::DeltaBy ? n_groups : 0, 0);
	for (size_t r = 0; r < rows; r++) {
		uint64_t v;
		if (!get_varint(p, end, v))
			return false;
		switch (coding) {
		case Coding::Plain: col[r] = v; break;
		case Coding::Signed: col[r] = unzigzag(v); break;
		case Coding::Delta: col[r] = prev += unzigzag(v); break;
		case Coding::DeltaBy: {
			uint64_t &last = prev_by[groups[r]];
			col[r] = last += unzigzag(v);
			break;
		}
		case Coding::Const: break; // read above
		}
	}
	return true;
}

} // namespace

Result<void> BlockDecoder::decode(std::string_view blob, Columns &out)
{
	auto bad = [](const std::string &what) {
		return make_error(ErrorKind::BadInput, "not a valid span block: " + what);
	};
	if (!dctx_)
		return make_error(ErrorKind::NoSpace,
				  "cannot decode a block: zstd could not make a context (out of memory)");
	const auto *p = reinterpret_cast<const uint8_t *>(blob.data());
	const auto *end = p + blob.size();
	if (p == end || *p != kBlockVersion)
		return bad(p == end ? "empty" : "version " + std::to_string(*p) + ", this eacgm reads version 1");
	p++;
	uint64_t rows, n_cols, raw;
	if (!get_varint(p, end, rows) || !get_varint(p, end, n_cols) || rows > kMaxBlockRows || n_cols == 0 ||
	    n_cols > kMaxBlockColumns)
		return bad("its row or column count is missing or out of range");
	codings_.resize(n_cols);
	for (size_t c = 0; c < n_cols; c++) {
		if (end - p < 2 || !valid_coding(p[0]) || (p[0] == uint8_t(Coding::DeltaBy) && p[1] >= c))
			return bad("column " + std::to_string(c) + "'s coding");
		codings_[c] = {static_cast<Coding>(p[0]), p[1]};
		p += 2;
	}
	// Each value is 1 to 10 bytes; a payload outside that cannot be ours,
	// and bounding it bounds what a hostile blob makes us allocate.
	if (!get_varint(p, end, raw) || raw > (rows + 1) * n_cols * 10)
		return bad("its payload size");
	if (end - p < 4)
		return bad("its header check is missing");
	const uint32_t crc = p[0] | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
	if (crc != header_crc(blob.substr(0, p - reinterpret_cast<const uint8_t *>(blob.data()))))
		return bad("its header does not match its check (the file was altered or torn)");
	p += 4;
	unsigned long long framed = ZSTD_getFrameContentSize(p, end - p);
	if (framed != raw)
		return bad("its compressed frame does not hold the payload it declares");
	payload_.resize(raw);
	size_t got = ZSTD_decompressDCtx(dctx_, payload_.data(), raw, p, end - p);
	if (ZSTD_isError(got) || got != raw)
		return bad(ZSTD_isError(got) ? ZSTD_getErrorName(got) : "a short frame");
	const auto *q = reinterpret_cast<const uint8_t *>(payload_.data());
	const auto *qend = q + raw;
	out.resize(n_cols);
	std::vector<std::vector<uint32_t>> groups(n_cols);
	std::vector<size_t> n_groups(n_cols, 0);
	for (size_t c = 0; c < n_cols; c++) {
		const auto [coding, key] = codings_[c];
		if (coding == Coding::DeltaBy && groups[key].empty())
			groups[key] = key_groups(out[key], n_groups[key]);
		if (!get_column(q, qend, out[c], rows, coding, groups[key], n_groups[key]))
			return bad("column " + std::to_string(c) + " ends early");
	}
	if (q != qend)
		return bad("bytes after its last column");
	return {};
}

} // namespace eacgm
