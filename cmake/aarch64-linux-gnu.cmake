# Cross-builds eacgm for arm64 on a Debian x86-64 machine (`make ARCH=arm64`).
# scripts/setup-arm64.sh installs what it uses: Debian's cross compiler
# (crossbuild-essential-arm64), the arm64 libraries that multiarch can
# install beside the host's (under /usr/lib/aarch64-linux-gnu), and a sysroot
# of those it cannot (.arm64/sysroot; docs/dependencies.md says which and
# why). qemu-user runs the arm64 programs the build runs itself (test
# discovery, tools/pyoffsets) and the unit tests.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch directory for arm64: find_library and find_package look
# in lib/aarch64-linux-gnu under each root.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

get_filename_component(EACGM_ARM64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../.arm64/sysroot" ABSOLUTE)
if(NOT IS_DIRECTORY "${EACGM_ARM64_SYSROOT}/usr")
  message(FATAL_ERROR "no arm64 sysroot at ${EACGM_ARM64_SYSROOT}: run scripts/setup-arm64.sh (make ARCH=arm64 does)")
endif()

# Libraries, headers and CMake packages: the sysroot's first, then the host's
# root, where multiarch keeps the arm64 libraries apart from the host's (and
# where the architecture-independent header-only packages are). Programs are
# the build machine's (clang for BPF, bpftool).
set(CMAKE_FIND_ROOT_PATH "${EACGM_ARM64_SYSROOT}" /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the arm64 .pc files (and the architecture-independent
# ones), never the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Headers a target program may need from the sysroot beyond what a target's
# find_* gives it: Debian's per-architecture pyconfig.h, which
# /usr/include/python3.N/pyconfig.h includes (tools/CMakeLists.txt). After
# the compiler's own directories, so nothing of the host's is shadowed.
set(EACGM_TARGET_INCLUDE_FLAGS -idirafter "${EACGM_ARM64_SYSROOT}/usr/include")

# Runs arm64 programs here: the dynamic linker and the multiarch libraries
# are the host's, the sysroot's libraries are found by -L (qemu looks there
# first for every path the program opens).
find_program(EACGM_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${EACGM_QEMU_AARCH64};-L;${EACGM_ARM64_SYSROOT}")
