#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Refreshes the "enums" (and NCCL's element "sizes") of the built-in specs from
the CUDA toolkit's headers: cudaError_t, cudaMemcpyKind (driver_types.h),
CUresult (cuda.h) into specs/cuda.json; ncclResult_t, ncclDataType_t,
ncclRedOp_t (nccl.h) into specs/nccl.json.
Usage: scripts/spec-enums.py [/usr/local/cuda]"""
import json, pathlib, re, sys

cuda = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda")
specs = pathlib.Path(__file__).resolve().parent.parent / "specs"


def enum_body(text, name, typedef=False):
    pattern = (r"typedef\s+enum\s*\{([^{}]*)\}\s*%s\s*;" if typedef else
               r"enum\s+(?:__device_builtin__\s+)?%s\s*\{([^{}]*)\}") % re.escape(name)
    m = re.search(pattern, text, re.S)
    if not m:
        sys.exit(f"spec-enums: enum {name} not found")
    table = {}
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)  # comments may hold "x = 1"
    for key, value in re.findall(r"(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\b", body):
        table.setdefault(str(int(value, 0)), key)  # first name wins over aliases
    return table


def update(name, enums, sizes=None):
    path = specs / name
    spec = json.loads(path.read_text())
    spec["enums"] = enums
    if sizes is not None:
        spec["sizes"] = sizes
    path.write_text(json.dumps(spec, indent=2) + "\n")
    print(f"updated {path}: " + ", ".join(f"{k} ({len(v)})" for k, v in enums.items()))


inc = cuda / "include"
driver_types, cuda_h, nccl_h = ((inc / f).read_text() for f in ("driver_types.h", "cuda.h", "nccl.h"))
update("cuda.json", {
    "cudaError_t": enum_body(driver_types, "cudaError"),
    "cudaMemcpyKind": enum_body(driver_types, "cudaMemcpyKind"),
    "CUresult": enum_body(cuda_h, "cudaError_enum"),
})
dtypes = enum_body(nccl_h, "ncclDataType_t", typedef=True)
dtypes = {k: v for k, v in dtypes.items() if v != "ncclNumTypes"}
# Element sizes follow from the type names: 8-bit, 16-bit, ...
width = {"Int8": 1, "Uint8": 1, "Int32": 4, "Uint32": 4, "Int64": 8, "Uint64": 8, "Float16": 2,
         "Float32": 4, "Float64": 8, "Bfloat16": 2, "Float8e4m3": 1, "Float8e5m2": 1}
sizes = {}
for value, name in dtypes.items():
    if name[4:] not in width:
        sys.exit(f"spec-enums: no element size known for {name}; add it to the table")
    sizes[value] = width[name[4:]]
ops = {k: v for k, v in enum_body(nccl_h, "ncclRedOp_t", typedef=True).items() if v.startswith("ncclSum") or
       v in ("ncclProd", "ncclMax", "ncclMin", "ncclAvg")}
update("nccl.json", {
    "ncclResult_t": {k: v for k, v in enum_body(nccl_h, "ncclResult_t", typedef=True).items() if v != "ncclNumResults"},
    "ncclDataType_t": dtypes,
    "ncclRedOp_t": ops,
}, {"ncclDataType_t": sizes})
