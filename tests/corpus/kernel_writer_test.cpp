// The kernel writer on the CPU: which tasks it supports (a coverage floor over the built-in
// library, so a regression shows), that what it writes is well-formed and deterministic, and
// that it refuses what it cannot do with "unsupported: <why>".
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "corpus/cuda_expr.hpp"
#include "corpus/kernel_writer.hpp"
#include "corpus_tasks.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_parser.hpp"

using namespace kforge;
using namespace kforge::corpus;

#ifdef KFORGE_TASKS_WITH_TORCH

namespace {

// The variants the writer gives for `t`; the test case stops here when it gives none.
std::vector<kernel_variant> written(const tasks::task& t) {
  auto ks = write_kernels(t);
  REQUIRE_MESSAGE(ks.ok(), (ks.ok() ? "" : ks.message()));
  return std::move(*ks);
}

}  // namespace

TEST_CASE("every family task gets several well-formed variants") {
  const auto lib = testing::builtin_by_id();
  for (const auto& id : testing::family_tasks()) {
    INFO(id);
    auto it = lib.find(id);
    REQUIRE(it != lib.end());
    auto ks = write_kernels(it->second);
    REQUIRE_MESSAGE(ks.ok(), (ks.ok() ? "" : ks.message()));
    CHECK(ks->size() >= 2);
    std::set<std::string> names;
    for (const auto& v : *ks) {
      INFO(v.name);
      CHECK(names.insert(v.name).second);
      CHECK(v.source.find("extern \"C\" int kf_forward(") != std::string::npos);
      CHECK(v.source.find("#include <kforge/kernel_abi.h>") != std::string::npos);
      CHECK(v.explanation.size() > 100);
      auto src = tasks::extract_kernel_source(completion_text(v));
      REQUIRE(src.ok());
      CHECK(*src == v.source);
    }
  }
}

TEST_CASE("the writer is deterministic") {
  const auto lib = testing::builtin_by_id();
  for (const char* id : {"l1/softmax_rows", "l2/gemm_layernorm_gelu", "l1/where"}) {
    auto a = write_kernels(lib.at(id));
    auto b = write_kernels(lib.at(id));
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(a->size() == b->size());
    for (std::size_t i = 0; i < a->size(); ++i) CHECK((*a)[i].source == (*b)[i].source);
  }
}

TEST_CASE("explanations open by restating forward's body, annotations and comments left out") {
  const auto lib = testing::builtin_by_id();
  auto t = lib.at("l1/relu");
  t.reference = "def forward(x: torch.Tensor) -> torch.Tensor:\n    # ReLU: max(x, 0)\n    y = torch.relu(x)\n    return y\n";
  auto ks = write_kernels(t);
  REQUIRE_MESSAGE(ks.ok(), (ks.ok() ? "" : ks.message()));
  for (const auto& v : *ks) CHECK(v.explanation.rfind("The reference computes `y = torch.relu(x); return y`. ", 0) == 0);
  // A statement over two lines would be misquoted once joined: no restatement then.
  t.reference = "def forward(x):\n    return torch.clamp(x,\n                       0.0, 1.0)\n";
  ks = write_kernels(t);
  REQUIRE_MESSAGE(ks.ok(), (ks.ok() ? "" : ks.message()));
  CHECK(ks->front().explanation.rfind("The reference computes", 0) == std::string::npos);
}

