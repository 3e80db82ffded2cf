// SPDX-License-Identifier: Apache-2.0
// Probe spec parsing, lowering to the BPF layout, decoding of raw records.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "arch/arch.h"
#include "pipeline/decode.h"
#include "probe/spec.h"

namespace eacgm {
namespace {

Interner test_names; // the strings decode_span interns (symbol names)

const char *kSpec = R"({
  "layer": "mylib",
  "library": "libmy*.so*",
  "enums": {"kind_t": {"0": "Zero", "2": "Two"}, "err_t": {"0": "mySuccess", "35": "myNoDriver"}},
  "probes": [
    {"function": "launch", "symbols": ["launch", "launch_ptsz"],
     "args": [{"name": "k", "slot": 0, "type": "symbol"},
              {"name": "grid", "slot": 1, "type": "dim3"},
              {"name": "shm", "slot": 6, "type": "u64"},
              {"name": "kind", "slot": 7, "type": "enum", "enum": "kind_t"}],
     "returns": "err_t"},
    {"function": "alloc", "library": "/opt/lib/libother.so",
     "args": [{"name": "out", "slot": 0, "type": "ptr", "deref": "exit"},
              {"name": "size", "slot": 1, "type": "bytes"},
              {"name": "field", "slot": 2, "type": "i32", "deref": "entry", "offset": 16}]}
  ]
})";

TEST(Spec, ParsesProbesArgumentsAndEnums)
{
	auto s = parse_spec(kSpec, "my.json", true);
	ASSERT_TRUE(s.ok()) << s.error().message;
	ASSERT_EQ(s->probes.size(), 2u);
	const ProbeSpec &launch = s->probes[0];
	EXPECT_EQ(launch.layer, "mylib");
	EXPECT_EQ(launch.library, "libmy*.so*");
	EXPECT_EQ(launch.symbols, (std::vector<std::string>{"launch", "launch_ptsz"}));
	ASSERT_EQ(launch.args.size(), 4u);
	EXPECT_EQ(launch.args[1].type, ArgType::Dim3);
	EXPECT_EQ(launch.args[3].enum_name, "kind_t");
	EXPECT_EQ(launch.returns, "err_t");
	EXPECT_TRUE(launch.user);
	const ProbeSpec &alloc = s->probes[1];
	EXPECT_EQ(alloc.library, "/opt/lib/libother.so");
	EXPECT_EQ(alloc.symbols, (std::vector<std::string>{"alloc"}));
	EXPECT_EQ(alloc.args[0].source, EACGM_ARG_DEREF_EXIT);
	EXPECT_EQ(alloc.args[2].source, EACGM_ARG_DEREF_ENTRY);
	EXPECT_EQ(alloc.args[2].offset, 16);
	EXPECT_EQ(alloc.returns, "i64");
	EXPECT_EQ(s->enums.at("err_t").at(35), "myNoDriver");
}

TEST(Spec, Dim3TakesTwoSlotsWhenLowered)
{
	auto s = parse_spec(kSpec, "my.json", true);
	ASSERT_TRUE(s.ok());
	auto c = compile_probe(s->probes[0]);
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(c->flags, 0u); // a layer of its own: its calls take the Python stack
	ASSERT_EQ(c->nargs, 5u);
	uint8_t slots[] = {0, 1, 2, 6, 7};
	for (int i = 0; i < 5; i++) {
		EXPECT_EQ(c->args[i].slot, slots[i]) << i;
		EXPECT_EQ(c->args[i].source, EACGM_ARG_ENTRY);
	}
}

