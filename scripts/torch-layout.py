#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Measures where this torch's TensorImpl keeps a tensor's dimension count and
dtype, the "tensor_layouts" entry specs/torch.json needs for the version.
It makes tensors of known shapes and dtypes, reads their TensorImpl (t._cdata)
and keeps the offsets that hold the right values for every one of them.
Usage: python3 scripts/torch-layout.py   (with the torch to measure importable)"""
import ctypes
import json

import torch

WORDS = 64
# (shape, dtype, c10::ScalarType number)
cases = [((7, 11, 13), torch.float32, 6), ((5,), torch.int64, 4), ((2, 3), torch.float16, 5),
         ((4, 1, 9, 2), torch.uint8, 0), ((3, 3), torch.float64, 7), ((6, 2), torch.bfloat16, 15)]
tensors = [torch.empty(shape, dtype=dtype) for shape, dtype, _ in cases]
impls = [(ctypes.c_uint64 * WORDS).from_address(t._cdata) for t in tensors]

ndim_offsets = [8 * w for w in range(WORDS - 4)
                if all(impl[w] == len(shape) and list(impl[w + 1:w + 1 + len(shape)]) == list(shape)
                       for impl, (shape, _, _) in zip(impls, cases))]
dtype_offsets = [8 * w for w in range(WORDS)
                 if all(impl[w] & 0xffff == number for impl, (_, _, number) in zip(impls, cases))]
if len(ndim_offsets) != 1 or len(dtype_offsets) != 1:
    raise SystemExit("torch-layout: not found unambiguously (ndim at %s, dtype at %s)" % (ndim_offsets, dtype_offsets))
version = ".".join(torch.__version__.split(".")[:2])
print(json.dumps({version: {"ndim": ndim_offsets[0], "dtype": dtype_offsets[0]}}))
