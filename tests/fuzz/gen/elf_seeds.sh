#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the seeds of tests/fuzz/elf/: small ELF files of the kinds the
# symbol reader meets (a shared library with versioned, weak, IFUNC, TLS and
# C++ symbols and a SONAME; the same stripped; an object file; a static
# executable; 32-bit and big-endian files), each a few KiB at most.
#   tests/fuzz/gen/elf_seeds.sh tests/fuzz/elf
set -euo pipefail
out=$(realpath "${1:?usage: $0 DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >lib.c <<'C'
int counter = 1;
__thread int tls_var;
static int helper(int x) { return x * 3; }
int add(int a, int b) { return helper(a) + b; }
__attribute__((weak)) int weak_fn(void) { return 2; }
int old_impl(void) { return 1; }
int new_impl(void) { return 2; }
__asm__(".symver old_impl,api@V1");
__asm__(".symver new_impl,api@@V2");
static int (*resolve(void))(void) { return weak_fn; }
int ifn(void) __attribute__((ifunc("resolve")));
int _ZN3c1016ProcessGroupGloo9allreduceEv(void) { return 4; }
int _ZN2at4_ops2mm4callEv(void) { return 5; }
C
printf 'V1 { global: api; add; counter; weak_fn; ifn; _Z*; local: *; };\nV2 { global: api; } V1;\n' >ver.map
# No build id, no separate code pages, no RELRO: the smallest file that
# still has every table.
small=(-Os -g0 -nostdlib -Wl,-z,noseparate-code -Wl,--build-id=none)
gcc "${small[@]}" -fPIC -shared -Wl,-soname,libseed.so.1 -Wl,--version-script=ver.map -Wl,-z,norelro \
	-o "$out/seed-versioned.so" lib.c
strip --strip-all -o "$out/seed-stripped.so" "$out/seed-versioned.so"
gcc -Os -g0 -fPIC -c -o "$out/seed-object.o" lib.c
echo 'void _start(void) { for (;;) ; } int main_like(int x) { return x + 1; }' >exe.c
gcc "${small[@]}" -static -o "$out/seed-static" exe.c
objcopy -O elf32-i386 "$out/seed-static" "$out/seed-static-i386"
objcopy -O elf32-x86-64 "$out/seed-static" "$out/seed-static-x32"
objcopy -I binary -O elf64-big --add-symbol 'big_fn=.data:4,function,global' exe.c "$out/seed-big64.o"
objcopy -I binary -O elf32-big exe.c "$out/seed-big32.o"
ls -l "$out"
