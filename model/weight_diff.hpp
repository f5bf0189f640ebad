#pragma once
// Comparing two models' weights (same architecture; any devices and dtypes), for the tests and
// benches that hold data-parallel ranks and precision modes against each other. Header-only;
// includes LibTorch through model/transformer.hpp.
#include <algorithm>
#include <cmath>

#include "model/transformer.hpp"

namespace kforge::model {

/// Largest |a - b| over every parameter, in double on a's device.
inline double max_weight_difference(const CausalLMImpl& a, const CausalLMImpl& b) {
  double worst = 0;
  const auto pb = b.named_parameters();
  for (const auto& item : a.named_parameters()) {
    const at::Tensor x = item.value().detach().to(at::kDouble);
    const at::Tensor y = pb[item.key()].detach().to(x.device(), at::kDouble);
    worst = std::max(worst, (x - y).abs().max().item<double>());
  }
  return worst;
}

/// Cosine similarity of the updates a - start and b - start over all parameters: 1 when two runs
/// moved the weights the same way, whatever rounding did to single weights.
inline double update_cosine(const CausalLMImpl& a, const CausalLMImpl& b, const CausalLMImpl& start) {
  double ab = 0, aa = 0, bb = 0;
  const auto pb = b.named_parameters(), ps = start.named_parameters();
  for (const auto& item : a.named_parameters()) {
    const at::Tensor x = item.value().detach().to(at::kDouble);
    const at::Tensor s0 = ps[item.key()].detach().to(x.device(), at::kDouble);
    const at::Tensor da = x - s0, db = pb[item.key()].detach().to(x.device(), at::kDouble) - s0;
    ab += (da * db).sum().item<double>();
    aa += (da * da).sum().item<double>();
    bb += (db * db).sum().item<double>();
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace kforge::model
