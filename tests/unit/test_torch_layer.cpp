// SPDX-License-Identifier: Apache-2.0
// Tensor arguments of torch operators: which slots, which version, how shown.
#include <gtest/gtest.h>

#include "arch/arch.h"
#include "layers/torch.h"
#include "pipeline/decode.h"
#include "probe/spec.h"

namespace eacgm {
namespace {

TEST(TorchLayer, VersionFromTheFileNameOrTheWheel)
{
	EXPECT_EQ(torch_version("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0"), "1.13");
	EXPECT_EQ(torch_version("/usr/lib/libtorch_cuda.so.2.1"), "2.1");
	char dir[] = "/tmp/eacgm-torch-XXXXXX";
	ASSERT_NE(mkdtemp(dir), nullptr);
	std::string torch = std::string(dir) + "/torch";
	ASSERT_EQ(
		system(("mkdir -p " + torch + "/lib && echo \"__version__ = '2.3.1+cu121'\" > " + torch + "/version.py")
			       .c_str()),
		0);
	EXPECT_EQ(torch_version(torch + "/lib/libtorch_cpu.so"), "2.3");
	EXPECT_EQ(torch_version(std::string(dir) + "/libtorch_cpu.so"), "");
	ASSERT_EQ(system(("rm -rf " + std::string(dir)).c_str()), 0);
}

TEST(TorchLayer, WhichOperatorsReturnThroughAHiddenPointer)
{
	for (const char *op :
	     {"linear", "addmm", "_to_copy", "native_layer_norm", "_foreach_add_List", "__and___Tensor"})
		EXPECT_TRUE(returns_by_hidden_pointer(op)) << op;
	for (const char *op : {"add_", "add__Tensor", "copy_", "zero_", "_foreach_add__List", "mm_out", "add_out",
			       "__iand___Tensor", "_fused_adam_"})
		EXPECT_FALSE(returns_by_hidden_pointer(op)) << op;
}

TEST(TorchLayer, LeadingTensorParametersBecomeTensorArguments)
{
	std::pair<uint16_t, uint16_t> layout{72, 176};
	auto linear = leading_tensor_args(
		"at::_ops::linear::call(at::Tensor const&, at::Tensor const&, c10::optional<at::Tensor> const&)", 3,
		layout);
	ASSERT_EQ(linear.size(), 2u); // the optional bias is not an at::Tensor
	EXPECT_EQ(linear[0].name, "in0");
	// After the hidden return pointer where it is an argument word (x86-64).
	const int words = int(arch::native_rules().result_pointer_words);
	EXPECT_EQ(linear[0].slot, words);
	EXPECT_EQ(linear[1].slot, words + 1);
	EXPECT_EQ(linear[0].type, ArgType::Tensor);
	EXPECT_EQ(linear[0].offset, 72);
	EXPECT_EQ(linear[0].offset2, 176);
	auto copy = leading_tensor_args("at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)", 2, layout);
	ASSERT_EQ(copy.size(), 2u);
	EXPECT_EQ(copy[0].slot, 0); // returns at::Tensor&: no hidden pointer
	EXPECT_EQ(copy[1].slot, 1);
	auto capped = leading_tensor_args(
		"at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, "
		"c10::Scalar const&)",
		2, layout);
	EXPECT_EQ(capped.size(), 2u);
	EXPECT_TRUE(leading_tensor_args("at::_ops::arange::call(c10::Scalar const&, at::Tensor const&)", 2, layout)
			    .empty());
	EXPECT_TRUE(
		leading_tensor_args("c10d::ProcessGroupGloo::barrier(c10d::BarrierOptions const&)", 2, layout).empty());
}

TEST(TorchLayer, TensorsAreShownWithDtypeAndShape)
{
	auto word_a = [](uint64_t ndim, uint64_t dtype, uint64_t s0) { return ndim | dtype << 8 | s0 << 16; };
	EXPECT_EQ(format_tensor(word_a(2, 6, 8), 32), "float32[8, 32]");
	EXPECT_EQ(format_tensor(word_a(3, 15, 4), 7 | 9ull << 32), "bfloat16[4, 7, 9]");
	EXPECT_EQ(format_tensor(word_a(0, 4, 0), 0), "int64[]");
	EXPECT_EQ(format_tensor(word_a(5, 5, 2), 3 | 4ull << 32), "float16[2, 3, 4, ... 5d]");
	EXPECT_EQ(format_tensor(word_a(1, 99, 50000), 0), "dtype99[50000]");
	EXPECT_EQ(format_tensor(0, 0), nullptr); // not readable: an undefined tensor
}

// The attacher learns an operator's tensor arguments from the torch layer:
// with the TensorImpl layout of the file's own torch version, or none (and
// a warning) for a version without one.
TEST(TorchLayer, SignatureReaderUsesTheFilesTorchVersion)
{
	SpecSet specs;
	specs.tensor_layouts["1.13"] = {16, 24};
	ProbeSpec pattern;
	pattern.tensor_args = 2;
	SignatureReader read = torch_signature_reader(specs);
	SignatureArgs sig = read(pattern, "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0");
	ASSERT_TRUE(sig.args);
	EXPECT_TRUE(sig.warning.empty()) << sig.warning;
	EXPECT_NE(sig.key, 0u);
	auto args = sig.args("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)");
	ASSERT_EQ(args.size(), 2u);
	EXPECT_EQ(args[0].name, "in0");
	EXPECT_EQ(args[1].name, "in1");
	EXPECT_EQ(args[0].type, ArgType::Tensor);
	SignatureArgs none = read(pattern, "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.9.99.0");
	ASSERT_TRUE(none.args);
	EXPECT_TRUE(none.args("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)").empty());
	EXPECT_NE(none.warning.find("no tensor layout known for torch 9.99"), std::string::npos) << none.warning;
}

// A tensor argument reads as the torch layer formats it, and as its two raw
// words without it.
TEST(TorchLayer, DecodedTensorsUseTheLayersFormatter)
{
	SpecSet specs;
	ProbeSpec p;
	p.layer = "torch";
	p.function = "aten::mm";
	p.args = {ArgSpec{.name = "in0", .type = ArgType::Tensor}};
	eacgm_span_event e{};
	e.args[0] = 2 | 6 << 8 | 8ull << 16; // float32, 2 dimensions: [8, 32]
	e.args[1] = 32;
	Interner names;
	EXPECT_EQ(decode_span(e, p, specs, nullptr, names, format_tensor).args["in0"], "float32[8, 32]");
	EXPECT_EQ(decode_span(e, p, specs, nullptr, names).args["in0"], nlohmann::json::array({"0x80602", "0x20"}));
}

// ProcessGroupGloo's collectives (specs/torch.json) read the caller's tensor
// list, the reduce op and the group's context and tag at the offsets of the
// file's torch version; a version without those offsets keeps what it can
// (the tensor, with a known TensorImpl) and says what it lacks.
TEST(TorchLayer, GlooCollectivesReadTheOffsetsOfTheFilesVersion)
{
	auto specs = load_builtin_spec("torch");
	ASSERT_TRUE(specs.ok()) << specs.error().message;
	const ProbeSpec *allreduce = nullptr;
	for (auto &p : specs->probes)
		if (p.function == "c10d::ProcessGroupGloo::allreduce")
			allreduce = &p;
	ASSERT_NE(allreduce, nullptr);
	ASSERT_TRUE(reads_layout(*allreduce));
	ASSERT_EQ(allreduce->issues.size(), 2u);
	EXPECT_EQ(allreduce->issues[0].layer, "gloo");
	EXPECT_EQ(allreduce->issues[0].by, (std::vector<std::string>{"group", "seq"}));
	EXPECT_EQ(allreduce->issues[1].layer, "torch"); // the caller's wait on the Work it returned
	EXPECT_EQ(allreduce->issues[1].by, (std::vector<std::string>{"work"}));
	SignatureReader read = torch_signature_reader(specs.value());
	const std::string demangled = "c10d::ProcessGroupGloo::allreduce(std::vector<at::Tensor, "
				      "std::allocator<at::Tensor> >&, c10d::AllreduceOptions const&)";
	SignatureArgs v113 = read(*allreduce, "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0");
	EXPECT_TRUE(v113.warning.empty()) << v113.warning;
	ASSERT_TRUE(v113.args);
	ProbeSpec p = *allreduce;
	p.args = v113.args(demangled);
	ASSERT_EQ(p.args.size(), 5u);
	EXPECT_EQ(p.args[0].name, "tensor");
	EXPECT_EQ(p.args[0].offset, 72); // TensorImpl's ndim, dtype (tensor_layouts)
	EXPECT_EQ(p.args[0].offset2, 176);
	EXPECT_EQ(p.args[1].name, "reduce_op");
	EXPECT_EQ(p.args[1].offset, 24);
	EXPECT_EQ(p.args[2].name, "group");
	EXPECT_EQ(p.args[2].offset, 120); // contexts_, then its first element
	EXPECT_EQ(p.args[2].offset2, 0);
	EXPECT_EQ(p.args[3].name, "seq");
	EXPECT_EQ(p.args[3].offset, 172);  // collectiveCounter_
	EXPECT_EQ(p.args[4].name, "work"); // the returned intrusive_ptr's Work, read at exit
	EXPECT_EQ(p.args[4].source, EACGM_ARG_DEREF_EXIT);
	auto c = compile_probe(p);
	ASSERT_TRUE(c.ok()) << c.error().message;
	EXPECT_EQ(c->nargs, 6u);
	EXPECT_EQ(c->args[0].source, EACGM_ARG_TENSORS_A);
	EXPECT_EQ(c->args[1].source, EACGM_ARG_TENSORS_B);
	// The vector (declared argument 1) after the hidden result pointer on
	// x86-64; the Work read through that pointer wherever it is.
	EXPECT_EQ(c->args[1].slot, 1 + arch::native_rules().result_pointer_words);
	EXPECT_EQ(c->args[5].slot, EACGM_SLOT_RESULT);
	EXPECT_EQ(c->args[2].source, EACGM_ARG_DEREF_ENTRY);
	EXPECT_EQ(c->args[3].source, EACGM_ARG_DEREF2_ENTRY);

	// Decoded: the reduce op is one byte of the 8 read.
	Interner names;
	eacgm_span_event e{};
	e.args[0] = 1 | 6 << 8 | 1000ull << 16; // float32[1000]
	e.args[1] = 0;
	e.args[2] = 0xdeadbeef00000004ull; // MAX, then padding
	e.args[3] = 0x17e5620;
	e.args[4] = 3;
	Span s = decode_span(e, p, specs.value(), nullptr, names, format_tensor);
	EXPECT_EQ(s.args["tensor"], "float32[1000]");
	EXPECT_EQ(s.args["reduce_op"], "max");
	EXPECT_EQ(s.args["group"], "0x17e5620");
	EXPECT_EQ(s.args["seq"], 3);

	SignatureArgs v211 = read(*allreduce, "/opt/torch/lib/libtorch_cpu.so.2.11");
	ASSERT_TRUE(v211.args);
	auto kept = v211.args(demangled);
	ASSERT_EQ(kept.size(), 2u);
	EXPECT_EQ(kept[0].name, "tensor");
	EXPECT_EQ(kept[1].name, "work");
	EXPECT_NE(v211.warning.find("no layout of AllreduceOptions.reduceOp.op_, ProcessGroupGloo.contexts_, "
				    "ProcessGroupGloo.collectiveCounter_ known for torch 2.11"),
		  std::string::npos)
		<< v211.warning;
	EXPECT_NE(v211.key, v113.key);
}

} // namespace
} // namespace eacgm
