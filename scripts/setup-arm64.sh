#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what `make ARCH=arm64` needs to cross-build eacgm for arm64 on a
# Debian x86-64 machine and to run its unit tests under qemu-user.
# Idempotent, like scripts/setup.sh: when everything is present it only
# checks, and apt is not touched. docs/dependencies.md says why each package
# is here.
#
#  - host packages: Debian's cross toolchain and qemu-user;
#  - arm64 libraries that Debian lets multiarch install beside the host's
#    (Multi-Arch: same, under /usr/lib/aarch64-linux-gnu);
#  - a sysroot, .arm64/sysroot, unpacked from the arm64 packages that cannot
#    be co-installed: Armadillo (its library is in /usr/lib, not in a
#    per-architecture directory, and the packages are not Multi-Arch), and
#    the header of CPython's that differs per architecture (pyconfig.h;
#    installing libpython3.11-dev:arm64 would bring a second Python and hold
#    the host's python3.11 to its exact version). Downloaded packages are
#    kept in .arm64/debs; both directories are ignored by git.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
host_packages=(
  crossbuild-essential-arm64 # aarch64-linux-gnu-gcc/g++, binutils, libc6-dev for arm64
  qemu-user                  # qemu-aarch64: the build's test discovery, tools/pyoffsets, the unit tests
)
arm64_packages=(
  libbpf-dev libelf-dev zlib1g-dev libsqlite3-dev libcapstone-dev
  libmicrohttpd-dev libcap-dev libzstd-dev libgtest-dev
  libcpp-httplib-dev libtomlplusplus-dev
  libarpack2 libsuperlu5 libblas3 liblapack3 # what the sysroot's libarmadillo.so.11 links to
)
sysroot_packages=(libarmadillo-dev libarmadillo11 libpython3.11-dev)

is_installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true) == "install ok installed" ]]; }

missing=()
for p in "${host_packages[@]}"; do is_installed "$p" || missing+=("$p"); done
for p in "${arm64_packages[@]}"; do is_installed "$p:arm64" || missing+=("$p:arm64"); done
need_arch=0
dpkg --print-foreign-architectures | grep -qx arm64 || need_arch=1
if ((${#missing[@]} || need_arch)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup-arm64: missing Debian packages: ${missing[*]}; run 'sudo scripts/setup-arm64.sh' (apt-get needs root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ((need_arch)); then
    echo "setup-arm64: adding the arm64 architecture to dpkg"
    dpkg --add-architecture arm64
  fi
  echo "setup-arm64: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The sysroot: the packages at the version apt offered when it was made,
# unpacked once. .arm64/sysroot.list records them (package=version): while
# it names the same packages nothing is asked of apt (rm -rf .arm64 to take
# newer versions).
cache=$here/.arm64
sysroot=$cache/sysroot
if [[ -d $sysroot && -f $cache/sysroot.list && $(cut -d= -f1 "$cache/sysroot.list") == "$(printf '%s\n' "${sysroot_packages[@]}")" ]]; then
  exit 0
fi
want=$(apt-cache policy "${sysroot_packages[@]/%/:arm64}" | awk '
  /^[^ ].*:$/ {p = $1; sub(/:arm64:$/, "", p); sub(/:$/, "", p)}
  /Candidate:/ {print p "=" $2}')
for p in "${sysroot_packages[@]}"; do
  grep -q "^$p=" <<<"$want" && ! grep -q "^$p=(none)" <<<"$want" ||
    { echo "setup-arm64: apt knows no $p:arm64 (dpkg --add-architecture arm64; apt-get update)" >&2; exit 1; }
done
echo "setup-arm64: unpacking ${sysroot_packages[*]} (arm64) into $sysroot"
mkdir -p "$cache/debs"
rm -rf "$sysroot.tmp"
mkdir -p "$sysroot.tmp"
# The .deb of package $1 at version $2 in .arm64/debs, if there is one.
deb_of() {
  local f
  for f in "$cache/debs/$1_"*_arm64.deb; do
    [[ -f $f && $(dpkg-deb -f "$f" Version) == "$2" ]] && { echo "$f"; return 0; }
  done
  return 1
}
while IFS== read -r p v; do
  if ! deb=$(deb_of "$p" "$v"); then
    (cd "$cache/debs" && apt-get download -q "$p:arm64=$v" 2>&1 | grep -v 'unsandboxed' || true)
    deb=$(deb_of "$p" "$v") || { echo "setup-arm64: cannot download $p:arm64=$v" >&2; exit 1; }
  fi
  dpkg-deb -x "$deb" "$sysroot.tmp"
done <<<"$want"
rm -rf "$sysroot"
mv "$sysroot.tmp" "$sysroot"
echo "$want" >"$cache/sysroot.list"
