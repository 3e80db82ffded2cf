// SPDX-License-Identifier: Apache-2.0
// The layer table (common/layers.h): what the agent decides by a layer's
// name comes from its row, so a new spec layer is one row plus its JSON.
#include <gtest/gtest.h>

#include <vector>

#include "common/layers.h"
#include "probe/spec.h"

using namespace eacgm;

namespace {

// The built-in table with one layer more, from its row alone: collective,
// made of probes (tests/unit/data/layers/ring.json).
std::vector<Layer> with_ring()
{
	std::vector<Layer> t(kLayers.begin(), kLayers.end());
	t.push_back(Layer{"ring", Source::spec, Collective::yes, Joiner::none, Timing::measured, Throttle::yes});
	return t;
}

Result<SpecSet> test_spec(const std::string &layer)
{
	if (layer == "ring")
		return load_spec_file(SOURCE_DIR "/tests/unit/data/layers/ring.json", false);
	return load_builtin_spec(layer);
}

} // namespace

TEST(Layers, TheBuiltInTableIsTheCliList)
{
	EXPECT_EQ(layer_names(), (std::vector<std::string>{"cuda", "nccl", "gloo", "torch", "python", "gpu", "host"}));
	EXPECT_EQ(layer_names(Source::spec), (std::vector<std::string>{"cuda", "nccl", "gloo", "torch"}));
	EXPECT_TRUE(is_collective(layer::nccl));
	EXPECT_TRUE(is_collective(layer::gloo));
	EXPECT_FALSE(is_collective(layer::torch));
	EXPECT_EQ(joiner_of(layer::nccl), Joiner::nccl_communicators);
	EXPECT_EQ(joiner_of(layer::python), Joiner::python_functions);
	EXPECT_EQ(joiner_of(layer::cuda), Joiner::none);
	EXPECT_TRUE(may_be_estimated(layer::python));
	EXPECT_FALSE(may_throttle(layer::python));
	EXPECT_FALSE(takes_python_stack(layer::python));
	EXPECT_TRUE(takes_python_stack(layer::torch));
}

// A --spec file's own layer has no row: a plain layer.
TEST(Layers, ALayerNoRowNamesIsAPlainOne)
{
	EXPECT_EQ(find_layer("mylib"), nullptr);
	EXPECT_FALSE(is_collective("mylib"));
	EXPECT_EQ(joiner_of("mylib"), Joiner::none);
	EXPECT_FALSE(may_be_estimated("mylib"));
	EXPECT_TRUE(may_throttle("mylib"));
	EXPECT_TRUE(takes_python_stack("mylib"));
}

TEST(Layers, AnUnknownLayerIsBadInputThatListsTheTable)
{
	auto r = check_layers({"cuda", "rnig"});
	ASSERT_FALSE(r.ok());
	EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(r.error().message, "unknown layer 'rnig'; choose from cuda,nccl,gloo,torch,python,gpu,host");
	EXPECT_TRUE(check_layers({"cuda", "host"}).ok());
}

// The row and the JSON are all a new spec layer needs: it is a layer to
// choose, its probes load with the others' in the table's order, and what
// its row says holds (a collective, its calls typed, throttled, timed).
TEST(Layers, ASpecLayerIsOneRowPlusItsJson)
{
	const auto table = with_ring();
	ASSERT_FALSE(check_layers({"ring"}).ok());
	ASSERT_TRUE(check_layers({"ring", "cuda"}, table).ok());
	EXPECT_EQ(layer_names(Source::spec, table),
		  (std::vector<std::string>{"cuda", "nccl", "gloo", "torch", "ring"}));

	auto only = load_layer_specs({"ring"}, table, test_spec);
	ASSERT_TRUE(only.ok()) << only.error().message;
	ASSERT_EQ(only->probes.size(), 1u);
	EXPECT_EQ(only->probes[0].layer, "ring");
	EXPECT_EQ(only->probes[0].function, "ring_allreduce");

	auto both = load_layer_specs({"ring", "cuda"}, table, test_spec);
	ASSERT_TRUE(both.ok()) << both.error().message;
	auto cuda = load_builtin_spec("cuda");
	ASSERT_TRUE(cuda.ok());
	ASSERT_EQ(both->probes.size(), cuda->probes.size() + 1);
	EXPECT_EQ(both->probes.front().layer, "cuda"); // the table's order, not the choice's
	EXPECT_EQ(both->probes.back().layer, "ring");

	EXPECT_TRUE(is_collective("ring", table));
	EXPECT_EQ(joiner_of("ring", table), Joiner::none);
	EXPECT_TRUE(may_throttle("ring", table));
	EXPECT_FALSE(may_be_estimated("ring", table));
	EXPECT_TRUE(takes_python_stack("ring", table));

	// Not chosen, not loaded; a layer of another source loads no spec.
	auto none = load_layer_specs({"python", "gpu"}, table, test_spec);
	ASSERT_TRUE(none.ok());
	EXPECT_TRUE(none->probes.empty());
}