// A method returning a class by value ("result_pointer"): its slots count
// the declared arguments, `this` first, and "result" is the hidden pointer
// to the returned object, wherever the processor passes it.
TEST(Spec, AResultPointersFunctionHasItsArgumentsPlacedForTheProcessor)
{
	auto s = parse_spec(R"({"layer": "x", "library": "libx.so", "probes": [
	  {"function": "Group::send", "returns": "void", "result_pointer": true, "args": [
	    {"name": "self", "slot": 0, "type": "ptr"},
	    {"name": "tensors", "slot": 1, "type": "ptr"},
	    {"name": "work", "slot": "result", "type": "ptr", "deref": "exit", "offset": 0}]}]})",
			    "r.json", true);
	ASSERT_TRUE(s.ok()) << s.error().message;
	const uint8_t words = uint8_t(arch::native_rules().result_pointer_words); // x86-64 1, arm64 0
	auto &args = s->probes[0].args;
	EXPECT_EQ(args[0].slot, words);
	EXPECT_EQ(args[1].slot, words + 1);
	EXPECT_EQ(args[2].slot, EACGM_SLOT_RESULT);
	auto c = compile_probe(s->probes[0]);
	ASSERT_TRUE(c.ok()) << c.error().message;
	EXPECT_EQ(c->args[2].slot, EACGM_SLOT_RESULT);
	EXPECT_EQ(c->args[2].source, EACGM_ARG_DEREF_EXIT);

	// "result" where the function returns no class by value; a flag that is
	// not a boolean.
	auto no_flag = parse_spec(R"({"layer": "x", "library": "libx.so", "probes": [
	  {"function": "f", "args": [{"name": "w", "slot": "result", "type": "ptr"}]}]})",
				  "r.json", true);
	ASSERT_FALSE(no_flag.ok());
	EXPECT_EQ(no_flag.error().kind, ErrorKind::BadInput);
	EXPECT_EQ(no_flag.error().message,
		  "r.json: probe 'f' argument 'w': \"slot\": \"result\" is the hidden "
		  "result pointer of a function with \"result_pointer\": true");
	auto not_bool = parse_spec(R"({"layer": "x", "library": "libx.so", "probes": [
	  {"function": "f", "result_pointer": 1}]})",
				   "r.json", true);
	ASSERT_FALSE(not_bool.ok());
	EXPECT_EQ(not_bool.error().kind, ErrorKind::BadInput);
}

TEST(Spec, SyntaxErrorsNameLineAndColumn)
{
	auto s = parse_spec("{\n  \"layer\": \"x\",\n  \"probes\": [,]\n}", "bad.json", true);
	ASSERT_FALSE(s.ok());
	EXPECT_NE(s.error().message.find("bad.json: JSON syntax error at line 3, column 14"), std::string::npos)
		<< s.error().message;
	EXPECT_EQ(s.error().kind, ErrorKind::BadInput);
}

TEST(Spec, RejectsWhatCannotWork)
{
	struct Case {
		const char *json, *expect;
	} cases[] = {
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1,"type":"float"}]}]})",
		 "unknown type \"float\""},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":40}]}]})", "\"slot\" must be"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1,"type":"enum","enum":"nope"}]}]})",
		 "enum \"nope\" is not defined"},
		{R"({"probes":[{"function":"f"}]})", "no \"library\""},
		{R"({"library":"l","probes":[]})", "non-empty array"},
		{R"({"library":"l","probes":[{"function":"f","returns":"float"}]})", "\"returns\" must be"},
		{R"({"layer":"Bad Name","library":"l","probes":[{"function":"f"}]})", "\"layer\" must be"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"g","slot":1,"type":"dim3","deref":"exit"}]}]})",
		 "cannot be dereferenced"},
		{R"({"library":"l","probes":[{"function":"f","args":[
		   {"name":"a","slot":0,"type":"dim3"},{"name":"b","slot":2,"type":"dim3"},
		   {"name":"c","slot":4,"type":"dim3"},{"name":"d","slot":6,"type":"dim3"},
		   {"name":"e","slot":8}]}]})",
		 "more than 8 argument slots"},
		// Numbers past 32 bits, values of the wrong kind, numbers past a
		// double (each took the whole fuzz run down, or passed truncated).
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":4294967296}]}]})",
		 "\"slot\" must be"},
		{R"({"library":"l","probes":[{"function":"f","match":"^f","tensor_args":4294967296}]})",
		 "\"tensor_args\" is 0..3"},
		{R"({"library":"l","tensor_layouts":{"2.1":{"ndim":65536,"dtype":8}},"probes":[{"function":"f"}]})",
		 "tensor layout \"2.1\" must be"},
		{R"({"layer":[],"library":"l","probes":[{"function":"f"}]})", "\"layer\" must be a string"},
		{R"({"library":7,"probes":[{"function":"f"}]})", "\"library\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","library":{}}]})", "\"library\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","returns":0}]})", "\"returns\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","symbols":["f",{}]}]})", "\"symbols\" must be an array"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1,"type":2}]}]})",
		 "\"type\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1,"deref":true}]}]})",
		 "\"deref\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1,"type":"enum","enum":[]}]}]})",
		 "\"enum\" must be a string"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"n","slot":1}],"bytes":{"count":1,"element":"n"}}]})",
		 "\"bytes\" must be"},
		{R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":1e400}]}]})",
		 "JSON error: number overflow parsing '1e400'"},
	};
	for (auto &c : cases) {
		auto s = parse_spec(c.json, "t.json", true);
		ASSERT_FALSE(s.ok()) << c.json;
		EXPECT_NE(s.error().message.find(c.expect), std::string::npos) << s.error().message;
		EXPECT_EQ(s.error().message.rfind("t.json", 0), 0u) << "message names the file";
		EXPECT_EQ(s.error().kind, ErrorKind::BadInput) << c.json;
	}
}

