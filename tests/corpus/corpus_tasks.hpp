#pragma once
// The tasks the corpus tests write kernels for: built-in tasks covering each family, and a few
// synthesized ones (deterministic seeds, no execution filters needed to render them).
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "tasks/builtin.hpp"
#include "tasks/synth.hpp"

namespace kforge::corpus::testing {

/// Built-in tasks per family that the writer must support.
inline const std::vector<std::string>& family_tasks() {
  static const std::vector<std::string> ids{
      // elementwise, with broadcasting and where
      "l1/relu", "l1/gelu", "l1/gelu_tanh", "l1/softplus", "l1/selu", "l1/hardswish",
      "l1/add_row_broadcast", "l1/mul_col_broadcast", "l1/where", "l1/lerp", "l1/axpby",
      "l2/bias_gelu", "l1/silu_4d",
      // reductions and softmax
      "l1/sum_rows", "l1/sum_cols", "l1/mean_mid_dim", "l1/mean_spatial", "l1/amin_last_keepdim",
      "l1/logsumexp_rows", "l1/var_rows", "l1/std_cols", "l1/l2_norm_rows",
      "l1/softmax_rows", "l1/softmax_cols", "l1/log_softmax_rows", "l1/mse_loss",
      // normalization
      "l1/layer_norm", "l1/layer_norm_2d_features", "l1/rms_norm", "l1/rms_norm_channels",
      "l2/residual_rmsnorm", "l1/l2_normalize_rows",
      // gemm, fused and staged
      "l1/linear", "l1/matmul_a_t", "l1/bmm_b_t", "l1/matmul_broadcast", "l2/gemm_bias_gelu",
      "l2/gemm_scale_residual", "l2/gemm_softmax", "l2/gemm_layernorm_gelu",
      "l2/gemm_sigmoid_sum"};
  return ids;
}

/// One task per kernel kind (elementwise, broadcast, rows, norm, gemm, gemm staged into rows): what
/// the CPU compile test compiles by default. nvcc costs seconds per variant on a 2-core CI machine,
/// so every family task (and synthesized ones) only with KFORGE_CORPUS_COMPILE_ALL=1; the GPU test
/// runs them all.
inline const std::vector<std::string>& compile_subset() {
  static const std::vector<std::string> ids{"l1/gelu",       "l1/add_row_broadcast", "l1/softmax_rows",
                                            "l1/layer_norm", "l2/gemm_bias_gelu",    "l2/gemm_softmax"};
  return ids;
}

inline std::map<std::string, tasks::task> builtin_by_id() {
  auto lib = tasks::builtin_tasks();
  REQUIRE_MESSAGE(lib.ok(), (lib.ok() ? "" : lib.message()));
  std::map<std::string, tasks::task> m;
  for (auto& t : *lib) m.emplace(t.id, std::move(t));
  return m;
}

/// Rendered synthesized tasks from fixed seeds (1-3 op chains), `n` of them.
inline std::vector<tasks::task> synth_tasks(int n, std::uint64_t seed = 7) {
  std::vector<tasks::task> out;
  tasks::synth::generate_options o;
  o.max_ops = 3;
  for (std::uint64_t i = 0; static_cast<int>(out.size()) < n && i < 10000; ++i)
    out.push_back(tasks::synth::render(tasks::synth::generate(tasks::synth::mix(seed, i), o)));
  return out;
}

}  // namespace kforge::corpus::testing
