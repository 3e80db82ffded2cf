#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages eacgm needs to build and test. Idempotent: when
# everything is present it only checks, and apt is not touched.
# docs/dependencies.md says why each package is here.
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  clang llvm            # clang -target bpf, llvm-strip
  libclang-rt-14-dev    # make fuzz: libFuzzer and the sanitizers' runtimes for clang-14 (only recommended by clang)
  bpftool               # skeleton generation, vmlinux.h
  libbpf-dev libelf-dev zlib1g-dev
  nlohmann-json3-dev libcli11-dev libsqlite3-dev
  libgtest-dev
  python3 sqlite3       # e2e tests read the outputs with the standard library
  python3-torch         # the torch layer's tests, benchmark and demo (CPU build)
  python3-torchvision   # the cost benchmark's ResNet-18 (real third-party model code)
  bpftrace              # the cost benchmark's peer: the same entry/return pairing in bpftrace
  libopenblas0-pthread  # makes Debian's torch use OpenBLAS (about 14x faster than the reference BLAS)
  stress-ng iproute2    # the host layer's e2e tests: CPU contention, network namespaces, tc netem
  iptables              # ... and their netem stand-in (NFQUEUE) on kernels without sch_netem
  libcapstone-dev       # decodes a probed function's first instruction: emulated or single-stepped by the kernel
  libarmadillo-dev      # anomaly detection: EM for Gaussian mixtures (gmm_full / gmm_diag)
  python3-sklearn       # the detector's check against scikit-learn's GaussianMixture, and its benchmark; make eval's baselines
  python3-xgboost       # make eval's gradient-boosted trees baseline
  clang-format          # the house style: make format, and ctest format.check
  libmicrohttpd-dev     # eacgm serve's /metrics and /healthz: one epoll thread, bounded connections
  libcpp-httplib-dev    # the ClickHouse sink's HTTP client
  clickhouse-server clickhouse-client  # the ClickHouse sink's e2e tests run real servers (two shards)
  libtomlplusplus-dev   # eacgm serve's configuration file (TOML)
  libcap-dev            # eacgm drops the capabilities tracing does not need
  libzstd-dev           # the columnar store compresses its blocks of spans with zstd
  protobuf-compiler     # test_perfetto decodes the native trace with protoc, a protobuf implementation not eacgm's
  prometheus            # the node agent's e2e test scrapes it with a real Prometheus server
  python3-yaml          # ctest alerts.covered reads the alert rules and their promtool tests
  help2man              # eacgm(1), the manual page, made from --help (scripts/man.py)
  lintian               # make test's package check: the .deb has no lintian errors or warnings
  python3-matplotlib    # make pictures and ctest docs.pictures draw the README's pictures (scripts/draw_readme.py)
)
# Installed for this machine's architecture (or for all): with arm64
# co-installed for the cross build (scripts/setup-arm64.sh), dpkg lists a
# library's -dev package once per architecture.
native=$(dpkg --print-architecture)
missing=()
for p in "${packages[@]}"; do
  [[ $p == \#* ]] && continue
  status=$(dpkg-query -W -f='${Architecture} ${Status}\n' "$p" 2>/dev/null || true)
  grep -qE "^($native|all) install ok installed$" <<<"$status" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]}; run 'sudo make setup' (apt-get needs root)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -e /usr/local/cuda/lib64/libcudart.so.13 && ! -e /usr/local/cuda/lib64/libcudart.so.12 ]]; then
  echo "setup: note: no CUDA toolkit at /usr/local/cuda; the CUDA tests and demo need libcudart from it" >&2
fi
