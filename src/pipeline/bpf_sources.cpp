// SPDX-License-Identifier: Apache-2.0
#include "pipeline/bpf_sources.h"

#include <algorithm>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstddef>
#include <map>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/text.h"
#include "layers/python.h"
#include "probe/first_insn.h"

namespace eacgm {

Result<BpfRings> BpfRings::open(bpf_map *spans, bpf_map *procs, bpf_map *python)
{
	BpfRings r;
	r.s_ = std::make_unique<State>();
	State *s = r.s_.get();
	s->rb = ring_buffer__new(bpf_map__fd(spans), on_span, s, nullptr);
	if (!s->rb)
		return errno_error(errno, "cannot open the span ring buffer");
	if (ring_buffer__add(s->rb, bpf_map__fd(procs), on_proc, s))
		return errno_error(errno, "cannot open the process ring buffer");
	if (python && ring_buffer__add(s->rb, bpf_map__fd(python), on_py, s))
		return errno_error(errno, "cannot open the Python ring buffer");
	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->ep < 0)
		return errno_error(errno, "cannot make an epoll instance");
	for (bpf_map *m : {spans, procs, python}) {
		epoll_event ev{};
		ev.events = EPOLLIN | EPOLLET;
		if (m && epoll_ctl(s->ep, EPOLL_CTL_ADD, bpf_map__fd(m), &ev))
			return errno_error(errno, "cannot watch a ring buffer");
	}
	return r;
}

BpfRings::BpfRings(BpfRings &&o) noexcept : s_(std::move(o.s_)) {}

BpfRings::~BpfRings()
{
	if (s_ && s_->rb)
		ring_buffer__free(s_->rb);
	if (s_ && s_->ep >= 0)
		close(s_->ep);
}

int BpfRings::fd() const { return s_->ep; }

Result<int> BpfRings::consume(Records &to)
{
	// The wake-ups that made fd() readable are taken first: a ring woken
	// again while it is read stays readable for the next wait.
	epoll_event woken[3];
	(void)epoll_wait(s_->ep, woken, 3, 0);
	s_->to = &to;
	int n = ring_buffer__consume(s_->rb);
	s_->to = nullptr;
	if (n < 0 && n != -EINTR)
		return errno_error(-n, "reading the ring buffers failed");
	return std::max(n, 0);
}

int BpfRings::on_span(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(eacgm_span_event))
		static_cast<State *>(ctx)->to->span(*static_cast<const eacgm_span_event *>(data));
	return 0;
}

int BpfRings::on_proc(void *ctx, void *data, size_t size)
{
	if (size >= sizeof(eacgm_proc_event))
		static_cast<State *>(ctx)->to->proc(*static_cast<const eacgm_proc_event *>(data));
	return 0;
}

int BpfRings::on_py(void *ctx, void *data, size_t size)
{
	// A record holds as many frames as its kind may have (the stack behind
	// a span 16, a sample 64): only the header is always there.
	constexpr size_t head = offsetof(eacgm_py_stack_event, frames);
	if (size < head)
		return 0;
	const auto &e = *static_cast<const eacgm_py_stack_event *>(data);
	uint32_t n = std::min<uint32_t>(
		{e.nframes, EACGM_PY_MAX_FRAMES, static_cast<uint32_t>((size - head) / sizeof(eacgm_py_frame))});
	static_cast<State *>(ctx)->to->py(e, n);
	return 0;
}

// Probes placed after the start, on a library a process loaded (dlopen) or
// an exec'd program maps: said once per library, since calls made before
// this moment were not seen.
Probes::Scan BpfProbes::scan(uint32_t pid, const std::vector<Mapping> &maps)
{
	Scan out;
	size_t before = attacher_.attached().size();
	auto fresh = attacher_.scan_maps(pid, maps);
	if (fresh)
		for (auto &f : fresh.value())
			out.interpreter |= names_python_interpreter(f);
	else
		errors_.push_back(fresh.error().message);
	std::map<std::string, size_t> per_library;
	const auto &attached = attacher_.attached();
	for (size_t i = before; i < attached.size(); i++)
		per_library[attached[i].path]++;
	for (auto &[path, n] : per_library)
		out.notes.push_back("attached " + plural(n, "probe", "probes") + " to " + path + " (loaded by pid " +
				    std::to_string(pid) + ")");
	if (!per_library.empty())
		if (auto note = single_step_note(attacher_.sites(before)); !note.empty())
			out.notes.push_back("note: " + note);
	return out;
}

std::vector<std::string> BpfProbes::take_warnings()
{
	auto w = std::exchange(errors_, {});
	for (auto &a : attacher_.take_warnings())
		w.push_back(std::move(a));
	return w;
}

} // namespace eacgm
