#include "ingest/python_spans.h"

#include <algorithm>

namespace eacgm {

namespace {

bool same_function(const PyFrame &a, const PyFrame &b)
{
	return a.first_line == b.first_line && a.qualname == b.qualname && a.filename == b.filename;
}

struct Open {
	PyFrame frame;
	uint64_t start, last, children = 0;
	bool exact_start = false;
};

} // namespace

std::vector<Span> python_function_spans(uint32_t pid, uint32_t tid, const std::vector<PyStackSample> &samples)
{
	std::vector<Span> out;
	std::vector<Open> open; // outermost first
	auto close_from = [&](size_t depth, bool exact_end) {
		while (open.size() > depth) {
			Open o = open.back();
			open.pop_back();
			Span s;
			s.pid = pid;
			s.tid = tid;
			s.layer = "python";
			s.name = o.frame.qualname;
			s.start_ns = o.start;
			s.dur_ns = o.last - o.start;
			s.depth = open.size();
			s.args = {{"file", o.frame.filename}, {"line", o.frame.first_line},
				  {"self_ns", s.dur_ns - std::min(s.dur_ns, o.children)}};
			if (o.exact_start && exact_end && open.size() == depth)
				s.args["exact"] = true;
			if (!open.empty())
				open.back().children += s.dur_ns;
			out.push_back(std::move(s));
		}
	};
	for (const PyStackSample &smp : samples) {
		size_t n = smp.frames.size();
		size_t common = 0;
		while (common < open.size() && common < n && same_function(open[common].frame, smp.frames[n - 1 - common]))
			common++;
		if (smp.boundary == PyStackSample::kCallStart && n > 0)
			common = std::min(common, n - 1); // a new call, even of the function that just ran
		// A call with a measured start is open until its measured end: a
		// sample that disagrees (read while a frame was being linked) is
		// wrong, not the call.
		if (smp.boundary == PyStackSample::kNone) {
			size_t exact = 0;
			for (size_t d = 0; d < open.size(); d++)
				if (open[d].exact_start)
					exact = d + 1;
			if (common < exact)
				continue;
		}
		close_from(common, false);
		for (auto &o : open)
			o.last = smp.ts_ns;
		for (size_t d = common; d < n; d++)
			open.push_back({smp.frames[n - 1 - d], smp.ts_ns, smp.ts_ns,
					0, d == n - 1 && smp.boundary == PyStackSample::kCallStart});
		if (smp.boundary == PyStackSample::kCallEnd && n > 0 && open.size() >= n)
			close_from(n - 1, true);
	}
	close_from(0, false);
	return out;
}

std::vector<std::string> format_py_stack(const std::vector<PyFrame> &frames)
{
	std::vector<std::string> out;
	for (auto &f : frames) {
		if (f.filename.empty()) { // the "..." of a cut stack
			out.push_back(f.qualname);
			continue;
		}
		std::string file = f.filename.substr(f.filename.rfind('/') + 1);
		out.push_back(f.qualname + " (" + file + ":" + std::to_string(f.line) + ")");
	}
	return out;
}

} // namespace eacgm
