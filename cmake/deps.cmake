# Third-party dependencies, found the same way on the Debian build machine and on the GPU host.
# A host without package access (the GPU host) gets them from deploy/pack-deps.sh's folder, which
# deploy/setup.sh and deploy/gpu-host.sh pass as KFORGE_DEPS_DIR. So everything but
# LibTorch, CUDA and NCCL is found with find_path/find_library and plain imported targets rather than
# the packages' own CMake configs, which .gpu-deps does not carry.
set(KFORGE_DEPS_DIR "" CACHE PATH "Extra prefix with include/, lib/ and bin/ of packed dependencies")
if(KFORGE_DEPS_DIR)
  list(PREPEND CMAKE_PREFIX_PATH "${KFORGE_DEPS_DIR}")
  list(PREPEND CMAKE_PROGRAM_PATH "${KFORGE_DEPS_DIR}/bin")
  # The binaries find the packed libraries without LD_LIBRARY_PATH, so `build/kforge` runs from any
  # shell. An old-style RPATH (not RUNPATH) also serves the packed libraries' own dependencies
  # (libzmq's libsodium), which they cannot find by themselves.
  list(APPEND CMAKE_BUILD_RPATH "${KFORGE_DEPS_DIR}/lib")
  add_link_options(LINKER:--disable-new-dtags)
endif()

find_package(Threads REQUIRED)

# kforge_dep(NAME HEADER <file> [LIBS lib...] [DEFS def...]): an imported target kforge_dep::NAME.
function(kforge_dep name)
  cmake_parse_arguments(ARG "" "HEADER" "LIBS;DEFS" ${ARGN})
  find_path(${name}_INCLUDE_DIR ${ARG_HEADER} REQUIRED)
  add_library(kforge_dep_${name} INTERFACE)
  target_include_directories(kforge_dep_${name} SYSTEM INTERFACE ${${name}_INCLUDE_DIR})
  foreach(lib IN LISTS ARG_LIBS)
    find_library(${name}_${lib}_LIBRARY NAMES ${lib} REQUIRED)
    target_link_libraries(kforge_dep_${name} INTERFACE ${${name}_${lib}_LIBRARY})
  endforeach()
  if(ARG_DEFS)
    target_compile_definitions(kforge_dep_${name} INTERFACE ${ARG_DEFS})
  endif()
  add_library(kforge_dep::${name} ALIAS kforge_dep_${name})
endfunction()

kforge_dep(caf HEADER caf/all.hpp LIBS caf_core)
target_link_libraries(kforge_dep_caf INTERFACE Threads::Threads)
kforge_dep(zmq HEADER zmq.hpp LIBS zmq)
kforge_dep(flatbuffers HEADER flatbuffers/flatbuffers.h)
kforge_dep(toml HEADER toml++/toml.h LIBS tomlplusplus DEFS TOML_HEADER_ONLY=0)
kforge_dep(json HEADER nlohmann/json.hpp)
kforge_dep(pcre2 HEADER pcre2.h LIBS pcre2-8 DEFS PCRE2_CODE_UNIT_WIDTH=8)
kforge_dep(cli11 HEADER CLI/CLI.hpp)
kforge_dep(doctest HEADER doctest/doctest.h)
kforge_dep(seccomp HEADER seccomp.h LIBS seccomp)
# cpp-httplib as Debian builds it: a shared library, compiled with TLS and compression, so its
# header must see the same options (they change its classes' layout).
kforge_dep(httplib HEADER httplib.h LIBS cpp-httplib
           DEFS CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
# spdlog as Debian builds it: a shared library over an external fmt.
kforge_dep(spdlog HEADER spdlog/spdlog.h LIBS spdlog fmt DEFS SPDLOG_SHARED_LIB SPDLOG_COMPILED_LIB SPDLOG_FMT_EXTERNAL)

find_program(FLATC_EXECUTABLE flatc REQUIRED)

# LibTorch: Debian's 1.13 CPU build here, PyTorch's CUDA build on the GPU host (CMAKE_PREFIX_PATH).
# Only trainer/ (and later the policy model) links it: each TU including torch costs ~20 s in CI.
option(KFORGE_WITH_TORCH "Build the LibTorch parts (trainer)" ON)
if(KFORGE_WITH_TORCH)
  find_package(Torch REQUIRED)
  # PyTorch's wheels export a copy of std::filesystem from libtorch_cpu.so. When libtorch comes
  # before libstdc++ in a binary's DT_NEEDED list, our std::filesystem calls bind to that copy, and
  # some crash (remove_all, seen on the GPU host with g++ 13). Naming libstdc++ first on the link
  # line binds them to the system's library. Link LibTorch only through this target.
  add_library(kforge_dep_torch INTERFACE)
  target_link_libraries(kforge_dep_torch INTERFACE stdc++ ${TORCH_LIBRARIES})
  add_library(kforge_dep::torch ALIAS kforge_dep_torch)
endif()

# CUDA device code (GPU tests, benchmarks) is only built where asked for: the CI machine has nvcc but
# no GPU, and the GPU host script turns this on.
option(KFORGE_WITH_CUDA "Build CUDA device code and GPU tests" OFF)
if(KFORGE_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
endif()
