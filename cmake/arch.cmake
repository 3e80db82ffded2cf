# The build's part of the per-architecture module (src/arch, bpf/arch): the
# names each tool gives the target processor. Included by the top
# CMakeLists.txt; CMAKE_SYSTEM_PROCESSOR is the target's (the host's, or the
# toolchain file's when cross-building: cmake/aarch64-linux-gnu.cmake).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  # libbpf's bpf_tracing.h reads registers by __TARGET_ARCH_x86; the BPF
  # objects get bpf/arch/x86 (vmlinux.h, arch.bpf.h).
  set(EACGM_BPF_ARCH x86)
  # NVIDIA's name for the target in /usr/local/cuda/targets/.
  set(EACGM_CUDA_TARGET x86_64-linux)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(EACGM_BPF_ARCH arm64)
  set(EACGM_CUDA_TARGET sbsa-linux)
else()
  message(FATAL_ERROR "eacgm builds for x86_64 and aarch64, not ${CMAKE_SYSTEM_PROCESSOR} (cmake/arch.cmake)")
endif()
set(EACGM_BPF_ARCH_DIR ${CMAKE_SOURCE_DIR}/bpf/arch/${EACGM_BPF_ARCH})
set(EACGM_BPF_ARCH_FLAG -D__TARGET_ARCH_${EACGM_BPF_ARCH})
