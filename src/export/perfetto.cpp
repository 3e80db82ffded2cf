#include "export/perfetto.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "common/fs.h"

namespace eacgm {

using nlohmann::json;

namespace {

json span_event(const Span &s)
{
	json args = s.args.is_object() ? s.args : json::object();
	if (s.ret_name.empty())
		args["ret"] = s.ret;
	else
		args["ret"] = s.ret_name;
	if (s.bytes != 0)
		args["bytes"] = s.bytes;
	if (!s.py_stack.empty())
		args["python"] = s.py_stack;
	return {
		{"ph", "X"},
		{"name", s.name},
		{"cat", s.layer},
		{"ts", static_cast<double>(s.start_ns) / 1000.0},
		{"dur", static_cast<double>(s.dur_ns) / 1000.0},
		{"pid", s.pid},
		{"tid", s.tid},
		{"args", std::move(args)},
	};
}

json name_event(const char *kind, uint32_t pid, uint32_t tid, const std::string &name)
{
	return {{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid},
		{"args", {{"name", name}}}};
}

} // namespace

std::string perfetto_json(const Recording &rec)
{
	json events = json::array();
	for (const Process &p : rec.processes)
		events.push_back(name_event("process_name", p.pid, p.pid,
					    p.comm + " (" + std::to_string(p.pid) + ")"));
	for (const Thread &t : rec.threads)
		events.push_back(name_event("thread_name", t.pid, t.tid, t.name));

	// Viewers nest complete events on a thread by order of appearance: a
	// parent must come before a child that starts at the same time, hence
	// longer first, then shallower first for spans identical in time.
	std::vector<size_t> order(rec.spans.size());
	std::iota(order.begin(), order.end(), 0);
	std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
		const Span &x = rec.spans[a], &y = rec.spans[b];
		return std::tie(x.pid, x.tid, x.start_ns, y.dur_ns, x.depth) <
		       std::tie(y.pid, y.tid, y.start_ns, x.dur_ns, y.depth);
	});
	for (size_t i : order)
		events.push_back(span_event(rec.spans[i]));

	json other = json::object();
	for (const auto &[k, v] : rec.meta)
		other[k] = v;
	other["clock"] = "CLOCK_MONOTONIC";
	other["wall_offset_ns"] = std::to_string(rec.wall_offset_ns);

	json doc = {
		{"traceEvents", std::move(events)},
		{"displayTimeUnit", "ns"},
		{"otherData", std::move(other)},
	};
	// replace: captured strings and process names may not be valid UTF-8.
	return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<void> write_perfetto(const Recording &rec, const std::string &path)
{
	return write_file_atomic(path, perfetto_json(rec));
}

} // namespace eacgm
