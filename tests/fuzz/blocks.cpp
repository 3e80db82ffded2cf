// SPDX-License-Identifier: Apache-2.0
// The columnar store's block codec (store/blocks.h): a block is read back
// from a recording file, which a crash may have torn and anyone may have
// written. The first byte picks what the rest is:
//   0: a blob, decoded as it is;
//   1: a header's bytes (the next byte says how many) and a payload, made
//      into a blob with a true header crc and zstd frame, so that the fuzzer
//      reaches the header's bounds and the columns' varints past the
//      checksums; what decodes must encode and decode to the same columns;
//   2: columns (1 to 8, their codings, then 8-byte values), encoded and
//      decoded: they must come back exactly.
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "store/blocks.h"

using namespace eacgm;

namespace {

void round_trip(const Columns &cols, const std::vector<ColumnCoding> &codings)
{
	static BlockEncoder enc;
	static BlockDecoder dec;
	auto blob = enc.encode(cols, codings);
	if (!blob)
		std::abort(); // every call here is well formed
	Columns back;
	if (!dec.decode(*blob, back) || back != cols)
		std::abort();
}

std::string framed(const uint8_t *head, size_t head_size, const uint8_t *payload, size_t size)
{
	std::string blob(reinterpret_cast<const char *>(head), head_size);
	const uint32_t crc = static_cast<uint32_t>(crc32(0, head, head_size));
	for (int i = 0; i < 4; i++)
		blob.push_back(static_cast<char>(crc >> (8 * i)));
	static ZSTD_CCtx *cctx = [] {
		ZSTD_CCtx *c = ZSTD_createCCtx();
		ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
		return c;
	}();
	const size_t at = blob.size();
	blob.resize(at + ZSTD_compressBound(size));
	size_t z = ZSTD_compress2(cctx, blob.data() + at, blob.size() - at, payload, size);
	if (ZSTD_isError(z))
		std::abort();
	blob.resize(at + z);
	return blob;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	static BlockDecoder dec;
	Columns cols;
	switch (data[0] % 3) {
	case 0: (void)dec.decode(std::string_view(reinterpret_cast<const char *>(data + 1), size - 1), cols); return 0;
	case 1: {
		const size_t head = std::min<size_t>(data[1], size - 2);
		if (dec.decode(framed(data + 2, head, data + 2 + head, size - 2 - head), cols)) {
			auto codings = dec.codings(); // Const is the encoder's to choose
			for (auto &c : codings)
				if (c.coding == Coding::Const)
					c.coding = Coding::Plain;
			round_trip(cols, codings);
		}
		return 0;
	}
	default: {
		const size_t n_cols = 1 + data[1] % 8;
		if (size < 2 + n_cols)
			return 0;
		std::vector<ColumnCoding> codings(n_cols);
		for (size_t c = 0; c < n_cols; c++) {
			auto coding = static_cast<Coding>(data[2 + c] % 4); // Const is the encoder's choice
			codings[c] = {c == 0 && coding == Coding::DeltaBy ? Coding::Plain : coding,
				      static_cast<uint8_t>(c ? (data[2 + c] >> 2) % c : 0)};
		}
		const size_t rows = (size - 2 - n_cols) / 8 / n_cols;
		cols.assign(n_cols, std::vector<uint64_t>(rows));
		const uint8_t *v = data + 2 + n_cols;
		for (size_t r = 0; r < rows; r++)
			for (size_t c = 0; c < n_cols; c++, v += 8)
				std::memcpy(&cols[c][r], v, 8);
		round_trip(cols, codings);
		return 0;
	}
	}
}