// A spec that is not there, given or built in, is not found.
TEST(Spec, MissingFilesAreNotFound)
{
	auto given = load_spec_file("/nonexistent-eacgm/my.json", true);
	ASSERT_FALSE(given.ok());
	EXPECT_EQ(given.error().kind, ErrorKind::NotFound);
	EXPECT_EQ(given.error().message,
		  "cannot read spec file /nonexistent-eacgm/my.json: no such file or not readable");
	auto builtin = load_builtin_spec("nosuchlayer");
	ASSERT_FALSE(builtin.ok());
	EXPECT_EQ(builtin.error().kind, ErrorKind::NotFound); // find_builtin_file's, through the context
	EXPECT_EQ(builtin.error().message.rfind("no built-in spec for layer 'nosuchlayer': built-in nosuchlayer.json "
						"not found (looked in ",
						0),
		  0u)
		<< builtin.error().message;
}

TEST(Spec, LibraryGlobMatchesFileNames)
{
	ProbeSpec p;
	p.library = "libcudart.so*";
	EXPECT_TRUE(library_matches(p, "/usr/local/cuda/lib64/libcudart.so.13"));
	EXPECT_TRUE(library_matches(p, "/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"));
	EXPECT_FALSE(library_matches(p, "/usr/lib/libcudart_static.a"));
	p.library = "libcuda.so*";
	EXPECT_FALSE(library_matches(p, "/usr/local/cuda/lib64/libcudart.so.13"));
	EXPECT_TRUE(library_matches(p, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
	p.library = "/opt/x/libfoo.so";
	EXPECT_TRUE(library_matches(p, "/opt/x/libfoo.so"));
	EXPECT_FALSE(library_matches(p, "/opt/y/libfoo.so"));
}

TEST(Spec, BuiltinCudaSpecLoadsAndCoversTheRuntime)
{
	auto s = load_builtin_spec("cuda");
	ASSERT_TRUE(s.ok()) << s.error().message;
	std::set<std::string> names;
	for (auto &p : s->probes) {
		names.insert(p.function);
		EXPECT_TRUE(compile_probe(p).ok()) << p.function;
	}
	for (const char *f :
	     {"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
	      "cudaMemsetAsync", "cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize",
	      "cudaEventRecord", "cudaEventSynchronize", "cudaGraphLaunch", "cuLaunchKernel", "cuMemAlloc",
	      "cuMemcpyHtoD"})
		EXPECT_TRUE(names.count(f)) << f;
	EXPECT_EQ(s->enums.at("cudaError_t").at(35), "cudaErrorInsufficientDriver");
	EXPECT_EQ(s->enums.at("cudaMemcpyKind").at(1), "cudaMemcpyHostToDevice");
	EXPECT_EQ(s->enums.at("CUresult").at(0), "CUDA_SUCCESS");
	EXPECT_EQ(load_builtin_spec("nope").ok(), false);
}

TEST(Decode, TypesEnumsDim3AndBytes)
{
	auto s = parse_spec(kSpec, "my.json", true);
	ASSERT_TRUE(s.ok());
	eacgm_span_event e{};
	e.start_ns = 1000;
	e.dur_ns = 250;
	e.tgid = 42;
	e.tid = 43;
	e.depth = 2;
	e.ret = 0xffffffff00000023ull; // upper half of rax is garbage for an int enum
	e.args[0] = 0xdead;
	e.args[1] = (2ull << 32) | 4; // grid.x = 4, grid.y = 2
	e.args[2] = 1;                // grid.z
	e.args[3] = 256;
	e.args[4] = 2;
	Span sp = decode_span(e, s->probes[0], s.value(), nullptr, test_names);
	EXPECT_EQ(sp.name, "launch");
	EXPECT_EQ(sp.layer, "mylib");
	EXPECT_EQ(sp.pid, 42u);
	EXPECT_EQ(sp.tid, 43u);
	EXPECT_EQ(sp.depth, 2u);
	EXPECT_EQ(sp.ret, 35);
	EXPECT_EQ(sp.ret_name, "myNoDriver");
	EXPECT_EQ(sp.args["k"], "0xdead"); // no symbolizer: the address
	EXPECT_EQ(sp.args["grid"], nlohmann::json({4, 2, 1}));
	EXPECT_EQ(sp.args["shm"], 256);
	EXPECT_EQ(sp.args["kind"], "Two");
	EXPECT_EQ(sp.bytes, 0u);

	eacgm_span_event a{};
	a.args[0] = 0x7f0000001000;
	a.args[1] = 4096;
	a.args[2] = (uint64_t)-5;
	a.ret = (uint64_t)-1;
	Span al = decode_span(a, s->probes[1], s.value(), nullptr, test_names);
	EXPECT_EQ(al.args["out"], "0x7f0000001000");
	EXPECT_EQ(al.args["size"], 4096);
	EXPECT_EQ(al.args["field"], -5);
	EXPECT_EQ(al.bytes, 4096u);
	EXPECT_EQ(al.ret, -1);
	EXPECT_EQ(al.ret_name, "");

	e.ret = 7; // not in the enum
	e.args[4] = 9;
	Span unk = decode_span(e, s->probes[0], s.value(), nullptr, test_names);
	EXPECT_EQ(unk.ret_name, "err_t(7)");
	EXPECT_EQ(unk.args["kind"], "kind_t(9)");
}

} // namespace
} // namespace eacgm

