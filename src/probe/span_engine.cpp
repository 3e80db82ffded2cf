#include "probe/span_engine.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <unistd.h>

#include "span.skel.h"

namespace eacgm {

static std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

Result<std::unique_ptr<SpanEngine>> SpanEngine::open(const Options &opts, int traced_map_fd)
{
	uint32_t rb = opts.ring_buffer_bytes;
	long page = sysconf(_SC_PAGESIZE);
	if (rb < (uint32_t)page || (rb & (rb - 1)))
		return make_error("ring buffer size " + std::to_string(rb) + " bytes is not a power of two of at least " +
				  std::to_string(page) + "; use --ring-buffer-kb 4, 8, 16, ...");
	std::unique_ptr<SpanEngine> e(new SpanEngine());
	e->skel_ = span_bpf__open();
	if (!e->skel_)
		return make_error("cannot open the span BPF object: " + errstr(errno));
	e->skel_->rodata->trace_all = opts.trace_all;
	e->skel_->rodata->wakeup_bytes = rb / 4;
	bpf_map__set_max_entries(e->skel_->maps.span_events, rb);
	if (traced_map_fd >= 0) {
		int err = bpf_map__reuse_fd(e->skel_->maps.traced_tgids, traced_map_fd);
		if (err)
			return make_error("cannot share the traced-process map: " + errstr(err));
	}
	int err = span_bpf__load(e->skel_);
	if (err)
		return make_error("cannot load the span BPF programs: " + errstr(err) +
				  " (run 'eacgm doctor' to check kernel support)");
	struct bpf_link *l = bpf_program__attach(e->skel_->progs.span_thread_exit);
	if (!l)
		return make_error("cannot attach the thread-exit tracepoint: " + errstr(errno));
	e->links_.push_back(l);
	return e;
}

SpanEngine::~SpanEngine()
{
	for (auto *l : links_)
		bpf_link__destroy(l);
	if (skel_)
		span_bpf__destroy(skel_);
}

Result<void> SpanEngine::set_spec(uint32_t spec_id, const eacgm_probe_spec &spec)
{
	if (spec_id >= EACGM_MAX_SPECS)
		return make_error("too many probe specs (at most " + std::to_string(EACGM_MAX_SPECS) + ")");
	int err = bpf_map__update_elem(skel_->maps.probe_specs, &spec_id, sizeof(spec_id), &spec, sizeof(spec), BPF_ANY);
	if (err)
		return make_error("cannot store probe spec: " + errstr(err));
	return {};
}

Result<void> SpanEngine::attach(const std::string &path, uint64_t file_offset, uint32_t spec_id)
{
	for (bool ret : {false, true}) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = spec_id, .retprobe = ret);
		struct bpf_program *prog = ret ? skel_->progs.span_exit : skel_->progs.span_entry;
		struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), file_offset, &o);
		if (!l)
			return make_error("cannot attach uprobe to " + path + " at offset " + std::to_string(file_offset) +
					  ": " + errstr(errno));
		links_.push_back(l);
	}
	return {};
}

size_t SpanEngine::threads_with_state() const
{
	size_t n = 0;
	uint32_t key, next;
	uint32_t *prev = nullptr;
	while (!bpf_map__get_next_key(skel_->maps.open_calls, prev, &next, sizeof(next))) {
		n++;
		key = next;
		prev = &key;
	}
	return n;
}

struct bpf_map *SpanEngine::events_map() const { return skel_->maps.span_events; }

std::array<uint64_t, EACGM_CNT_COUNT> SpanEngine::counters() const
{
	std::array<uint64_t, EACGM_CNT_COUNT> total{};
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0)
		return total;
	std::vector<uint64_t> per_cpu(ncpu);
	for (uint32_t k = 0; k < EACGM_CNT_COUNT; k++) {
		if (bpf_map__lookup_elem(skel_->maps.counters, &k, sizeof(k), per_cpu.data(),
					 per_cpu.size() * sizeof(uint64_t), 0))
			continue;
		for (auto v : per_cpu)
			total[k] += v;
	}
	return total;
}

} // namespace eacgm
