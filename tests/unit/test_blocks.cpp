// SPDX-License-Identifier: Apache-2.0
// The block codec (src/store/blocks.h): every coding gives back exactly what
// it was given, the codings shrink what they are meant to, and a blob that is
// torn, altered or hostile is an error, never a crash or a wrong answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "store/blocks.h"

using namespace eacgm;

namespace {

Columns round_trip(const Columns &cols, const std::vector<ColumnCoding> &codings, size_t *size = nullptr)
{
	BlockEncoder enc;
	auto blob = enc.encode(cols, codings);
	EXPECT_TRUE(blob) << blob.error().message;
	if (!blob)
		return {};
	if (size)
		*size = blob->size();
	BlockDecoder dec;
	Columns out;
	auto r = dec.decode(*blob, out);
	EXPECT_TRUE(r) << r.error().message;
	EXPECT_EQ(dec.codings().size(), codings.size());
	// Each column as asked, or Const where all its rows are one value.
	for (size_t c = 0; c < codings.size() && c < dec.codings().size(); c++) {
		const bool constant = !cols[c].empty() &&
			std::count(cols[c].begin(), cols[c].end(), cols[c][0]) == static_cast<long>(cols[c].size());
		EXPECT_EQ(dec.codings()[c].coding, constant ? Coding::Const : codings[c].coding) << "column " << c;
		if (!constant && codings[c].coding == Coding::DeltaBy) {
			EXPECT_EQ(dec.codings()[c].key, codings[c].key);
		}
	}
	return out;
}

} // namespace

TEST(Blocks, EveryCodingGivesBackItsValuesExactly)
{
	// The extremes of each coding: zero, one, the largest u64 (as int64, -1),
	// INT64_MIN and INT64_MAX, whose differences wrap.
	const std::vector<uint64_t> edge = {0, 1, UINT64_MAX, 0x8000000000000000ull, 0x7fffffffffffffffull, 42, 0};
	std::vector<uint64_t> keys = {7, 9, 7, 7, 9, 1000000007, 9};
	Columns cols = {keys, edge, edge, edge, edge};
	std::vector<ColumnCoding> codings = {
		{Coding::Plain}, {Coding::Plain}, {Coding::Signed}, {Coding::Delta}, {Coding::DeltaBy, 0}};
	EXPECT_EQ(round_trip(cols, codings), cols);
}

TEST(Blocks, RandomColumnsRoundTripUnderEveryCoding)
{
	std::mt19937_64 rng(37);
	for (int trial = 0; trial < 50; trial++) {
		size_t rows = trial % 10 == 0 ? rng() % 3 : rng() % 3000, n_cols = 1 + rng() % 12;
		Columns cols(n_cols, std::vector<uint64_t>(rows));
		std::vector<ColumnCoding> codings(n_cols);
		for (size_t c = 0; c < n_cols; c++) {
			// Small, wide, and key-like columns, mixed.
			const uint64_t mask = c % 3 == 0 ? 7 : c % 3 == 1 ? UINT64_MAX : 0xffff;
			for (auto &v : cols[c])
				v = rng() & mask;
			auto coding = static_cast<Coding>(rng() % 4);
			if (coding == Coding::DeltaBy && c == 0)
				coding = Coding::Delta;
			codings[c] = {coding, static_cast<uint8_t>(c ? rng() % c : 0)};
		}
		ASSERT_EQ(round_trip(cols, codings), cols) << "trial " << trial;
	}
}

TEST(Blocks, AColumnOfOneValueIsWrittenOnce)
{
	// 60,000 rows: an id counting up and seven slots no function used
	// (zero) or one pid. The constant columns cost a varint each.
	const size_t rows = 60000;
	Columns cols(8, std::vector<uint64_t>(rows, 0));
	for (size_t r = 0; r < rows; r++)
		cols[0][r] = r;
	std::fill(cols[7].begin(), cols[7].end(), 123456789);
	std::vector<ColumnCoding> codings(8, {Coding::DeltaBy, 0});
	codings[0] = {Coding::Delta};
	size_t size = 0;
	EXPECT_EQ(round_trip(cols, codings, &size), cols);
	EXPECT_LT(size, 200u);
}

TEST(Blocks, AnEmptyBlockRoundTrips)
{
	Columns cols(3);
	EXPECT_EQ(round_trip(cols, {{Coding::Plain}, {Coding::Delta}, {Coding::DeltaBy, 1}}), cols);
}