TEST_CASE("maps write the task's ops once, in kf_op under a comment restating them; formulas follow the restatement") {
  const auto lib = testing::builtin_by_id();
  const auto ks = written(lib.at("l1/leaky_relu"));
  for (const auto& v : ks) {
    INFO(v.name << "\n" << v.source);
    CHECK(v.explanation.rfind("The reference computes `return torch.leaky_relu(x, 0.01)`. The formulas follow "
                              "PyTorch's float32 kernels: leaky ReLU: ",
                              0) == 0);
    const std::string head = "// One element of the reference: return torch.leaky_relu(x, 0.01)\n// leaky ReLU: ";
    CHECK(v.source.find(head) != std::string::npos);
    CHECK(v.source.find("__device__ __forceinline__ void kf_op(float x0, float& y0) {") != std::string::npos);
    CHECK(v.source.find("(0.01f)") != std::string::npos);  // the constant as the reference writes it
    CHECK(v.source.find("  // Inputs (1): `x`. Outputs (1): `y`.\n  if (num_inputs != 1 || num_outputs != 1) return 1;\n") !=
          std::string::npos);  // the counts under the names the prompt lists
    std::size_t defs = 0, uses = 0;
    for (auto at = v.source.find("kf_op("); at != std::string::npos; at = v.source.find("kf_op(", at + 1))
      (v.source.compare(at - 5, 5, "void ") == 0 ? defs : uses) += 1;
    CHECK(defs == 1);
    CHECK(uses >= 1);
    CHECK(v.source.find("0.01f", v.source.find("kf_op(", v.source.find("{", v.source.find("void kf_op(")))) ==
          std::string::npos);  // nowhere but in kf_op
  }
  const auto vec4 = std::find_if(ks.begin(), ks.end(), [](const kernel_variant& v) { return v.name == "vec4"; });
  REQUIRE(vec4 != ks.end());
  for (const char* lane : {"kf_op(a0.x, r0.x);", "kf_op(a0.y, r0.y);", "kf_op(a0.z, r0.z);", "kf_op(a0.w, r0.w);"})
    CHECK(vec4->source.find(lane) != std::string::npos);
  // A broadcasting map of two inputs: the strided kernel calls it with each operand's offset.
  for (const auto& v : written(lib.at("l1/add_row_broadcast"))) CHECK(v.source.find("kf_op(p.in[0][o0], p.in[1][o1], p.out[0][w0]);") != std::string::npos);
}

TEST_CASE("values and reductions are named v1, v2, ... and r1, r2, ... in the order they are written") {
  const auto lib = testing::builtin_by_id();
  // Names once came from node ids, so they skipped numbers (a constant's id) and the first
  // reduction was r2 in one task and r7 in the next: a model had to copy them, not predict them.
  // Per function (each numbers its own): every name declared once, declarations reading v1, v2, ...
  for (const char* id : {"l1/rms_norm_channels", "l1/layer_norm", "l2/gemm_layernorm_gelu", "l1/lerp",
                         "l1/standardize_cols", "l2/residual_rmsnorm"}) {
    for (const auto& v : written(lib.at(id))) {
      INFO(id << " " << v.name << "\n" << v.source);
      std::size_t from = 0;
      while (from < v.source.size()) {
        const std::size_t to = std::min(v.source.find("\n}\n", from), v.source.size());
        const std::string fn = v.source.substr(from, to - from);
        from = to + 3;
        for (const char prefix : {'v', 'r'}) {
          std::vector<std::pair<std::size_t, int>> declared;  // (position, number)
          for (const char* decl : {"float ", "bool "}) {  // "const float v1" holds "float v1"
            const std::string d = std::string(decl) + prefix;
            for (auto at = fn.find(d); at != std::string::npos; at = fn.find(d, at + 1)) {
              const std::size_t digits = at + d.size();
              std::size_t end = digits;
              while (end < fn.size() && std::isdigit(static_cast<unsigned char>(fn[end]))) ++end;
              if (end > digits && (fn[end] == ' ' || fn[end] == ';'))
                declared.emplace_back(at, std::stoi(fn.substr(digits, end - digits)));
            }
          }
          std::sort(declared.begin(), declared.end());  // reading order
          std::vector<int> numbers;
          for (const auto& d : declared) numbers.push_back(d.second);
          for (std::size_t i = 0; i < numbers.size(); ++i) CHECK(numbers[i] == static_cast<int>(i) + 1);
        }
      }
    }
  }
}

TEST_CASE("a matrix product names each operand and whether it is read transposed, above the dims it picks") {
  const auto lib = testing::builtin_by_id();
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases{
      {"l1/matmul_square",
       {"  // A is `a` as stored (M x K).\n  const int am = ra - 2, ak = ra - 1;\n",
        "  // B is `b` as stored (K x N).\n  const int bk = rb - 2, bn = rb - 1;\n"}},
      {"l1/matmul_a_t", {"  // A is `a` read transposed (stored K x M).\n  const int am = ra - 1, ak = ra - 2;\n"}},
      {"l1/linear",
       {"  // Inputs (3): `x`, `w`, `b`. Outputs (1): `y`.\n  if (num_inputs != 3 || num_outputs != 1) return 1;\n",
        "  // B is `w` read transposed (stored N x K).\n  const int bk = rb - 1, bn = rb - 2;\n"}}};
  for (const auto& [id, wants] : cases)
    for (const auto& v : written(lib.at(id))) {
      INFO(id << " " << v.name << "\n" << v.source);
      for (const auto& want : wants) CHECK(v.source.find(want) != std::string::npos);
    }
}

