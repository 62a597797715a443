# aarch64-linux-gnu.cmake: CMake toolchain file that cross-builds ljperf for 64-bit Arm Linux
# on a Debian amd64 host, with Debian's cross compiler (crossbuild-essential-arm64) and the
# arm64 libraries installed through multiarch (libopenblas-dev:arm64, libcjson-dev:arm64, ...;
# scripts/setup.sh installs them). The test programs run under qemu-user:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DLJ_CUDA=OFF
#
# Pass -DLJ_CUDA=OFF: the CUDA backend is built on an aarch64 host with its own toolkit (see the
# README), not cross-compiled. On such a host no toolchain file is needed at all.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(LJ_TRIPLET aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${LJ_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${LJ_TRIPLET}-g++)

# Headers and libraries come from the cross compiler's own tree (libc) and from the multiarch
# directories of the :arm64 packages; programs (pkg-config, cmake's helpers) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${LJ_TRIPLET})
set(CMAKE_LIBRARY_ARCHITECTURE ${LJ_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config reads the arm64 .pc files only (the host's would link amd64 libraries): the
# multiarch ones, then those of the arm64 packages that Debian 12 cannot install beside their
# amd64 twins (ISA-L; xxHash too), which scripts/setup.sh unpacks into the cache's arm64/root with .pc
# files that point there (a library found there is linked with its directory as run path).
if(DEFINED ENV{LJPERF_CACHE})
  set(LJ_ARM64_ROOT $ENV{LJPERF_CACHE}/arm64/root)
else()
  get_filename_component(LJ_ARM64_ROOT ${CMAKE_CURRENT_LIST_DIR}/../.cache/arm64/root ABSOLUTE)
endif()
set(ENV{PKG_CONFIG_LIBDIR}
  /usr/lib/${LJ_TRIPLET}/pkgconfig:/usr/share/pkgconfig:${LJ_ARM64_ROOT}/usr/lib/${LJ_TRIPLET}/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# Open MPI: used when the arm64 development files are there (an arm64 sysroot that has them).
# FindMPI cannot run the arm64 mpicc wrapper, so the headers and the library are named. Debian 12
# cannot install libopenmpi3 for amd64 and arm64 side by side (libmunge2, which it needs, is not
# Multi-Arch: same), so on a host that has the amd64 Open MPI the cross build goes without MPI
# (and must not pick up the host's mpicc); scripts/build.sh then compiles the MPI backend
# against the arm64 headers alone (from the cache's arm64/root).
if(EXISTS /usr/lib/${LJ_TRIPLET}/openmpi/include/mpi.h AND EXISTS /usr/lib/${LJ_TRIPLET}/libmpi.so)
  set(MPI_C_COMPILER ${CMAKE_C_COMPILER})
  set(MPI_C_HEADER_DIR /usr/lib/${LJ_TRIPLET}/openmpi/include)
  set(MPI_C_LIB_NAMES mpi)
  set(MPI_mpi_LIBRARY /usr/lib/${LJ_TRIPLET}/libmpi.so)
else()
  set(CMAKE_DISABLE_FIND_PACKAGE_MPI TRUE)
endif()

# CTest runs the test programs through qemu-user. The loader and libraries come from the
# multiarch directories (/lib/ld-linux-aarch64.so.1, /usr/lib/aarch64-linux-gnu), so no -L.
find_program(LJ_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(LJ_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LJ_QEMU_AARCH64})
endif()
