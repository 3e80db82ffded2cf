// SPDX-License-Identifier: Apache-2.0
// record --raw-dump's file (pipeline/raw_dump.h): the records and the
// probes come back as written, decode on them gives what it gave on the
// originals, and a cut, damaged or foreign file is an error that says so.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "layers/torch.h"
#include "pipeline/decode.h"
#include "pipeline/raw_dump.h"

using namespace eacgm;

namespace {

class RawDumpFile : public testing::Test {
protected:
	void SetUp() override
	{
		dir_ = testing::TempDir() + "/raw-dump-" + std::to_string(getpid());
		std::filesystem::create_directories(dir_);
	}
	void TearDown() override { std::filesystem::remove_all(dir_); }
	std::string dir_;
};

std::string read_all(const std::string &path)
{
	std::ifstream f(path, std::ios::binary);
	return {std::istreambuf_iterator<char>(f), {}};
}

void write_all(const std::string &path, const std::string &bytes)
{
	std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

TEST_F(RawDumpFile, RecordsAndProbesComeBackAndDecodeTheSame)
{
	SpecSet specs;
	for (const char *layer : {"cuda", "torch", "gloo"}) {
		auto s = load_builtin_spec(layer);
		ASSERT_TRUE(s) << s.error().message;
		specs.merge(std::move(*s));
	}
	std::mt19937_64 rng(1);
	std::vector<eacgm_span_event> spans;
	for (uint32_t i = 0; i < 500; i++) {
		eacgm_span_event e{.start_ns = rng(), .dur_ns = rng() >> 30, .tgid = 3, .tid = 4};
		e.spec_id = i % specs.probes.size();
		e.ret = rng();
		for (auto &a : e.args)
			a = i % 2 ? rng() : rng() % 64;
		spans.push_back(e);
	}
	const std::string path = dir_ + "/run.raw";
	{
		auto w = RawDumpWriter::create(path);
		ASSERT_TRUE(w) << w.error().message;
		for (const auto &e : spans)
			w->span(e);
		ASSERT_TRUE(w->close(specs));
	}
	auto d = read_raw_dump(path);
	ASSERT_TRUE(d) << d.error().message;
	ASSERT_EQ(d->spans.size(), spans.size());
	EXPECT_EQ(std::memcmp(d->spans.data(), spans.data(), spans.size() * sizeof spans[0]), 0);
	ASSERT_EQ(d->specs.probes.size(), specs.probes.size());
	Interner a, b;
	for (const auto &e : spans) {
		Span x = decode_span(e, specs.probes[e.spec_id], specs, nullptr, a, format_tensor);
		Span y = decode_span(e, d->specs.probes[e.spec_id], d->specs, nullptr, b, format_tensor);
		ASSERT_EQ(std::tie(y.layer, y.name, y.ret, y.ret_name, y.bytes),
			  std::tie(x.layer, x.name, x.ret, x.ret_name, x.bytes))
			<< x.name;
		ASSERT_EQ(y.args.dump(), x.args.dump()) << x.name;
	}
}

TEST_F(RawDumpFile, CutDamagedOrForeignFilesAreErrors)
{
	auto specs = load_builtin_spec("cuda");
	ASSERT_TRUE(specs);
	const std::string path = dir_ + "/run.raw";
	{
		auto w = RawDumpWriter::create(path);
		ASSERT_TRUE(w);
		eacgm_span_event e{.start_ns = 1, .dur_ns = 2, .tgid = 3, .tid = 4};
		w->span(e);
		w->span(e);
		ASSERT_TRUE(w->close(*specs));
	}
	const std::string good = read_all(path);
	auto error_of = [&](const std::string &bytes) {
		write_all(path, bytes);
		auto d = read_raw_dump(path);
		EXPECT_EQ(d ? ErrorKind::Other : d.error().kind, ErrorKind::BadInput) << bytes.size() << " bytes";
		return d ? std::string("no error") : d.error().message;
	};
	EXPECT_NE(error_of(good.substr(0, good.size() - 1)).find("no end"), std::string::npos);
	EXPECT_NE(error_of(good.substr(0, 40)).find("no end"), std::string::npos);
	EXPECT_NE(error_of("SQLite format 3" + good.substr(15)).find("no raw dump of this version"), std::string::npos);
	// A record's worth of bytes gone from the middle: the lengths disagree.
	std::string cut = good;
	cut.erase(17, 3);
	EXPECT_NE(error_of(cut).find("does not fit"), std::string::npos);
	// The probes' text damaged.
	std::string damaged = good;
	damaged[17 + 2 * sizeof(eacgm_span_event) + 1] = '#';
	EXPECT_NE(error_of(damaged).find("damaged"), std::string::npos);
	// A record naming a probe the dump does not have.
	std::string foreign = good;
	const uint32_t bad = 100000;
	std::memcpy(foreign.data() + 17 + offsetof(eacgm_span_event, spec_id), &bad, sizeof bad);
	EXPECT_NE(error_of(foreign).find("names probe 100000"), std::string::npos);
	EXPECT_NE(error_of("").find("no raw dump"), std::string::npos);
	write_all(path, good);
	EXPECT_TRUE(read_raw_dump(path));
	auto none = read_raw_dump(dir_ + "/none.raw");
	ASSERT_FALSE(none);
	EXPECT_EQ(none.error().message, "cannot open the raw dump " + dir_ + "/none.raw: No such file or directory");
	EXPECT_EQ(none.error().kind, ErrorKind::NotFound);
}
