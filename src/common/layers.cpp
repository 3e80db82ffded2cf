// SPDX-License-Identifier: Apache-2.0
#include "common/layers.h"

#include "common/text.h"

namespace eacgm {

const Layer *find_layer(std::string_view name, LayerTable table)
{
	for (const Layer &l : table)
		if (l.name == name)
			return &l;
	return nullptr;
}

std::vector<std::string> layer_names(LayerTable table)
{
	std::vector<std::string> out;
	for (const Layer &l : table)
		out.emplace_back(l.name);
	return out;
}

std::vector<std::string> layer_names(Source source, LayerTable table)
{
	std::vector<std::string> out;
	for (const Layer &l : table)
		if (l.source == source)
			out.emplace_back(l.name);
	return out;
}

Result<void> check_layers(const std::vector<std::string> &names, LayerTable table)
{
	for (auto &n : names)
		if (!find_layer(n, table))
			return make_error(ErrorKind::BadInput,
					  "unknown layer '" + n + "'; choose from " + join(layer_names(table)));
	return {};
}

bool is_collective(std::string_view layer, LayerTable table)
{
	const Layer *l = find_layer(layer, table);
	return l && l->collective;
}

Joiner joiner_of(std::string_view layer, LayerTable table)
{
	const Layer *l = find_layer(layer, table);
	return l ? l->joiner : Joiner::none;
}

bool may_be_estimated(std::string_view layer, LayerTable table)
{
	const Layer *l = find_layer(layer, table);
	return l && l->estimated;
}

bool may_throttle(std::string_view layer, LayerTable table)
{
	const Layer *l = find_layer(layer, table);
	return !l || l->throttled;
}

bool takes_python_stack(std::string_view layer, LayerTable table)
{
	const Layer *l = find_layer(layer, table);
	return !l || l->source != Source::python;
}

} // namespace eacgm
