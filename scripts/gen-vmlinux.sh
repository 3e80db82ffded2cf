#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates a pinned bpf/arch/ARCH/vmlinux.h, the kernel types the BPF
# programs are compiled against. The pinned copies keep builds reproducible;
# CO-RE relocations make the programs load on other kernels of the same
# processor too. Run it when a new kernel type is needed.
#
#   gen-vmlinux.sh [x86 [BTF]]   from the running x86-64 kernel's BTF
#                                (/sys/kernel/btf/vmlinux), or from BTF
#   gen-vmlinux.sh arm64 [PKG]   from Debian's arm64 kernel package PKG
#                                (default: the one linux-image-arm64 names)
#
# No arm64 kernel needs to run for the second: Debian's arm64 kernel image
# (/boot/vmlinuz-*, an uncompressed or gzip-compressed raw Image, not an
# ELF file) carries the kernel's BTF (CONFIG_DEBUG_INFO_BTF=y) as one blob
# among its read-only data; the blob is found by its header and cut out
# whole, and bpftool reads it as it would /sys/kernel/btf/vmlinux. The
# downloaded package is kept in .arm64/debs (ignored by git).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:-x86}

write() { # $1: BTF file, $2: what it came from
  local out=$here/bpf/arch/$arch/vmlinux.h
  mkdir -p "$(dirname "$out")"
  bpftool btf dump file "$1" format c >"$out.tmp"
  mv "$out.tmp" "$out"
  echo "wrote bpf/arch/$arch/vmlinux.h from $2"
}

case $arch in
x86)
  btf=${2:-/sys/kernel/btf/vmlinux}
  [[ $(uname -m) == x86_64 || -n ${2:-} ]] || { echo "gen-vmlinux: this is not an x86-64 kernel; give the BTF file" >&2; exit 1; }
  [ -r "$btf" ] || { echo "gen-vmlinux: no BTF at $btf (a kernel with CONFIG_DEBUG_INFO_BTF=y is needed)" >&2; exit 1; }
  write "$btf" "$btf ($(uname -r))"
  ;;
arm64)
  pkg=${2:-}
  if [[ -z $pkg ]]; then
    # The versioned image package the metapackage depends on.
    pkg=$(apt-cache depends linux-image-arm64:arm64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    pkg=${pkg%:arm64}
    [[ -n $pkg ]] || { echo "gen-vmlinux: apt knows no linux-image-arm64:arm64 (scripts/setup-arm64.sh adds the architecture)" >&2; exit 1; }
  fi
  debs=$here/.arm64/debs
  mkdir -p "$debs"
  deb=$(ls "$debs/${pkg}_"*_arm64.deb 2>/dev/null | head -1 || true)
  if [[ -z $deb ]]; then
    (cd "$debs" && apt-get download -q "$pkg:arm64" 2>&1 | grep -v 'unsandboxed' || true)
    deb=$(ls "$debs/${pkg}_"*_arm64.deb | head -1)
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*'
  image=$(ls "$tmp"/boot/vmlinuz-*)
  if [[ $(head -c2 "$image" | od -An -tx1 | tr -d ' ') == 1f8b ]]; then
    gzip -dc "$image" >"$tmp/Image"
  else
    cp "$image" "$tmp/Image"
  fi
  # struct btf_header: magic 0xeb9f, version 1, flags, hdr_len (24), then
  # the types' and the strings' offsets and lengths after the header. The
  # blob whose types start the data and whose strings follow them is the
  # kernel's; bpftool checks the rest when it reads it.
  /usr/bin/python3 - "$tmp/Image" "$tmp/btf" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\x9f\xeb\x01\x00")
while at >= 0:
    hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<5I", data, at + 4)
    if hdr_len == 24 and type_off == 0 and str_off == type_len and type_len > 0 and str_len > 0:
        end = at + hdr_len + str_off + str_len
        if end <= len(data):
            open(sys.argv[2], "wb").write(data[at:end])
            sys.exit(0)
    at = data.find(b"\x9f\xeb\x01\x00", at + 1)
sys.exit("gen-vmlinux: no BTF in %s (a kernel built with CONFIG_DEBUG_INFO_BTF=y is needed)" % sys.argv[1])
EOF
  write "$tmp/btf" "$(basename "$deb")"
  ;;
*)
  echo "gen-vmlinux: ARCH is x86 or arm64, not $arch" >&2
  exit 2
  ;;
esac
