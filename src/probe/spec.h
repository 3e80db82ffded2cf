// SPDX-License-Identifier: Apache-2.0
// Probe specs: which functions of which library to trace, and which of their
// arguments to keep and how to print them. Adding a probe is data, not code:
// the generic span program in bpf/span.bpf.c reads a compiled spec per call.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/layers.h"
#include "common/result.h"
#include "eacgm/abi/events.h"

namespace eacgm {

enum class ArgType { U64, I64, U32, I32, Ptr, Bytes, Dim3, Enum, Symbol, Tensor };

struct ArgSpec {
	std::string name;
	ArgType type = ArgType::U64;
	uint8_t slot = 0;                 // the argument word (src/arch places it), or EACGM_SLOT_RESULT
	uint8_t source = EACGM_ARG_ENTRY; // enum eacgm_arg_source
	uint16_t offset = 0;              // for deref sources; a tensor's dimension count
	uint16_t offset2 = 0;             // the second level's (DEREF2); a tensor's dtype
	std::string enum_name;            // ArgType::Enum
	// An enum's width in bytes (1, 2, 4 or 8; 0: a C enum's 4): a field
	// read as 8 bytes shares them with its neighbours.
	uint8_t size = 0;
	// ArgType::Tensor: the first tensor of a `std::vector<at::Tensor>&`
	// (spec type "tensor_list") rather than a `const at::Tensor&`.
	bool tensor_list = false;
	// Offsets named rather than given ("ProcessGroupGloo.collectiveCounter_"):
	// a member of a library's class, whose place changes between its
	// versions; the layer that knows the library's version resolves them
	// from the spec's "layouts" when it attaches (reads_layout()).
	std::string offset_field, offset2_field;
};

// The work a call hands to another call of a layer in the same process
// (spec key "issues", one rule per such call): torch's
// ProcessGroupGloo::allreduce enqueues what gloo's allreduce runs on a worker
// thread (the same process group context and sequence number) and what the
// caller's Work::wait waits for (the Work it returned). The two are one when
// the arguments named in `by` are equal in both: the other call is then given
// the issuing call's arguments it lacks (dtype, reduce op), its Python stack
// and its start, thread and name (args issued_ns, issued_tid, issued_by). See
// pipeline/issues.h.
struct IssueRule {
	std::string layer;
	std::vector<std::string> by;
};

// bytes = value of the `count` argument x the element size of the `element`
// argument: its enum value's size (NCCL: count x sizeof(datatype)), or its
// value when it is an integer (gloo: elements x elementSize).
struct BytesRule {
	std::string count;
	std::string element;
};

// After a call that returned 0, the value of argument `handle` stands for the
// function in symbol argument `target`, in that process (spec key "alias"): CUDA 12+
// launches a kernel by the handle __cudaGetKernel made for its host stub.
// Indexes into ProbeSpec::args.
struct AliasRule {
	size_t handle = 0;
	size_t target = 0;
};

struct ProbeSpec {
	std::string layer;                // "cuda", "nccl", "torch", or a user layer
	std::string library;              // glob on the file name, or an absolute path
	std::string function;             // name shown in traces; with `match`, a template ($1..$9)
	std::vector<std::string> symbols; // raw ELF names to attach (first found per address)
	std::string match;                // regex over demangled names: one probe per function found
	std::vector<ArgSpec> args;
	std::optional<BytesRule> bytes; // else: the first "bytes" argument
	std::optional<AliasRule> alias;
	int tensor_args = 0; // with `match`: keep up to this many leading tensors (torch)
	// The call waits on other processes (a collective, a wait on one): in
	// flight past --hang-after, it is reported as a hang (spec key "waits").
	bool waits = false;
	// Returns a class by value, through a hidden pointer to the caller's
	// storage (spec key "result_pointer"): the args' slots count the
	// declared arguments (`this` first) and "slot": "result" is that
	// pointer; parsing places them for the processor (src/arch).
	bool result_pointer = false;
	std::vector<IssueRule> issues;
	std::string returns = "i64"; // "void", "i32", "i64", "u64", "ptr" or an enum name
	std::string origin;          // file the spec came from, for messages
	bool user = false;           // from --spec: a missing symbol is an error
};

using EnumTable = std::map<int64_t, std::string>;

struct SpecSet {
	std::vector<ProbeSpec> probes;
	std::map<std::string, EnumTable> enums;
	std::map<std::string, std::map<int64_t, uint64_t>> sizes; // enum name -> value -> bytes
	// torch "major.minor" -> where a TensorImpl keeps its dimension count
	// and its dtype (checked per version with scripts/torch-layout.py).
	std::map<std::string, std::pair<uint16_t, uint16_t>> tensor_layouts;
	// torch "major.minor" -> named offsets of its classes' members
	// ("ProcessGroupGloo.contexts_": 120), for arguments that name them.
	std::map<std::string, std::map<std::string, uint16_t>> layouts;

