// SPDX-License-Identifier: Apache-2.0
// Loads the real span engine in this test process, attaches it to functions
// of the test library (which this binary links) and collects what it emits.
#pragma once
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "probe/elf_symbols.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"

namespace eacgm::test {

inline std::string testlib_path() { return std::string(TESTPROGS_DIR) + "/libeacgm_testlib.so"; }

// The span records the engine's ring holds now.
inline std::vector<eacgm_span_event> collect_spans(const SpanEngine &engine)
{
	std::vector<eacgm_span_event> out;
	auto cb = [](void *ctx, void *data, size_t) {
		static_cast<std::vector<eacgm_span_event> *>(ctx)->push_back(*static_cast<eacgm_span_event *>(data));
		return 0;
	};
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(engine.events_map()), cb, &out, nullptr);
	EXPECT_NE(rb, nullptr);
	if (rb) {
		ring_buffer__consume(rb);
		ring_buffer__free(rb);
	}
	return out;
}

// Runs each test with uprobe_multi links (true) and per-function links (false).
class SpanFixture : public ::testing::TestWithParam<bool> {
protected:
	void open_engine(uint32_t ring_bytes = 1u << 20, bool track_self = true)
	{
		auto t = ProcTracker::open(false);
		ASSERT_TRUE(t.ok()) << t.error().message;
		tracker = std::move(t.value());
		SpanEngine::Options o;
		o.ring_buffer_bytes = ring_bytes;
		o.multi_link = GetParam();
		auto e = SpanEngine::open(o, tracker->traced_map_fd());
		ASSERT_TRUE(e.ok()) << e.error().message;
		engine = std::move(e.value());
		ASSERT_EQ(engine->multi_link(), GetParam()) << "this kernel has uprobe_multi (6.6+)";
		if (track_self) {
			ASSERT_TRUE(tracker->track(getpid()).ok());
		}
	}

	// Probes `symbol` of the test library with the given argument sources.
	void probe(uint32_t spec_id, const char *symbol, std::vector<eacgm_arg_spec> args = {})
	{
		auto elf = ElfFile::open(testlib_path());
		ASSERT_TRUE(elf.ok()) << elf.error().message;
		const ElfSymbol *s = elf->find(symbol);
		ASSERT_NE(s, nullptr) << symbol;
		auto off = elf->vaddr_to_offset(s->addr);
		ASSERT_TRUE(off.ok());
		eacgm_probe_spec spec{};
		spec.nargs = args.size();
		for (size_t i = 0; i < args.size(); i++)
			spec.args[i] = args[i];
		ASSERT_TRUE(engine->set_spec(spec_id, spec).ok());
		auto r = engine->attach(testlib_path(), {{off.value(), spec_id}});
		ASSERT_TRUE(r.ok()) << r.error().message;
	}

	std::vector<eacgm_span_event> collect() { return collect_spans(*engine); }

	static std::vector<eacgm_span_event> only(const std::vector<eacgm_span_event> &ev, uint32_t spec_id)
	{
		std::vector<eacgm_span_event> out;
		for (auto &e : ev)
			if (e.spec_id == spec_id)
				out.push_back(e);
		return out;
	}

	std::unique_ptr<ProcTracker> tracker;
	std::unique_ptr<SpanEngine> engine;
};

inline eacgm_arg_spec entry_arg(uint8_t slot) { return {EACGM_ARG_ENTRY, slot, 0, 0}; }

} // namespace eacgm::test
