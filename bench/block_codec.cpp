// SPDX-License-Identifier: Apache-2.0
// What the columnar store's block codec (src/store/blocks.h) makes of real
// recordings: bytes a span and spans a second, encoding and decoding, with
// zstd at levels 1, 3 and 9 and zlib beside it on the same varints.
//
// Each recording (schema v3, a row per span) is read back and its spans
// turned into the columns a block would hold: id, pid, tid, function, start,
// duration, depth, return, bytes, Python stack id, run-queue wait, and the
// arguments as up to 8 integer slots (numbers as they are, "0x..." pointers
// as their value, other strings and arrays' elements as interned ids), in
// blocks of one second of spans (the store's commit interval) or 65,536,
// whichever is less. The text of the names, strings and stacks is counted
// once (what the dictionary tables would hold). An estimate of what the
// store will write: the typed span it is to keep carries the same fields.
// Usage: bench_block_codec RECORDING.db...
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "store/blocks.h"
#include "store/store.h"

using namespace eacgm;
using clk = std::chrono::steady_clock;

namespace {

enum Col { Id, Pid, Tid, Fn, Start, Dur, Depth, Ret, Bytes, Stack, Runq, Arg0, NCols = Arg0 + 8 };

std::vector<ColumnCoding> codings()
{
	std::vector<ColumnCoding> c(NCols, {Coding::Plain});
	c[Id] = {Coding::Delta};
	c[Start] = {Coding::DeltaBy, Tid};
	c[Ret] = {Coding::Signed};
	for (int a = Arg0; a < NCols; a++)
		c[a] = {Coding::DeltaBy, Fn};
	return c;
}

struct Dict {
	std::unordered_map<std::string, uint64_t> ids;
	size_t text_bytes = 0;
	uint64_t id(const std::string &s)
	{
		auto [it, made] = ids.try_emplace(s, ids.size() + 1);
		if (made)
			text_bytes += s.size();
		return it->second;
	}
};

// The argument values of a span as integer slots, in its args' key order.
void arg_slots(const nlohmann::json &args, Dict &dict, std::vector<uint64_t> &slots)
{
	for (const auto &[k, v] : args.items()) {
		if (k == kRunqArg)
			continue;
		if (v.is_number_integer())
			slots.push_back(v.get<int64_t>());
		else if (v.is_number_unsigned())
			slots.push_back(v.get<uint64_t>());
		else if (v.is_number_float()) {
			double d = v.get<double>();
			uint64_t bits;
			std::memcpy(&bits, &d, 8);
			slots.push_back(bits);
		} else if (v.is_boolean())
			slots.push_back(v.get<bool>());
		else if (v.is_string() && v.get_ref<const std::string &>().rfind("0x", 0) == 0)
			slots.push_back(std::strtoull(v.get_ref<const std::string &>().c_str() + 2, nullptr, 16));
		else if (v.is_array())
			for (const auto &e : v)
				slots.push_back(e.is_number() ? e.get<int64_t>() : dict.id(e.dump()));
		else
			slots.push_back(dict.id(v.is_string() ? v.get<std::string>() : v.dump()));
	}
}

struct Recorded {
	std::vector<Columns> blocks;
	size_t spans = 0, dict_bytes = 0, overflow_args = 0;
};

Recorded read_blocks(const std::string &path)
{
	Recorded out;
	auto reader = RecordingReader::open(path);
	if (!reader) {
		fprintf(stderr, "bench_block_codec: %s\n", reader.error().message.c_str());
		exit(1);
	}
	Dict dict;
	std::map<const void *, uint64_t> stacks;
	Columns cur(NCols);
	uint64_t block_start = 0;
	std::vector<uint64_t> slots;
	auto r = reader->each_span(SpanOrder::as_recorded, [&](const Span &s) {
		if (!cur[Id].empty() && (s.start_ns > block_start + 1'000'000'000 || cur[Id].size() == 65536)) {
			out.blocks.push_back(std::move(cur));
			cur.assign(NCols, {});
		}
		if (cur[Id].empty())
			block_start = s.start_ns;
		uint64_t stack = 0;
		if (!s.py_stack.empty()) {
			auto [it, made] = stacks.try_emplace(&s.py_stack.frames(), stacks.size() + 1);
			stack = it->second;
			if (made)
				for (const auto &f : s.py_stack)
					out.dict_bytes += f.size() + 4;
		}
		slots.clear();
		arg_slots(s.args, dict, slots);
		if (slots.size() > 8)
			out.overflow_args++;
		slots.resize(8, 0);
		const uint64_t row[Arg0] = {out.spans++, s.pid,    s.tid,     dict.id(s.layer + "/" + s.name),
					    s.start_ns,  s.dur_ns, s.depth,   static_cast<uint64_t>(s.ret),
					    s.bytes,     stack,    runq_of(s)};
		for (int c = 0; c < Arg0; c++)
			cur[c].push_back(row[c]);
		for (int a = 0; a < 8; a++)
			cur[Arg0 + a].push_back(slots[a]);
	});
	if (!r) {
		fprintf(stderr, "bench_block_codec: %s\n", r.error().message.c_str());
		exit(1);
	}
	if (!cur[Id].empty())
		out.blocks.push_back(std::move(cur));
	out.dict_bytes += dict.text_bytes + 8 * dict.ids.size();
	return out;
}

double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

// Bytes of all blocks at a zstd level, and (timing) the median rate of 5
// rounds, encoding every block of the recording.
size_t zstd_bytes(const Recorded &rec, int level, double *rate)
{
	BlockEncoder enc(level);
	size_t total = 0;
	std::vector<double> rates;
	for (int round = 0; round < (rate ? 5 : 1); round++) {
		total = 0;
		auto t0 = clk::now();
		for (const auto &b : rec.blocks)
			total += enc.encode(b, codings()).value().size();
		rates.push_back(rec.spans / std::chrono::duration<double>(clk::now() - t0).count() / 1e6);
	}
	if (rate)
		*rate = median(rates);
	return total;
}

// The same varints through zlib's best: bytes, the varints' own size, and
// the rate of zlib alone (the varints made beforehand).
size_t zlib_bytes(const Recorded &rec, size_t *raw, double *rate)
{
	BlockEncoder enc;
	std::vector<std::string> payloads;
	for (const auto &b : rec.blocks) {
		(void)enc.encode(b, codings()).value();
		payloads.push_back(std::string(enc.payload()));
	}
	size_t total = 0;
	*raw = 0;
	auto t0 = clk::now();
	for (const auto &p : payloads) {
		uLongf n = compressBound(p.size());
		std::string z(n, '\0');
		compress2(reinterpret_cast<Bytef *>(z.data()), &n, reinterpret_cast<const Bytef *>(p.data()), p.size(),
			  Z_BEST_COMPRESSION);
		total += n;
		*raw += p.size();
	}
	*rate = rec.spans / std::chrono::duration<double>(clk::now() - t0).count() / 1e6;
	return total;
}

double decode_rate(const Recorded &rec)
{
	BlockEncoder enc;
	std::vector<std::string> blobs;
	for (const auto &b : rec.blocks)
		blobs.push_back(enc.encode(b, codings()).value());
	BlockDecoder dec;
	Columns out;
	std::vector<double> rates;
	for (int round = 0; round < 5; round++) {
		auto t0 = clk::now();
		for (const auto &b : blobs)
			if (!dec.decode(b, out))
				exit(1);
		rates.push_back(rec.spans / std::chrono::duration<double>(clk::now() - t0).count() / 1e6);
	}
	return median(rates);
}

} // namespace

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_block_codec RECORDING.db...\n");
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		Recorded rec = read_blocks(argv[i]);
		struct stat st {};
		stat(argv[i], &st);
		const double n = double(std::max<size_t>(rec.spans, 1));
		double enc1, dec1 = decode_rate(rec);
		size_t z1 = zstd_bytes(rec, 1, &enc1), z3 = zstd_bytes(rec, 3, nullptr),
		       z9 = zstd_bytes(rec, 9, nullptr);
		double zl_rate;
		size_t raw = 0, zl = zlib_bytes(rec, &raw, &zl_rate);
		printf("%s: %zu spans in %zu blocks; the v3 file %.0f bytes a span\n", argv[i], rec.spans,
		       rec.blocks.size(), st.st_size / n);
		printf("  varints alone %6.1f B/span\n", raw / n);
		printf("  zstd -1       %6.1f B/span  encode %5.2f M spans/s, decode %5.2f M spans/s\n", z1 / n, enc1,
		       dec1);
		printf("  zstd -3       %6.1f B/span\n", z3 / n);
		printf("  zstd -9       %6.1f B/span\n", z9 / n);
		printf("  zlib -9       %6.1f B/span  compress alone %5.2f M spans/s\n", zl / n, zl_rate);
		printf("  dictionaries  %6.1f B/span  (names, strings, stacks: text once)\n", rec.dict_bytes / n);
		if (rec.overflow_args)
			printf("  (%zu spans had more than 8 argument values; the rest were left out)\n",
			       rec.overflow_args);
	}
	return 0;
}