TEST_CASE("a product staged into a row program over its last dim reads C as dense rows, short enough to write") {
  // The strided row program behind a GEMM ran to 11-13 k characters (~4,400 tokens),
  // and kforge-tiny, which writes 3,072, never finished one.
  const auto lib = testing::builtin_by_id();
  for (const char* id : {"l2/gemm_softmax", "l2/gemm_sigmoid_sum"}) {
    const auto vs = written(lib.at(id));
    std::set<std::string> names;
    for (const auto& v : vs) {
      INFO(id << " " << v.name << "\n" << v.source);
      names.insert(v.name);
      CHECK(v.source.find("kf_virtual") == std::string::npos);
      CHECK(v.source.find("kf_part(") == std::string::npos);
      CHECK(v.source.find("  a.rows = g.batch * g.M;\n  a.red = g.N;\n") != std::string::npos);
      CHECK(v.source.find("ptrs.in[") != std::string::npos);
      CHECK(v.source.find("static_cast<const float*>(workspace);\n") != std::string::npos);
      CHECK(completion_text(v).size() < 9000);  // about 3.1 characters a token
    }
    CHECK(names == std::set<std::string>{"naive_thread_per_row", "tiled16_warp_shuffle"});
  }
  // A bias of one row's shape is read at the position in the row.
  const auto softmax = written(lib.at("l2/gemm_softmax"));
  CHECK(softmax.front().source.find("!kf_dense(inputs[2], a.red)") != std::string::npos);
  // A reduction over M, not the last dim, keeps the strided view of C (and the block variant).
  auto cols = tasks::parse_task(
      R"({"id": "t/gemm_softmax_cols", "category": "fused", "description": "softmax over M", "inputs": [)"
      R"({"name": "x", "shape": [64, 32], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}},)"
      R"( {"name": "w", "shape": [48, 32], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}],)"
      R"( "outputs": [{"name": "y", "shape": [64, 48], "dtype": "float32"}],)"
      R"( "reference": "def forward(x, w):\n    return torch.softmax(torch.linear(x, w), 0)\n"})",
      "test");
  REQUIRE_MESSAGE(cols.ok(), (cols.ok() ? "" : cols.message()));
  const auto strided = written(*cols);
  CHECK(strided.size() == 3);
  for (const auto& v : strided) {
    INFO(v.name << "\n" << v.source);
    CHECK(v.source.find("kf_virtual") != std::string::npos);
  }
}

TEST_CASE("row programs say per output whether it holds one value per row or per element before checking it") {
  const auto lib = testing::builtin_by_id();
  for (const auto& [id, want] : std::map<std::string, std::string>{
           {"l1/sum_rows", "  // Output `y`: one value per row (a.rows).\n"},
           {"l1/softmax_rows", "  // Output `y`: one value per element (n).\n"}}) {
    for (const auto& v : written(lib.at(id))) {
      INFO(id << " " << v.name << "\n" << v.source);
      const auto at = v.source.find(want);
      REQUIRE(at != std::string::npos);
      const std::string size = want.find("a.rows") != std::string::npos ? "a.rows" : "n";
      CHECK(v.source.find("!kf_dense(outputs[0], " + size + "))", at) != std::string::npos);
    }
  }
}

TEST_CASE("row kernels that reduce across threads define the sum and max helpers, whatever they reduce") {
  // A policy (kforge-tiny v10) called kf_warp_max or kf_block_sum in kernels that never defined
  // them; a fixed pair is one thing to learn. amin_last_keepdim reduces with min only.
  const auto lib = testing::builtin_by_id();
  int cooperative = 0;
  for (const auto& v : written(lib.at("l1/amin_last_keepdim"))) {
    INFO(v.name << "\n" << v.source);
    for (const std::string prefix : {"kf_warp_", "kf_block_"}) {
      if (v.source.find(prefix + "min(") == std::string::npos) continue;
      ++cooperative;
      CHECK(v.source.find("float " + prefix + "sum(") != std::string::npos);
      CHECK(v.source.find("float " + prefix + "max(") != std::string::npos);
    }
  }
  CHECK(cooperative >= 2);
}