namespace eacgm {
namespace {

TEST(Spec, PatternProbesExpandWithNameTemplates)
{
	auto s = parse_spec(R"({"layer":"torch","library":"libtorch_cpu.so*","probes":[
	  {"function":"aten::$1","match":"^at::_ops::(linear|addmm)::call\\(","returns":"void"}]})",
			    "t.json", false);
	ASSERT_TRUE(s.ok()) << s.error().message;
	const ProbeSpec &pat = s->probes[0];
	EXPECT_EQ(pat.match, "^at::_ops::(linear|addmm)::call\\(");
	ProbeSpec p = expand_match(pat, "_ZN2at4_ops6linear4callERKNS_6TensorES4_RKN3c108optionalIS2_EE",
				   "at::_ops::linear::call(at::Tensor const&, at::Tensor const&, "
				   "c10::optional<at::Tensor> const&)");
	EXPECT_EQ(p.function, "aten::linear");
	EXPECT_EQ(p.symbols,
		  (std::vector<std::string>{"_ZN2at4_ops6linear4callERKNS_6TensorES4_RKN3c108optionalIS2_EE"}));
	EXPECT_TRUE(p.match.empty());
	EXPECT_EQ(p.returns, "void");
	EXPECT_EQ(p.layer, "torch");
}

TEST(Spec, PatternErrors)
{
	auto bad = parse_spec(R"({"library":"l","probes":[{"function":"f","match":"(unclosed"}]})", "t.json", true);
	ASSERT_FALSE(bad.ok());
	EXPECT_NE(bad.error().message.find("not a valid regular expression"), std::string::npos);
	auto both = parse_spec(R"({"library":"l","probes":[{"function":"f","match":"x","symbols":["y"]}]})", "t.json",
			       true);
	ASSERT_FALSE(both.ok());
	EXPECT_NE(both.error().message.find("excludes \"symbols\""), std::string::npos);
}

TEST(Spec, UnknownKeysAreReportedWithTheKnownOnes)
{
	auto s = parse_spec(R"({"library":"l","probes":[{"function":"f","retruns":"i32"}]})", "t.json", true);
	ASSERT_FALSE(s.ok());
	EXPECT_EQ(s.error().message,
		  "t.json: probe 'f': unknown key \"retruns\" (known: function, library, symbols, "
		  "match, args, bytes, alias, returns, tensor_args, waits, result_pointer, issues, about)");
	auto arg =
		parse_spec(R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":0,"kind":"x"}]}]})",
			   "t.json", true);
	ASSERT_FALSE(arg.ok());
	EXPECT_NE(arg.error().message.find("unknown key \"kind\""), std::string::npos);
}

TEST(Decode, BytesAreCountTimesElementSize)
{
	auto s = load_builtin_spec("nccl");
	ASSERT_TRUE(s.ok()) << s.error().message;
	const ProbeSpec *ar = nullptr;
	for (auto &p : s->probes)
		if (p.function == "ncclAllReduce")
			ar = &p;
	ASSERT_NE(ar, nullptr);
	// ncclDataType_t value -> element size, as in nccl.h.
	const uint64_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
	for (uint64_t t = 0; t < 12; t++) {
		eacgm_span_event e{};
		e.args[2] = 1000 + t; // count
		e.args[3] = t;        // datatype
		e.args[4] = 2;        // op
		Span sp = decode_span(e, *ar, s.value(), nullptr, test_names);
		EXPECT_EQ(sp.bytes, (1000 + t) * sizes[t]) << t;
		EXPECT_EQ(sp.args["op"], "ncclMax");
	}
	eacgm_span_event unknown{};
	unknown.args[2] = 10;
	unknown.args[3] = 99; // a datatype this NCCL does not have
	Span sp = decode_span(unknown, *ar, s.value(), nullptr, test_names);
	EXPECT_EQ(sp.bytes, 0u);
	EXPECT_EQ(sp.args["datatype"], "ncclDataType_t(99)");
}

// gloo's options: a two-level read (options -> context -> rank) lowers to
// DEREF2 with both offsets, and bytes are elements x an integer element size.
TEST(Spec, TwoLevelOffsetsAndAnIntegerElementSize)
{
	auto s = parse_spec(R"({"library":"l","probes":[{"function":"f","args":[
	  {"name":"rank","slot":0,"type":"i32","deref":"entry","offset":[0,8]},
	  {"name":"n","slot":0,"deref":"entry","offset":80},
	  {"name":"size","slot":0,"deref":"entry","offset":88}],
	  "bytes":{"count":"n","element":"size"}}]})",
			    "t.json", true);
	ASSERT_TRUE(s.ok()) << s.error().message;
	const ProbeSpec &p = s->probes[0];
	EXPECT_EQ(p.args[0].source, EACGM_ARG_DEREF2_ENTRY);
	EXPECT_EQ(p.args[0].offset, 0);
	EXPECT_EQ(p.args[0].offset2, 8);
	EXPECT_EQ(p.args[1].source, EACGM_ARG_DEREF_ENTRY);
	EXPECT_EQ(p.args[1].offset, 80);
	auto c = compile_probe(p);
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(c->args[0].source, EACGM_ARG_DEREF2_ENTRY);
	EXPECT_EQ(c->args[0].offset, 0);
	EXPECT_EQ(c->args[0].offset2, 8);
	eacgm_span_event e{};
	e.args[0] = 0xffffffff; // rank -1, read as an i32 from 8 bytes
	e.args[1] = 1000;
	e.args[2] = 4;
	Span sp = decode_span(e, p, s.value(), nullptr, test_names);
	EXPECT_EQ(sp.bytes, 4000u);
	EXPECT_EQ(sp.args["rank"], -1);

	// A 32-bit size: the other half of the 8 bytes read is not its; a
	// negative one moves nothing.
	auto s32 = parse_spec(R"({"library":"l","probes":[{"function":"f","args":[
	  {"name":"n","slot":0},{"name":"size","slot":1,"type":"i32"}],
	  "bytes":{"count":"n","element":"size"}}]})",
			      "t.json", true);
	ASSERT_TRUE(s32.ok()) << s32.error().message;
	eacgm_span_event e32{};
	e32.args[0] = 10;
	e32.args[1] = 0x1234567800000008ull;
	EXPECT_EQ(decode_span(e32, s32->probes[0], s32.value(), nullptr, test_names).bytes, 80u);
	e32.args[1] = 0xffffffffull; // -1
	EXPECT_EQ(decode_span(e32, s32->probes[0], s32.value(), nullptr, test_names).bytes, 0u);

	struct Case {
		const char *offset, *deref, *expect;
	} bad[] = {
		{"[0,8]", "exit", "a two-level \"offset\" is read at \"entry\" only"},
		{"[0,8,16]", "entry",
		 "\"offset\" must be a number 0..65535 or a \"Class.member\" named in \"layouts\", or two of them"},
		{"\"Class.\"", "entry", "\"offset\" must be a number"},
		{"70000", "entry", "\"offset\" must be a number"},
		{"\"8\"", "entry", "\"offset\" must be a number"},
	};
	for (auto &b : bad) {
		std::string json =
			std::string(
				R"({"library":"l","probes":[{"function":"f","args":[{"name":"a","slot":0,"deref":")") +
			b.deref + R"(","offset":)" + b.offset + "}]}]}";
		auto r = parse_spec(json, "t.json", true);
		ASSERT_FALSE(r.ok()) << json;
		EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << r.error().message;
	}
}

