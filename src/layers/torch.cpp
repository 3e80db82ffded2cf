// SPDX-License-Identifier: Apache-2.0
#include "layers/torch.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>

#include "arch/arch.h"
#include "common/text.h"

namespace eacgm {

std::string torch_version(const std::string &lib_path)
{
	static const std::regex so_version("libtorch\\w*\\.so\\.(\\d+\\.\\d+)");
	std::smatch m;
	if (std::regex_search(lib_path, m, so_version))
		return m[1];
	// A wheel: site-packages/torch/lib/libtorch_cpu.so and torch/version.py.
	std::string dir = lib_path.substr(0, lib_path.rfind('/'));
	std::ifstream in(dir + "/../version.py");
	std::stringstream ss;
	ss << in.rdbuf();
	static const std::regex py_version("__version__\\s*=\\s*['\"](\\d+\\.\\d+)");
	std::string text = ss.str();
	if (std::regex_search(text, m, py_version))
		return m[1];
	return "";
}

bool returns_by_hidden_pointer(const std::string &op)
{
	auto ends = [&](const std::string &suffix) {
		return op.size() >= suffix.size() && op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0;
	};
	if (op.rfind("__", 0) == 0) // Python operators: __iand__ is in place, __and__ is not
		return op.rfind("__i", 0) != 0;
	bool in_place = ends("_") || op.find("__") != std::string::npos; // add_, add__Tensor
	return !in_place && !ends("_out") && op != "out";
}

std::vector<ArgSpec> leading_tensor_args(const std::string &demangled, int max, std::pair<uint16_t, uint16_t> layout)
{
	std::vector<ArgSpec> args;
	auto open = demangled.find('(');
	static const std::string ops = "at::_ops::";
	auto call = demangled.find("::call(");
	if (open == std::string::npos || demangled.rfind(ops, 0) != 0 || call == std::string::npos)
		return args;
	// A returned at::Tensor (or tuple, or vector) travels through a hidden
	// pointer: on x86-64 in the first register, and the parameters start
	// one slot later (src/arch).
	int first = returns_by_hidden_pointer(demangled.substr(ops.size(), call - ops.size()))
		? int(arch::native_rules().result_pointer_words)
		: 0;
	// Every `at::Tensor const&` (or `at::Tensor&`, in place) is one pointer
	// slot, in order, as long as nothing else comes before it (a by-value
	// struct would shift the slots).
	size_t pos = open + 1;
	for (int i = 0; i < max; i++) {
		std::string tensor;
		for (const char *t : {"at::Tensor const&", "at::Tensor&"})
			if (demangled.compare(pos, strlen(t), t) == 0)
				tensor = t;
		if (tensor.empty())
			break;
		char next = demangled[pos + tensor.size()];
		if (next != ',' && next != ')')
			break;
		ArgSpec a;
		a.name = "in" + std::to_string(i);
		a.type = ArgType::Tensor;
		a.slot = first + i;
		a.source = EACGM_ARG_TENSOR_A;
		a.offset = layout.first;
		a.offset2 = layout.second;
		args.push_back(a);
		pos += tensor.size() + (next == ',' ? 2 : 0);
	}
	return args;
}

// A probe's own arguments for a file of one torch version: a tensor list
// gets the TensorImpl layout, a named offset its number. An argument whose
// layout that version lacks is left out, and its name added to `missing`.
static std::vector<ArgSpec> resolve_args(const std::vector<ArgSpec> &args, const std::pair<uint16_t, uint16_t> *tensor,
					 const std::map<std::string, uint16_t> *fields,
					 std::vector<std::string> &missing)
{
	std::vector<ArgSpec> out;
	auto field = [&](const std::string &name, uint16_t &offset) {
		if (name.empty())
			return true;
		auto it = fields ? fields->find(name) : std::map<std::string, uint16_t>::const_iterator{};
		if (!fields || it == fields->end()) {
			missing.push_back(name);
			return false;
		}
		offset = it->second;
		return true;
	};
	for (ArgSpec a : args) {
		if (a.type == ArgType::Tensor) {
			if (!tensor) {
				missing.push_back("TensorImpl");
				continue;
			}
			a.offset = tensor->first;
			a.offset2 = tensor->second;
		}
		bool known = field(a.offset_field, a.offset);
		if (known && field(a.offset2_field, a.offset2))
			out.push_back(a);
	}
	return out;
}

SignatureReader torch_signature_reader(const SpecSet &specs)
{
	// Copies: the attacher outlives nothing it could point into.
	return [tensors = specs.tensor_layouts, layouts = specs.layouts](const ProbeSpec &pattern,
									 const std::string &path) {
		SignatureArgs sig;
		std::string version = torch_version(path);
		const std::string which = version.empty() ? "of unknown version" : version;
		auto t = tensors.find(version);
		auto f = layouts.find(version);
		const std::pair<uint16_t, uint16_t> *tensor = t == tensors.end() ? nullptr : &t->second;
		std::vector<std::string> missing;
		std::vector<ArgSpec> own =
			resolve_args(pattern.args, tensor, f == layouts.end() ? nullptr : &f->second, missing);
		if (pattern.tensor_args && !tensor)
			sig.warning = "no tensor layout known for torch " + which + " (" + path +
				"): operators are traced without shapes; scripts/torch-layout.py measures one";
		else if (!missing.empty())
			sig.warning = "no layout of " + join(missing, ", ") + " known for torch " + which + " (" +
				path + "): " + pattern.function + " is traced without the arguments that need it";
		// One reading per version: the same offsets for every file of it.
		sig.key = std::hash<std::string>{}(version) | 1; // 0: no reading
		std::pair<uint16_t, uint16_t> layout = tensor ? *tensor : std::pair<uint16_t, uint16_t>{};
		int max = tensor ? pattern.tensor_args : 0;
		sig.args = [layout, max, own](const std::string &demangled) {
			std::vector<ArgSpec> args;
			if (max)
				args = leading_tensor_args(demangled, max, layout);
			args.insert(args.end(), own.begin(), own.end());
			return args;
		};
		return sig;
	};
}

nlohmann::json format_tensor(uint64_t a, uint64_t b)
{
	if (a == 0)
		return nullptr;
	// c10::ScalarType numbering (TypeMeta's index for these types).
	static const char *kTypes[] = {"uint8",   "int8",    "int16",     "int32",     "int64",      "float16",
				       "float32", "float64", "complex32", "complex64", "complex128", "bool",
				       "qint8",   "quint8",  "qint32",    "bfloat16"};
	unsigned ndim = a & 0xff, dtype = (a >> 8) & 0xff;
	uint64_t sizes[3] = {a >> 16, b & 0xffffffff, b >> 32};
	// Written into one buffer: every traced torch call has a tensor or
	// two, and a string per piece was a sixth of decoding them.
	char buf[96];
	char *p = buf, *end = buf + sizeof(buf);
	auto put = [&](std::string_view t) { p = std::copy_n(t.data(), std::min<size_t>(t.size(), end - p), p); };
	auto num = [&](uint64_t v) { p = std::to_chars(p, end, v).ptr; };
	if (dtype < std::size(kTypes))
		put(kTypes[dtype]);
	else {
		put("dtype");
		num(dtype);
	}
	put("[");
	for (unsigned i = 0; i < ndim && i < 3; i++) {
		if (i)
			put(", ");
		num(sizes[i]);
	}
	if (ndim > 3) {
		put(", ... ");
		num(ndim);
		put("d");
	}
	put("]");
	return std::string(buf, p);
}

} // namespace eacgm
