// SPDX-License-Identifier: Apache-2.0
// A block of rows kept column by column in one compressed blob: the unit in
// which the columnar store (issue 37, docs/span-path-plan.md) keeps spans.
// A row is a fixed number of 64-bit values; each column is turned into small
// integers by its coding (a delta from the row before, or from the last row
// with the same key, so that a thread's start times or a function's pointer
// arguments become a few bytes), written as varints, and the whole payload
// compressed with zstd (level 1: its fastest; bench_block_codec compares it
// with its other levels and with zlib on real recordings). The codec knows nothing of spans: the store maps its
// fields to columns.
//
// The blob (all integers varints but the first byte):
//   version (1 byte, kBlockVersion), rows, columns,
//   per column: coding, key column (meaningful for DeltaBy only),
//   payload size before compression, the crc32 of all the above (4 bytes),
//   then one zstd frame of the payload (with zstd's checksum): column 0's
//   rows, column 1's rows, ...
// The decoder trusts none of it: every count is bounded and checked against
// the frame, and both checksums are checked, so a torn, altered or hostile
// blob is an error, never a crash or other values (the fuzz target
// tests/fuzz/blocks.cpp holds it to that).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace eacgm {

// How a column's values are written before compression.
enum class Coding : uint8_t {
	Plain = 0,   // as unsigned varints: small non-negative numbers (ids, counts, durations)
	Signed = 1,  // zigzag varints: values read as int64 (a return of -1 takes one byte)
	Delta = 2,   // the zigzag difference from the row before (an id counting up, a clock)
	DeltaBy = 3, // the zigzag difference from the last row with the same value in column `key`
		     // (a thread's start times keyed by tid; a function's arguments keyed by function)
	Const = 4    // every row the same value, written once: the encoder's own choice for such a
		     // column (an argument slot no function of the block uses, a block's one pid)
};
constexpr uint8_t kBlockVersion = 1;
constexpr size_t kMaxBlockRows = 1 << 16; // so a hostile header asks for 32 MiB at most
constexpr size_t kMaxBlockColumns = 64;

struct ColumnCoding {
	Coding coding = Coding::Plain;
	uint8_t key = 0; // DeltaBy: a column before this one
};

// Rows as columns: cols[c][r]. Every column has the same number of rows.
using Columns = std::vector<std::vector<uint64_t>>;

class BlockEncoder {
public:
	// level: zstd's (1, its fastest, is the store's; bench_block_codec
	// compares others).
	explicit BlockEncoder(int level = 1);
	~BlockEncoder();
	BlockEncoder(const BlockEncoder &) = delete;
	BlockEncoder &operator=(const BlockEncoder &) = delete;

	// The blob of these columns. An error for a malformed call (columns of
	// unequal length, too many rows or columns, a DeltaBy key that is not
	// an earlier column, Const asked for) or a compressor failure; nothing
	// is kept between calls but buffers.
	Result<std::string> encode(const Columns &cols, const std::vector<ColumnCoding> &codings);

	// The payload of the last encode() before compression (the varints):
	// what bench_block_codec gives other compressors to compare.
	std::string_view payload() const { return {payload_.data(), payload_len_}; }

private:
	ZSTD_CCtx_s *cctx_;
	std::string payload_; // its first payload_len_ bytes
	size_t payload_len_ = 0;
};

class BlockDecoder {
public:
	BlockDecoder();
	~BlockDecoder();
	BlockDecoder(const BlockDecoder &) = delete;
	BlockDecoder &operator=(const BlockDecoder &) = delete;

	// The columns of a blob encode() made, into `out` (its buffers reused
	// from call to call). An error, naming what is wrong, for anything else.
	Result<void> decode(std::string_view blob, Columns &out);
	// The codings the last decode read (Const where the encoder chose it).
	const std::vector<ColumnCoding> &codings() const { return codings_; }

private:
	ZSTD_DCtx_s *dctx_;
	std::string payload_;
	std::vector<ColumnCoding> codings_;
};

} // namespace eacgm