	void merge(SpecSet other);
};

// Parses a spec document (JSON). `origin` names it in messages. Syntax errors
// report line and column.
// The index of the first probe of `function` in s.probes; s.probes.size()
// where none is.
size_t probe_index(const SpecSet &s, std::string_view function);

Result<SpecSet> parse_spec(const std::string &text, const std::string &origin, bool user);
Result<SpecSet> load_spec_file(const std::string &path, bool user);

// A file of specs/ ("cuda.json"), searched next to the binary's install and
// in the source tree it was built from.
Result<std::string> find_builtin_file(const std::string &name);
// The built-in spec file for a layer ("cuda" -> specs/cuda.json).
Result<SpecSet> load_builtin_spec(const std::string &layer);

// The built-in specs of the layers in `chosen` that the table says are made
// of probes (Source::spec), merged in the table's order; `load` reads one
// layer's (a test's may read its own files).
Result<SpecSet> load_layer_specs(const std::vector<std::string> &chosen, LayerTable table = kLayers,
				 const std::function<Result<SpecSet>(const std::string &)> &load = load_builtin_spec);

// Whether a spec's return type is an enum's name (its values have names),
// not one of the plain types: void, i32, i64, u64, ptr.
bool returns_enum(const std::string &returns);
// How many bytes of the return register a return type holds: 8 (i64, u64, ptr), 4 (i32, an
// enum), 0 (void).
int return_width(const std::string &returns);

// Lowers one probe to what the BPF side reads: a dim3 becomes two slots,
// its layer the flags the BPF side acts on (EACGM_PROBE_*, from the layer
// table). Fails when it needs more than EACGM_MAX_ARGS slots.
Result<eacgm_probe_spec> compile_probe(const ProbeSpec &p);

// The number of BPF argument slots an argument occupies.
int arg_width(const ArgSpec &a);

// Whether a probe's arguments depend on the version of the library it
// attaches to (tensors, named offsets): the layer resolves them per file.
bool reads_layout(const ProbeSpec &p);

// True when `file_name` (a base name) matches the spec's library glob.
bool library_matches(const ProbeSpec &p, const std::string &path);
// The same for a spec's `library` value.
bool library_matches(const std::string &library, const std::string &path);
// The distinct `library` values of specs: hundreds of specs (one per
// operator a pattern found) name a handful of libraries, and a torch
// process maps hundreds of files, so each file is tested against these.
std::vector<std::string> distinct_libraries(const std::vector<ProbeSpec> &probes);
bool any_library_matches(const std::vector<std::string> &libraries, const std::string &path);

// The text every match of an ECMAScript regular expression must start with,
// when the expression is anchored (^) and begins with literal characters:
// "^at::_ops::(mm|addmm)::call" -> "at::_ops::". Empty when there is none
// (not anchored, a top-level alternative, a metacharacter first). A cheap
// test that rules out most of a library's symbols before std::regex runs
// (libtorch_cpu exports about 34,000: std::regex over all of them was the
// top function in a profile of attaching to a torch process).
std::string anchored_literal_prefix(const std::string &re);

// The probe for one function a `match` pattern found: `function` with $1..$9
// replaced by the pattern's groups, `symbols` = {raw}, no pattern.
ProbeSpec expand_match(const ProbeSpec &pattern, const std::string &raw, const std::string &demangled);

} // namespace eacgm