// The built-in gloo spec reads each collective's options as gloo's header lays
// them out; a 2-rank job checks the values end to end (e2e test_gloo).
TEST(Spec, BuiltinGlooSpecKeepsRankSizeCountAndSeq)
{
	auto s = load_builtin_spec("gloo");
	ASSERT_TRUE(s.ok()) << s.error().message;
	std::map<std::string, const ProbeSpec *> by_name;
	for (auto &p : s->probes)
		by_name[p.function] = &p;
	for (const char *f :
	     {"allreduce", "broadcast", "reduce", "allgather", "gather", "scatter", "alltoall", "barrier"}) {
		ASSERT_TRUE(by_name.count(f)) << f;
		const ProbeSpec &p = *by_name[f];
		EXPECT_EQ(p.layer, "gloo");
		ASSERT_GE(p.args.size(), 4u) << f;
		EXPECT_EQ(p.args[0].name, "group"); // with seq: which torch call issued it
		EXPECT_EQ(p.args[1].name, "rank");
		EXPECT_EQ(p.args[2].name, "nranks");
		EXPECT_EQ(p.args.back().name, "seq") << f;
	}
	// allreduce: options -> context at 0 (rank +8, size +12), elements 80,
	// elementSize 88, tag 128.
	eacgm_span_event e{};
	e.args[0] = 0x1234;
	e.args[1] = 1;
	e.args[2] = 2;
	e.args[3] = 1000;
	e.args[4] = 4;
	e.args[5] = 7;
	Span sp = decode_span(e, *by_name["allreduce"], s.value(), nullptr, test_names);
	EXPECT_EQ(sp.bytes, 4000u);
	EXPECT_EQ(sp.args["group"], "0x1234");
	EXPECT_EQ(sp.args["rank"], 1);
	EXPECT_EQ(sp.args["nranks"], 2);
	EXPECT_EQ(sp.args["seq"], 7);
	EXPECT_EQ(by_name["allreduce"]->args[5].offset, 128);
}

