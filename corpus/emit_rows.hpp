#pragma once
// Pieces of a row-program kernel file, so the GEMM writer can put a product in front of one
// (the product goes to the workspace and the row program reads it as the operand `kf_virtual`,
// a kf_tensor the caller's host code defines before `host`). Internal to corpus/.

#include <string>
#include <vector>

#include "common/result.hpp"
#include "corpus/plan.hpp"
#include "tasks/task.hpp"

namespace kforge::corpus::detail {

struct rows_code {
  std::string types;        ///< KF_NOPS/KF_NOUT, kf_rows, kf_ptrs, index helpers
  std::string grid_helper;  ///< kf_grid
  std::string host;         ///< statements after kf_check_args, up to the launch (`a`, `ptrs`)
  /// Per variant: its name, device code (reducers and kf_rows_kernel) and launch statement.
  std::vector<std::string> names, kernels, launch;
};

result<rows_code> rows_parts(const tasks::task& t, const plan& p);

/// The explanation of a row program's variant.
std::string rows_explanation(const plan& p, const std::string& variant);

}  // namespace kforge::corpus::detail
