#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Processor-specific names stay in the per-architecture module: src/arch/
(the instruction sets' rules, dynamic linker, CUDA directory), bpf/arch/
(each processor's vmlinux.h and registers) and cmake/ (the names the tools
give a processor, the cross toolchain). Anywhere else under src/, bpf/ and
include/, and in the CMakeLists.txt files, a name only one processor has
(libbpf's __TARGET_ARCH_x86, the path of x86-64's dynamic linker, endbr64,
a register, capstone's X86_*, the kernel's fsbase; or arm64's counterparts)
means code that is right on one processor only. Fails (exit 1, one line per
place) when one appears there.
Usage: arch_names_check.py SOURCE_DIR"""
import os
import re
import sys

import source_check  # tests/source_check.py, beside this file

# Where processor-specific code belongs (paths relative to the source
# directory, with a trailing slash).
MODULE = ("src/arch/", "bpf/arch/", "cmake/")
# What is checked: these directories' sources, and the build's files
# wherever they are (but in build output).
SOURCE_DIRS = ("src", "bpf", "include")
SOURCE_SUFFIXES = (".c", ".cpp", ".h")
SKIP_DIRS = {".git", ".arm64", "__pycache__"}

# Names only one processor has, in code or in its comments. Registers are
# matched as whole words, so `r9` is found and `r90` or `ptr9` are not.
X86_64 = [
    r"__TARGET_ARCH_x86", r"__x86_64__", r"ld-linux-x86-64", r"x86_64-linux", r"endbr64",
    r"CS_ARCH_X86", r"\bX86_(?:INS|OP|REG|GRP)_\w+", r"\bcs_x86\b", r"\bfsbase\b",
    r"%?\b(?:rax|rbx|rcx|rdx|rsi|rdi|rbp|rsp|rip|r8|r9|r1[0-5])\b",
]
ARM64 = [
    r"__TARGET_ARCH_arm64", r"__aarch64__", r"ld-linux-aarch64", r"aarch64-linux", r"sbsa-linux",
    r"CS_ARCH_ARM64", r"\bARM64_(?:INS|OP|REG|GRP)_\w+", r"\bcs_arm64\b", r"\btp_value\b",
    r"\btpidr_el0\b", r"\buser_pt_regs\b", r"\b(?:x29|x30)\b", r"\bpaci[ab]sp\b", r"\bbti c\b",
]
NAMES = re.compile("|".join("(?:%s)" % n for n in X86_64 + ARM64))


def offenders(text):
    """(line number, name) of each processor-specific name in text."""
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1) for m in NAMES.finditer(line)]


def in_module(rel):
    """Whether the file at rel (relative to the source directory) is part of
    the per-architecture module."""
    rel = rel.replace(os.sep, "/")
    return any(rel.startswith(m) for m in MODULE)


def checked_files(root):
    """The files the rule covers, relative to root, sorted."""
    out = []
    for base, dirs, files in os.walk(root):
        rel_base = os.path.relpath(base, root)
        top = rel_base.split(os.sep)[0]
        # Build directories (build/, build-arm64/, ...) hold generated code.
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not (rel_base == "." and d.startswith("build")))
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_base, name))
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                out.append(rel)
            elif top in SOURCE_DIRS and name.endswith(SOURCE_SUFFIXES):
                out.append(rel)
    return sorted(r for r in out if not in_module(r))


def problems_of(root):
    problems = []
    files = checked_files(root)
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for n, name in offenders(f.read()):
                problems.append("%s:%d: `%s` belongs to one processor: keep it in %s"
                                % (rel, n, name, ", ".join(MODULE)))
    return problems, "arch_names_check: no processor-specific name in %d files outside %s" % (
        len(files), ", ".join(MODULE))


def main(argv):
    return source_check.run(argv, __doc__, problems_of)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
