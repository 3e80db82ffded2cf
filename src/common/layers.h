// SPDX-License-Identifier: Apache-2.0
// The layers eacgm traces, one row each: everything the agent decides by a
// layer's name is a column here, read through the functions below, so that
// a new layer is one row plus its code (a spec layer: one row plus
// specs/NAME.json). A row names every column: Layer has no default
// constructor and one argument per column, each of a type of its own, so a
// row that leaves one out, or swaps two, does not compile
// (tests/compile/layer_row.cpp holds the build to it). What a column selects
// in code (a joiner, a collector) is an enumerator switched on by its owner
// with no default, so an enumerator added is a -Werror warning wherever it
// is not handled.
//
// Data only, below every folder: the probes, the pipeline, the sinks and
// the detector all read it.
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm {

// Where a layer's data comes from.
enum class Source {
	spec,   // probes on a library's functions, from specs/NAME.json
	python, // the Python tracer: frames sampled, and the eval loop's entry probe (layers/python.h)
	gpu,    // NVML, sampled from user space (layers/gpu.h)
	host,   // the host collector's BPF programs and /proc (layers/host.h)
};

// Its calls are collectives: one call per rank of a group for each round,
// matched across ranks (pipeline/collectives.h), and time spent in one may
// be a wait for a late peer (detect/rootcause.cpp).
enum class Collective : bool { no, yes };

// The pass its calls go through on their way to the sinks (pipeline/
// record_loop.cpp); none: they stay typed, as decode made them.
enum class Joiner {
	none,
	nccl_communicators, // rank, nranks and seq from the communicator's init (layers/nccl.h)
	python_functions,   // the eval loop's entries become Python function spans (pipeline/python_join.h)
};

// Whether its spans' durations are measured at both ends of the call, or
// estimated (the Python layer's function spans made from stack samples;
// those its entry probe timed say so with kExactArg).
enum class Timing : bool { measured, estimated };

// Whether the overhead budget may throttle its probes (app/overhead.cpp).
// The Python layer's entry probes stay: a scaled estimate of an exact
// Python span means nothing.
enum class Throttle : bool { no, yes };

struct Layer {
	consteval Layer(std::string_view name, Source source, Collective collective, Joiner joiner, Timing timing,
			Throttle throttle)
		: name(name), source(source), collective(collective == Collective::yes), joiner(joiner),
		  estimated(timing == Timing::estimated), throttled(throttle == Throttle::yes)
	{}

	std::string_view name;
	Source source;
	bool collective;
	Joiner joiner;
	bool estimated; // its spans' durations may be estimates (Timing::estimated)
	bool throttled; // the overhead budget may throttle its probes
};

using LayerTable = std::span<const Layer>;

// The layers' names by which code refers to one: a misspelt name is a
// compile error, not a layer that never matches.
namespace layer {
inline constexpr const char *cuda = "cuda", *nccl = "nccl", *gloo = "gloo", *torch = "torch", *python = "python",
			    *gpu = "gpu", *host = "host";
} // namespace layer

// In the order the CLI lists them (--help, errors).
inline constexpr std::array kLayers = {
	Layer{layer::cuda, Source::spec, Collective::no, Joiner::none, Timing::measured, Throttle::yes},
	Layer{layer::nccl, Source::spec, Collective::yes, Joiner::nccl_communicators, Timing::measured, Throttle::yes},
	Layer{layer::gloo, Source::spec, Collective::yes, Joiner::none, Timing::measured, Throttle::yes},
	Layer{layer::torch, Source::spec, Collective::no, Joiner::none, Timing::measured, Throttle::yes},
	Layer{layer::python, Source::python, Collective::no, Joiner::python_functions, Timing::estimated, Throttle::no},
	Layer{layer::gpu, Source::gpu, Collective::no, Joiner::none, Timing::measured, Throttle::yes},
	Layer{layer::host, Source::host, Collective::no, Joiner::none, Timing::measured, Throttle::yes},
};

// The row of a layer; null for a layer no row names (a --spec file's own).
const Layer *find_layer(std::string_view name, LayerTable table = kLayers);
// Every layer's name, in the table's order.
std::vector<std::string> layer_names(LayerTable table = kLayers);
// Those whose source is `source`, in the table's order.
std::vector<std::string> layer_names(Source source, LayerTable table = kLayers);

// Every layer named is one of the table's; else a BadInput error that names
// it and lists the table's.
Result<void> check_layers(const std::vector<std::string> &names, LayerTable table = kLayers);

// A layer's columns by name; a layer no row names (a --spec file's own) is
// a plain one: not collective, no joiner, measured, throttled.
bool is_collective(std::string_view layer, LayerTable table = kLayers);
Joiner joiner_of(std::string_view layer, LayerTable table = kLayers);
bool may_be_estimated(std::string_view layer, LayerTable table = kLayers);
bool may_throttle(std::string_view layer, LayerTable table = kLayers);
// Whether its probes take the Python stack at a call's entry: all but the
// Python tracer's own (an eval loop's entry is itself a Python function
// call, nested among the others by time: bpf/span.bpf.c).
bool takes_python_stack(std::string_view layer, LayerTable table = kLayers);

} // namespace eacgm