// Arguments whose layout depends on the library's version (a tensor list,
// offsets named in "layouts") and the work a call issues to another layer.
TEST(Spec, NamedOffsetsTensorListsEnumWidthsAndIssueRules)
{
	auto s = parse_spec(R"({"library":"l",
	  "layouts":{"1.13":{"Group.counter_":172,"Group.list_":120}},
	  "enums":{"op_t":{"0":"sum","4":"max"}},
	  "probes":[{"function":"f","match":"^f\\(","args":[
	    {"name":"tensor","slot":2,"type":"tensor_list"},
	    {"name":"op","slot":3,"type":"enum","enum":"op_t","size":1,"deref":"entry","offset":"Options.op.op_"},
	    {"name":"group","slot":1,"type":"ptr","deref":"entry","offset":["Group.list_",0]},
	    {"name":"seq","slot":1,"type":"u32","deref":"entry","offset":"Group.counter_"}],
	   "issues":{"layer":"gloo","by":["group","seq"]}}]})",
			    "t.json", true);
	ASSERT_TRUE(s.ok()) << s.error().message;
	EXPECT_EQ(s->layouts.at("1.13").at("Group.counter_"), 172);
	const ProbeSpec &p = s->probes[0];
	ASSERT_EQ(p.args.size(), 4u);
	EXPECT_TRUE(p.args[0].tensor_list);
	EXPECT_EQ(p.args[0].type, ArgType::Tensor);
	EXPECT_EQ(p.args[1].offset_field, "Options.op.op_");
	EXPECT_EQ(p.args[1].size, 1);
	EXPECT_EQ(p.args[2].offset_field, "Group.list_");
	EXPECT_EQ(p.args[2].offset2, 0);
	EXPECT_EQ(p.args[2].source, EACGM_ARG_DEREF2_ENTRY);
	EXPECT_EQ(p.args[3].offset_field, "Group.counter_");
	EXPECT_TRUE(reads_layout(p));
	ASSERT_EQ(p.issues.size(), 1u);
	EXPECT_EQ(p.issues[0].layer, "gloo");
	EXPECT_EQ(p.issues[0].by, (std::vector<std::string>{"group", "seq"}));

	struct Case {
		const char *probe, *expect;
	} bad[] = {
		{R"({"function":"f","args":[{"name":"t","slot":1,"type":"tensor_list"}]})",
		 "read on a \"match\" probe only"},
		{R"({"function":"f","args":[{"name":"a","slot":1,"deref":"entry","offset":"A.b"}]})",
		 "read on a \"match\" probe only"},
		{R"({"function":"f","match":"^f","args":[{"name":"t","slot":1,"type":"tensor_list","deref":"entry"}]})",
		 "a \"tensor_list\" is the slot itself"},
		{R"({"function":"f","args":[{"name":"a","slot":1,"size":1}]})", "\"size\" is an enum's width"},
		{R"({"function":"f","args":[{"name":"a","slot":1,"type":"enum","enum":"op_t","size":3}]})",
		 "\"size\" is an enum's width"},
		{R"({"function":"f","args":[{"name":"a","slot":1}],"issues":{"layer":"gloo","by":["b"]}})",
		 "(\"b\" is not one of its arguments)"},
		{R"({"function":"f","args":[{"name":"a","slot":1}],"issues":{"layer":"gloo"}})",
		 "\"issues\" must be {\"layer\": LAYER, \"by\": [ARG, ...]} or an array of them"},
		{R"({"function":"f","args":[{"name":"a","slot":1}],"issues":[{"layer":"gloo","by":["a"]},{"layer":"x"}]})",
		 "\"issues\" must be {\"layer\": LAYER"},
	};
	for (auto &b : bad) {
		std::string json =
			std::string(R"({"library":"l","enums":{"op_t":{"0":"sum"}},"probes":[)") + b.probe + "]}";
		auto r = parse_spec(json, "t.json", true);
		ASSERT_FALSE(r.ok()) << json;
		EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << r.error().message;
	}
	auto layouts = parse_spec(R"({"library":"l","layouts":{"1.13":{"A.b":70000}},"probes":[{"function":"f"}]})",
				  "t.json", true);
	ASSERT_FALSE(layouts.ok());
	EXPECT_NE(layouts.error().message.find("\"1.13\" \"A.b\" is not an offset 0..65535"), std::string::npos)
		<< layouts.error().message;
}

