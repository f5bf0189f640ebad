#pragma once
// Tensors without LibTorch in the header: every translation unit that includes torch costs ~20 s
// of CI build time, so task code passes tensors around as an opaque tensor_list. Code that does
// include torch (the sandbox, later) reaches the at::Tensor values through tensors().
// Implemented in tasks/inputs.cpp.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace at {
class Tensor;
}

namespace kforge::tasks {

/// Where tensors live and references run.
struct device {
  enum class kind { cpu, cuda };
  device::kind type = kind::cpu;
  int index = 0;  ///< CUDA ordinal among the visible devices

  static device cpu() { return {}; }
  static device cuda(int index = 0) { return {kind::cuda, index}; }
  /// "cpu", "cuda" or "cuda:N".
  static result<device> parse(const std::string& s);
  std::string str() const;
};

/// Whether LibTorch sees a CUDA device (false on CPU builds).
bool cuda_available();

/// An ordered list of tensors (inputs or outputs of a reference). Copies share storage, like
/// at::Tensor copies; nothing here changes a tensor's values.
class tensor_list {
 public:
  tensor_list();
  ~tensor_list();
  tensor_list(const tensor_list&);
  tensor_list& operator=(const tensor_list&);
  tensor_list(tensor_list&&) noexcept;
  tensor_list& operator=(tensor_list&&) noexcept;

  std::size_t size() const;
  bool empty() const { return size() == 0; }
  shape shape_of(std::size_t i) const;
  /// The element type; an error for a dtype outside the task format (a reference returning
  /// complex or float64, say).
  result<dtype> type_of(std::size_t i) const;
  /// The torch name of the element type ("Float", "Double", ...), for messages.
  std::string type_name(std::size_t i) const;

  /// Entry j of `from` replaces entry i (the same tensor, shared).
  void replace(std::size_t i, const tensor_list& from, std::size_t j);
  /// A list of entry i alone (shared).
  tensor_list pick(std::size_t i) const;

  /// For translation units that include torch.
  std::vector<at::Tensor>& tensors();
  const std::vector<at::Tensor>& tensors() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Facts about one tensor that the degenerate-task checks and reports need.
struct tensor_summary {
  shape dims;
  std::string type;           ///< torch's name, "Float", "Long", ...
  std::int64_t numel = 0;
  bool all_finite = true;     ///< no NaN or Inf (always true for integer tensors)
  bool constant = false;      ///< every element equal (true for one element)
  double max_abs = 0.0;
  std::uint64_t content_hash = 0;  ///< FNV-1a over the bytes (0 unless asked for)
  /// Fraction of the nonzero elements with |v| <= the `tiny` given to summarize (0 if none given).
  double tiny_fraction = 0.0;
};

/// One summary per tensor, computed where the tensors live. The content hash needs the bytes on
/// the CPU (a copy, and about 1 s per GB): ask for it only where that is cheap.
result<std::vector<tensor_summary>> summarize(const tensor_list& list, bool content_hash = true,
                                              double tiny = 0.0);

/// How far `actual` is from `expected` under a tolerance: |a - e| <= atol + rtol * |e|, exact for
/// integer and bool tensors. Shapes and dtypes must agree (else an error).
struct comparison {
  bool close = true;
  std::size_t worst_tensor = 0;   ///< index of the tensor with the largest excess
  double max_abs_error = 0.0;     ///< over all tensors
  double max_rel_error = 0.0;     ///< |a - e| / |e| where |e| > 0, over all tensors
  std::int64_t first_bad = -1;    ///< flat index of the first element out of tolerance, or -1
  std::size_t bad_count = 0;      ///< elements out of tolerance, over all tensors
};
result<comparison> compare(const tensor_list& expected, const tensor_list& actual,
                           const tolerance& tol);

}  // namespace kforge::tasks