// What the codings are for: a thread's start times, keyed by its tid, cost
// a byte or two whatever the clock reads; pointer arguments keyed by the
// function that took them, likewise. The same values written plain (and
// then compressed as well) take several times the room.
TEST(Blocks, DeltasByKeyShrinkInterleavedClocks)
{
	const size_t rows = kMaxBlockRows;
	Columns cols(3, std::vector<uint64_t>(rows));
	std::mt19937_64 rng(1);
	uint64_t clock[4] = {1'000'000'000'000, 2'000'000'000'000, 3'000'000'000'000, 4'000'000'000'000};
	for (size_t r = 0; r < rows; r++) {
		uint64_t tid = 4000 + rng() % 4;
		clock[tid - 4000] += 500 + rng() % 200;
		cols[0][r] = tid;
		cols[1][r] = clock[tid - 4000];
		cols[2][r] = clock[tid - 4000];
	}
	size_t by_key = 0, plain = 0;
	EXPECT_EQ(round_trip({cols[0], cols[1]}, {{Coding::Plain}, {Coding::DeltaBy, 0}}, &by_key),
		  Columns({cols[0], cols[1]}));
	EXPECT_EQ(round_trip({cols[0], cols[2]}, {{Coding::Plain}, {Coding::Plain}}, &plain),
		  Columns({cols[0], cols[2]}));
	// The tid column is about 2 bits a row after zstd; a delta of 500-700
	// is 2 varint bytes with about 8 bits of entropy.
	EXPECT_LT(by_key, rows * 2);
	EXPECT_GT(plain, by_key * 2);
}

TEST(Blocks, TheEncoderRefusesMalformedColumns)
{
	BlockEncoder enc;
	EXPECT_FALSE(enc.encode({}, {}));
	EXPECT_FALSE(enc.encode({{1, 2}, {3}}, {{Coding::Plain}, {Coding::Plain}}));         // unequal rows
	EXPECT_FALSE(enc.encode({{1, 2}}, {{Coding::Plain}, {Coding::Plain}}));              // a coding too many
	EXPECT_FALSE(enc.encode({{1, 2}, {3, 4}}, {{Coding::Plain}, {Coding::DeltaBy, 1}})); // key not earlier
	EXPECT_FALSE(enc.encode({{1}}, {{static_cast<Coding>(9)}}));
	EXPECT_FALSE(enc.encode({{1, 1}}, {{Coding::Const}})); // the encoder's choice, not the caller's
	EXPECT_FALSE(enc.encode(Columns(65, std::vector<uint64_t>(1)), std::vector<ColumnCoding>(65)));
}

TEST(Blocks, EveryTruncationAndEveryBitFlippedIsCaught)
{
	Columns cols = {{5, 5, 6, 5}, {100, 200, 300, 400}, {UINT64_MAX, 0, 1, 2}};
	BlockEncoder enc;
	auto blob = enc.encode(cols, {{Coding::Plain}, {Coding::DeltaBy, 0}, {Coding::Signed}});
	ASSERT_TRUE(blob);
	BlockDecoder dec;
	Columns out;
	for (size_t n = 0; n < blob->size(); n++) {
		auto r = dec.decode(std::string_view(*blob).substr(0, n), out);
		EXPECT_FALSE(r) << "a blob cut at " << n << " of " << blob->size() << " bytes decoded";
		if (!r) {
			EXPECT_NE(r.error().message.find("not a valid span block"), std::string::npos)
				<< r.error().message;
		}
	}
	// Every bit flipped anywhere is caught, by the header's bounds and crc
	// or by zstd's frame checks and checksum, and never gives other values.
	// The one bit that decodes is the one zstd's format leaves unused (bit 4
	// of the frame header's descriptor): it changes nothing.
	size_t decoded = 0;
	for (size_t i = 0; i < blob->size(); i++)
		for (unsigned bit = 0; bit < 8; bit++) {
			std::string bad = *blob;
			bad[i] = static_cast<char>(bad[i] ^ (1u << bit));
			if (dec.decode(bad, out)) {
				decoded++;
				EXPECT_EQ(out, cols) << "byte " << i << " bit " << bit << " flipped gave other values";
			}
		}
	EXPECT_EQ(decoded, 1u);
}

TEST(Blocks, AHostileHeaderCannotMakeItAllocate)
{
	// A million rows of 64 columns declared in a blob of 5 bytes: refused
	// before anything is sized by it.
	std::string blob = {char(kBlockVersion), char(0x80), char(0x80), char(0x40), char(64)};
	BlockDecoder dec;
	Columns out;
	auto r = dec.decode(blob, out);
	ASSERT_FALSE(r);
	EXPECT_TRUE(out.empty());
	EXPECT_FALSE(dec.decode(std::string(1, char(2)), out)); // a version this eacgm does not read
	EXPECT_NE(dec.decode(std::string(1, char(2)), out).error().message.find("version 2"), std::string::npos);
}