TEST(Spec, BytesRuleNeedsAnEnumWithSizes)
{
	auto s = parse_spec(R"({"library":"l","enums":{"t":{"0":"a"}},"probes":[{"function":"f",
	  "args":[{"name":"n","slot":0},{"name":"ty","slot":1,"type":"enum","enum":"t"}],
	  "bytes":{"count":"n","element":"ty"}}]})",
			    "t.json", true);
	ASSERT_FALSE(s.ok());
	EXPECT_NE(s.error().message.find(
			  "must be an integer argument (the element's size) or an enum with a \"sizes\" table"),
		  std::string::npos);
}

} // namespace
} // namespace eacgm

namespace eacgm {

TEST(Spec, AliasNamesTwoArgumentsOfTheProbeTheSecondASymbol)
{
	auto parse = [](const std::string &alias) {
		return parse_spec(R"({"layer": "mylib", "library": "libmy.so", "probes": [{"function": "get",
			"args": [{"name": "h", "slot": 0, "type": "ptr", "deref": "exit"},
				 {"name": "fn", "slot": 1, "type": "symbol"},
				 {"name": "n", "slot": 2, "type": "u32"}],
			"alias": )" + alias +
					  "}]}",
				  "my.json", true);
	};
	auto ok = parse(R"({"handle": "h", "for": "fn"})");
	ASSERT_TRUE(ok.ok()) << ok.error().message;
	ASSERT_TRUE(ok->probes[0].alias.has_value());
	EXPECT_EQ(ok->probes[0].alias->handle, 0u);
	EXPECT_EQ(ok->probes[0].alias->target, 1u);
	const std::string form = "my.json: probe 'get': \"alias\" must be {\"handle\": ARG, \"for\": ARG}, two "
				 "arguments the probe keeps, \"for\" a symbol";
	EXPECT_EQ(parse(R"("h")").error().message, form);
	EXPECT_EQ(parse(R"({"handle": "h"})").error().message, form);
	EXPECT_EQ(parse(R"({"handle": "h", "for": "fn", "also": 1})").error().message, form);
	EXPECT_EQ(parse(R"({"handle": "x", "for": "fn"})").error().message,
		  form + " (\"x\" is not one of its arguments)");
	EXPECT_EQ(parse(R"({"handle": "h", "for": "n"})").error().message, form + " (\"n\" is not a symbol)");
	EXPECT_EQ(parse(R"({"handle": "fn", "for": "fn"})").error().message,
		  form + " (the handle must be an integer or a pointer)");
}

