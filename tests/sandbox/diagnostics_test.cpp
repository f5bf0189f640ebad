// The nvcc/ptxas output parsers, on output captured from nvcc 13.0 (and older ptxas formats).
#include "sandbox/diagnostics.hpp"

#include <doctest/doctest.h>

using namespace kforge::sandbox;

TEST_CASE("EDG front-end errors give line, column, code and message") {
  const char* log =
      "/tmp/kforge-build-x/candidate.cu(4): error: identifier \"x\" is undefined\n"
      "    y[0] = x;\n"
      "           ^\n"
      "\n"
      "/tmp/kforge-build-x/candidate.cu(9): error: expected a \";\"\n"
      "    return 0;\n"
      "    ^\n"
      "\n"
      "/tmp/kforge-build-x/candidate.cu(10): warning #940-D: missing return statement at end of "
      "non-void function \"kf_forward\"\n"
      "  }\n"
      "  ^\n"
      "\n"
      "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n"
      "\n"
      "2 errors detected in the compilation of \"/tmp/kforge-build-x/candidate.cu\".\n";
  const auto d = parse_diagnostics(log, "/tmp/kforge-build-x/candidate.cu");
  REQUIRE(d.size() == 3);
  CHECK(d[0].line == 4);
  CHECK(d[0].column == 10);
  CHECK(d[0].level == severity::error);
  CHECK(d[0].message == "identifier \"x\" is undefined");
  CHECK(summarize(d[0]) == "line 4: identifier \"x\" is undefined");
  CHECK(d[1].line == 9);
  CHECK(d[1].column == 3);
  CHECK(d[2].level == severity::warning);
  CHECK(d[2].code == "940-D");
  CHECK(d[2].line == 10);
}

TEST_CASE("EDG detail lines join the message; numbered errors keep their code") {
  const char* log =
      "candidate.cu(7): error #304: no instance of overloaded function \"foo\" matches the "
      "argument list\n"
      "            argument types are: (int *)\n"
      "    foo(p);\n"
      "    ^\n"
      "\n"
      "candidate.cu(2): note #2431-D: expression not folded to a constant due to excessive "
      "constexpr function call complexity\n"
      "  static_assert(fib(40) > 0, \"x\");\n"
      "                        ^\n"
      "\n";
  const auto d = parse_diagnostics(log, "candidate.cu");
  REQUIRE(d.size() == 2);
  CHECK(d[0].code == "304");
  CHECK(d[0].message ==
        "no instance of overloaded function \"foo\" matches the argument list; argument types "
        "are: (int *)");
  CHECK(d[0].column == 3);
  CHECK(d[1].level == severity::note);
  CHECK(d[1].code == "2431-D");
}

TEST_CASE("diagnostics about other files keep the file in the message and no line") {
  const char* log =
      "/work/include/kforge/kernel_abi.h(40): error: identifier \"cudaStream_t\" is undefined\n"
      "  void* workspace, cudaStream_t stream);\n"
      "                   ^\n\n";
  const auto d = parse_diagnostics(log, "/tmp/b/candidate.cu");
  REQUIRE(d.size() == 1);
  CHECK(d[0].line == 0);
  CHECK(d[0].column == 0);
  CHECK(d[0].message == "kernel_abi.h(40): identifier \"cudaStream_t\" is undefined");
}

