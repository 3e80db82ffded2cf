#!/usr/bin/env python3
"""Refreshes the "enums" of specs/cuda.json from the CUDA toolkit's headers:
cudaError_t and cudaMemcpyKind (driver_types.h), CUresult (cuda.h).
Usage: scripts/cuda-enums.py [/usr/local/cuda]"""
import json, pathlib, re, sys

cuda = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda")
spec_path = pathlib.Path(__file__).resolve().parent.parent / "specs" / "cuda.json"


def enum_body(text, name):
    m = re.search(r"enum\s+(?:__device_builtin__\s+)?%s\s*\{(.*?)\}" % re.escape(name), text, re.S)
    if not m:
        sys.exit(f"cuda-enums: enum {name} not found")
    table = {}
    for key, value in re.findall(r"^\s*(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)", m.group(1), re.M):
        table.setdefault(str(int(value, 0)), key)  # first name wins over deprecated aliases
    return table


driver_types = (cuda / "include" / "driver_types.h").read_text()
cuda_h = (cuda / "include" / "cuda.h").read_text()
spec = json.loads(spec_path.read_text())
spec["enums"] = {
    "cudaError_t": enum_body(driver_types, "cudaError"),
    "cudaMemcpyKind": enum_body(driver_types, "cudaMemcpyKind"),
    "CUresult": enum_body(cuda_h, "cudaError_enum"),
}
spec_path.write_text(json.dumps(spec, indent=2) + "\n")
print(f"updated {spec_path}: " + ", ".join(f"{k} ({len(v)})" for k, v in spec["enums"].items()))