TEST_CASE("what the writer cannot do is an unsupported error") {
  const auto lib = testing::builtin_by_id();
  for (const char* id : {"l1/conv2d_3x3", "l1/relu_bf16", "l1/topk_values", "l1/argmax_rows",
                         "l2/mlp_gelu", "l1/cumsum_rows", "l2/attention",
                         // One row of 67 M elements: a block per row ran 395 ms on an H200.
                         "l1/sum_all"}) {
    INFO(id);
    auto ks = write_kernels(lib.at(id));
    REQUIRE_FALSE(ks.ok());
    CHECK(ks.message().rfind("unsupported: ", 0) == 0);
    CHECK_FALSE(reason_key(ks.message()).empty());
  }
}

TEST_CASE("coverage of the built-in library and of synthesized tasks") {
  const auto lib = testing::builtin_by_id();
  std::map<std::string, std::pair<int, int>> per;  // category -> (supported, total)
  std::map<std::string, int> reasons;
  int supported = 0;
  for (const auto& [id, t] : lib) {
    auto& c = per[std::string(tasks::to_string(t.category))];
    ++c.second;
    auto ks = write_kernels(t);
    if (ks) {
      ++supported;
      ++c.first;
    } else {
      ++reasons[reason_key(ks.message())];
    }
  }
  std::printf("built-in: %d of %zu supported\n", supported, lib.size());
  for (const auto& [c, n] : per) std::printf("  %-14s %3d / %3d\n", c.c_str(), n.first, n.second);
  for (const auto& [r, n] : reasons) std::printf("    %3d  %s\n", n, r.c_str());
  CHECK(supported >= 90);

  std::map<std::string, std::pair<int, int>> sper;
  int ssup = 0;
  const auto synth = testing::synth_tasks(500);
  for (const auto& t : synth) {
    auto& c = sper[std::string(tasks::to_string(t.category))];
    ++c.second;
    if (write_kernels(t)) {
      ++ssup;
      ++c.first;
    }
  }
  std::printf("synthesized (rendered, unfiltered): %d of %zu supported\n", ssup, synth.size());
  for (const auto& [c, n] : sper) std::printf("  %-14s %3d / %3d\n", c.c_str(), n.first, n.second);
  CHECK(ssup >= 100);
}

#else

TEST_CASE("without LibTorch every task is unsupported") {
  const auto lib = testing::builtin_by_id();
  auto ks = write_kernels(lib.at("l1/relu"));
  REQUIRE_FALSE(ks.ok());
  CHECK(ks.message().rfind("unsupported: ", 0) == 0);
}

#endif

TEST_CASE("float literals: the shortest text that reads back as the same float, as a reference writes it") {
  CHECK(float_literal(0.01) == "(0.01f)");
  CHECK(float_literal(0.5) == "(0.5f)");
  CHECK(float_literal(20) == "(20.0f)");
  CHECK(float_literal(-1) == "(-1.0f)");
  CHECK(float_literal(1e-6) == "(1e-6f)");
  CHECK(float_literal(1e-5) == "(1e-5f)");
  CHECK(float_literal(1e20) == "(1e20f)");
  CHECK(float_literal(3.4028234663852886e38) == "(3.4028235e38f)");
  CHECK(float_literal(1e39) == "__int_as_float(0x7f800000)");  // past float's range: infinity
  CHECK(float_literal(-1e39) == "__int_as_float(0xff800000)");
  CHECK(float_literal(std::numeric_limits<double>::infinity()) == "__int_as_float(0x7f800000)");
  CHECK(float_literal(std::nan("")) == "__int_as_float(0x7fc00000)");
  for (const double v : {0.1, 1.0 / 3, 2.5e-7, 123456.789, 1e-45, -7e-3}) {
    const auto s = float_literal(v);
    INFO(s);
    CHECK(std::strtof(s.c_str() + 1, nullptr) == static_cast<float>(v));
  }
}
