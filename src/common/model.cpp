// SPDX-License-Identifier: Apache-2.0
#include "common/model.h"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace eacgm {

PyStack::PyStack(std::vector<std::string> frames)
{
	if (frames.empty())
		return;
	auto body = std::make_shared<Body>();
	body->json = nlohmann::json(frames).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
	body->frames = std::move(frames);
	body_ = std::move(body);
}

const std::vector<std::string> &PyStack::frames() const
{
	static const std::vector<std::string> none;
	return body_ ? body_->frames : none;
}

const std::string &PyStack::json() const
{
	static const std::string none = "[]";
	return body_ ? body_->json : none;
}

void to_json(nlohmann::json &j, const PyStack &s) { j = s.frames(); }

bool nests_before(const Span &x, const Span &y)
{
	return std::tie(x.pid, x.tid, x.start_ns, y.dur_ns, x.depth) <
		std::tie(y.pid, y.tid, y.start_ns, x.dur_ns, y.depth);
}

uint64_t runq_of(const Span &s)
{
	auto it = s.args.find(kRunqArg);
	return it != s.args.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

bool is_error_span(const Span &s) { return is_error_name(s.ret_name); }

bool is_error_name(const std::string &r)
{
	static const std::string ok = "success";
	if (r.size() < ok.size())
		return !r.empty();
	return !std::equal(ok.begin(), ok.end(), r.end() - static_cast<long>(ok.size()),
			   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

double weight_of(const Span &s)
{
	auto it = s.args.find(kWeightArg);
	return it != s.args.end() && it->is_number() ? it->get<double>() : 1.0;
}

} // namespace eacgm
