# SPDX-License-Identifier: Apache-2.0
"""arch_names_check.py finds a processor's name outside the per-architecture
module, and leaves alone the module itself and neutral code."""
import os
import tempfile
import unittest

import arch_names_check as check


class Offenders(unittest.TestCase):
    def test_names_of_one_processor_are_found(self):
        text = "\n".join([
            "clang -target bpf -D__TARGET_ARCH_x86 -c span.bpf.c",
            'realpath("/lib64/ld-linux-x86-64.so.2", ld);',
            "\tcase 5: return ctx->r9;",
            "key = BPF_CORE_READ(task, thread.fsbase);",
            "cs_open(CS_ARCH_X86, CS_MODE_64, &h);",
            "// starts with endbr64, then push %rbp",
            "key = BPF_CORE_READ(task, thread.uw.tp_value);",
            '"/usr/local/cuda/targets/sbsa-linux/lib"',
            "stp x29, x30, [sp, #-16]!",
        ])
        self.assertEqual(check.offenders(text), [
            (1, "__TARGET_ARCH_x86"), (2, "ld-linux-x86-64"), (3, "r9"), (4, "fsbase"),
            (5, "CS_ARCH_X86"), (6, "endbr64"), (6, "%rbp"), (7, "tp_value"), (8, "sbsa-linux"),
            (9, "x29"), (9, "x30")])

    def test_neutral_code_is_not(self):
        text = "\n".join([
            "__u64 v = eacgm_arg_word(ctx, a->slot);",
            "uint64_t ptr9 = r90 + rax_like; // words that only contain a register's letters",
            "const char *ld = arch::dynamic_linker();",
            "/* the return register at return */",
        ])
        self.assertEqual(check.offenders(text), [])


class Tree(unittest.TestCase):
    def write(self, root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def test_a_name_planted_outside_the_module_fails_the_check(self):
        with tempfile.TemporaryDirectory() as root:
            self.write(root, "src/arch/x86_64.cpp", 'const char *ld = "/lib64/ld-linux-x86-64.so.2";\n')
            self.write(root, "bpf/arch/x86/arch.bpf.h", "return ctx->r9;\n")
            self.write(root, "bpf/arch/arm64/vmlinux.h", "unsigned long tp_value;\n")
            self.write(root, "cmake/arch.cmake", "set(F -D__TARGET_ARCH_x86)\n")
            self.write(root, "src/probe/first_insn.cpp", "int ok;\n")
            self.write(root, "build/gen/span.skel.h", "ctx->r9\n")  # build output: not checked
            self.write(root, "tests/unit/test_x.cpp", "endbr64\n")   # tests: not checked
            self.assertEqual(check.main(["arch_names_check.py", root]), 0)
            self.write(root, "src/probe/first_insn.cpp", "int ok;\ncs_open(CS_ARCH_X86, CS_MODE_64, &h);\n")
            self.write(root, "tools/CMakeLists.txt", "add_compile_options(-D__x86_64__)\n")
            self.assertEqual(check.checked_files(root), ["src/probe/first_insn.cpp", "tools/CMakeLists.txt"])
            self.assertEqual(check.main(["arch_names_check.py", root]), 1)


if __name__ == "__main__":
    unittest.main()
