// SPDX-License-Identifier: Apache-2.0
// Strings kept once per recording and known by a small id. The typed span
// path (pipeline/span.h) carries ids: a kernel's name, resolved once, is 4
// bytes in each of its million launches, and only the edges that show it
// (render_span, the store, the trace) look the text up.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

namespace eacgm {

using StrId = uint32_t; // 0: no string

class Interner {
public:
	// The id of s, made on its first use: ids count from 1 in that order,
	// and stay the text's for the interner's life.
	StrId id(std::string_view s);
	// The text of an id; "" for 0 or an id this interner did not make.
	const std::string &text(StrId id) const;
	// How many strings it holds (the largest id).
	size_t size() const { return texts_.size(); }

private:
	std::deque<std::string> texts_; // by id - 1; a deque, so that the views below stay valid
	std::unordered_map<std::string_view, StrId> ids_;
};

} // namespace eacgm