TEST(Spec, AnchoredLiteralPrefix)
{
	EXPECT_EQ(anchored_literal_prefix("^at::_ops::(mm|addmm)::call\\("), "at::_ops::");
	EXPECT_EQ(anchored_literal_prefix("^c10d::(ProcessGroup\\w*)::(allreduce)\\("), "c10d::");
	EXPECT_EQ(anchored_literal_prefix("at::_ops::mm"), ""); // not anchored: a match may start anywhere
	EXPECT_EQ(anchored_literal_prefix("^abc|def"), "");     // the anchor holds for one alternative only
	EXPECT_EQ(anchored_literal_prefix("^(abc|def)x"), "");  // a group first: nothing literal
	EXPECT_EQ(anchored_literal_prefix("^ab*c"), "a");       // b may be absent
	EXPECT_EQ(anchored_literal_prefix("^ab[|]c"), "ab");    // a '|' in a class is a character
	EXPECT_EQ(anchored_literal_prefix("^a\\|b"), "a");      // an escaped one too; the escape ends the literal
	// Every symbol the regex accepts starts with the prefix.
	std::regex re("^at::_ops::(mm|addmm)::call\\(");
	for (const char *s : {"at::_ops::mm::call(", "at::_ops::addmm::call(x", "c10::mm", "xat::_ops::mm::call("}) {
		if (std::regex_search(s, re)) {
			EXPECT_TRUE(std::string(s).starts_with("at::_ops::")) << s;
		}
	}
}

} // namespace eacgm