TEST_CASE("host compiler, ptxas, assembler, nvlink and linker messages are parsed") {
  const char* log =
      "candidate.cu:2:10: fatal error: nonexistent_header.h: No such file or directory\n"
      "    2 | #include <nonexistent_header.h>\n"
      "      |          ^~~~~~~~~~~~~~~~~~~~~~\n"
      "compilation terminated.\n"
      "candidate.cu:12:7: warning: unused variable 'z' [-Wunused-variable]\n"
      "ptxas /tmp/tmpxft_0000069a_00000000-7_candidate.compute_90.ptx, line 27; error   : "
      "Unknown modifier '.instr'\n"
      "ptxas fatal   : Ptx assembly aborted due to errors\n"
      "/tmp/ccAbc.s:12: Error: no such instruction: `bogus'\n"
      "nvlink error   : Undefined reference to '_Z3foov' in 'candidate.o'\n"
      "/usr/bin/ld: /tmp/tmpxft_00000f92_00000000-13_candidate.o: in function `kf_forward':\n"
      "tmpxft_00000f92_00000000-6_candidate.compute_90a.cudafe1.cpp:(.text+0x13): undefined "
      "reference to `foo_missing'\n"
      "collect2: error: ld returned 1 exit status\n"
      "nvcc fatal   : Unsupported gpu architecture 'compute_99'\n";
  const auto d = parse_diagnostics(log, "candidate.cu");
  REQUIRE(d.size() == 8);
  CHECK(d[0].line == 2);
  CHECK(d[0].column == 10);
  CHECK(d[0].message == "nonexistent_header.h: No such file or directory");
  CHECK(d[1].level == severity::warning);
  CHECK(d[1].code == "-Wunused-variable");
  CHECK(d[1].message == "unused variable 'z'");
  CHECK(d[2].code == "ptxas");
  CHECK(d[2].line == 0);
  CHECK(d[2].message == "PTX line 27: Unknown modifier '.instr'");
  CHECK(d[3].code == "ptxas");
  CHECK(d[4].code == "as");
  CHECK(d[5].code == "nvlink");
  CHECK(d[6].code == "ld");
  CHECK(d[6].message == "undefined reference to `foo_missing'");
  CHECK(summarize(d[6]) == "ld: undefined reference to `foo_missing'");
  CHECK(d[7].code == "nvcc");
}

TEST_CASE("ptxas -v resource usage, nvcc 13 format with spills and a non-inlined function") {
  const char* log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z2tkILi3EEvPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z2tkILi3EEvPf\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 20.910 ms\n"
      "ptxas info    : Compiling entry function '_Z11relu_kernelPKfPfl' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z11relu_kernelPKfPfl\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 14 registers, used 1 barriers, 1024 bytes smem\n"
      "ptxas info    : Compiling entry function '_Z3bigPfi' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z3bigPfi\n"
      "    14896 bytes stack frame, 20240 bytes spill stores, 39996 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 0 barriers, 14896 bytes cumulative stack size\n"
      "ptxas info    : Function properties for _Z6helperPfi\n"
      "    64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Function properties for _Z7inlinedv\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
  const auto r = parse_ptxas_usage(log);
  REQUIRE(r.size() == 4);
  CHECK(r[0].kernel == "void tk<3>(float*)");
  CHECK(r[0].registers == 10);
  CHECK(r[0].shared_bytes == 0);
  CHECK(r[1].kernel == "relu_kernel(float const*, float*, long)");
  CHECK(r[1].registers == 14);
  CHECK(r[1].shared_bytes == 1024);
  CHECK(r[2].kernel == "big(float*, int)");
  CHECK(r[2].registers == 32);
  CHECK(r[2].spill_store_bytes == 20240);
  CHECK(r[2].spill_load_bytes == 39996);
  CHECK(r[2].stack_bytes == 14896);
  CHECK(r[3].kernel == "helper(float*, int)");
  CHECK(r[3].registers == 0);
  CHECK(r[3].spill_store_bytes == 8);
}

TEST_CASE("ptxas -v resource usage, the older cmem format") {
  const char* log =
      "ptxas info    : Compiling entry function 'softmax' for 'sm_80'\n"
      "ptxas info    : Function properties for softmax\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, 384 bytes cmem[0], 4096 bytes smem\n";
  const auto r = parse_ptxas_usage(log);
  REQUIRE(r.size() == 1);
  CHECK(r[0].kernel == "softmax");
  CHECK(r[0].registers == 32);
  CHECK(r[0].shared_bytes == 4096);
}

TEST_CASE("demangling leaves non-C++ names alone") {
  CHECK(demangle("_Z3bigPfi") == "big(float*, int)");
  CHECK(demangle("kf_forward") == "kf_forward");
}

TEST_CASE("hostile output: a megabyte-long line and absurd numbers neither crash nor throw") {
  const std::string log = "candidate.cu(3): error: expected a \";\"\n  " +
                          std::string(1 << 20, 'x') + "\n  ^\n\n" +
                          "candidate.cu(99999999999999999999): error: far away\n" +
                          std::string(1 << 20, 'y') + "\n";
  const auto d = parse_diagnostics(log, "candidate.cu");
  REQUIRE(d.size() == 2);
  CHECK(d[0].line == 3);
  CHECK(d[1].line > 0);
  CHECK(d[1].message.size() < 1000);
  CHECK(parse_ptxas_usage("ptxas info    : Used 99999999999999999999 registers\n").empty());
}
