// SPDX-License-Identifier: Apache-2.0
#include "pipeline/intern.h"

namespace eacgm {

StrId Interner::id(std::string_view s)
{
	if (auto it = ids_.find(s); it != ids_.end())
		return it->second;
	texts_.emplace_back(s);
	const auto id = static_cast<StrId>(texts_.size());
	ids_.emplace(texts_.back(), id);
	return id;
}

const std::string &Interner::text(StrId id) const
{
	static const std::string none;
	return id && id <= texts_.size() ? texts_[id - 1] : none;
}

} // namespace eacgm
