// SPDX-License-Identifier: Apache-2.0
// PyTorch: shapes and dtypes of the tensors an operator receives. A tensor
// argument is a `const at::Tensor&`, whose TensorImpl keeps the dimension
// count, the sizes and the dtype at offsets that change between torch
// versions, so they are data (specs/torch.json "tensor_layouts", measured
// with scripts/torch-layout.py) and used only for a version they were
// measured on.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "probe/attacher.h"
#include "probe/spec.h"

namespace eacgm {

// "1.13" for .../libtorch_cpu.so.1.13.0 (distributions), or the version in
// torch/version.py beside torch/lib/libtorch_cpu.so (wheels); "" if unknown.
std::string torch_version(const std::string &lib_path);

// Whether at::_ops::<op>::call returns through a hidden pointer (an
// at::Tensor, tuple or vector by value) rather than a reference or nothing:
// in-place ops (add_, add__Tensor), out= variants (mm_out) and in-place
// Python operators (__iadd__) return a reference; the rest a value.
bool returns_by_hidden_pointer(const std::string &op);

// Tensor arguments for the leading `at::Tensor const&` (or `&`) parameters of a
// demangled operator entry point (at most max), named in0, in1, ...
std::vector<ArgSpec> leading_tensor_args(const std::string &demangled, int max, std::pair<uint16_t, uint16_t> layout);

// The attacher's reader of an operator's tensor arguments: for a libtorch
// file, the leading tensors of each operator with the TensorImpl layout of
// that file's torch version (specs' tensor_layouts), keyed by the layout; a
// version without a known layout reads none, and says so.
SignatureReader torch_signature_reader(const SpecSet &specs);

// The two words the BPF side packs (EACGM_ARG_TENSOR_A/B) as "float32[8, 32]";
// null when the tensor could not be read (an undefined tensor).
nlohmann::json format_tensor(uint64_t a, uint64_t b);

} // namespace eacgm
