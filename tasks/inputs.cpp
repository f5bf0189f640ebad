// One of the two translation units of kforge::tasks that include LibTorch (reference.cpp is the
// other): tensor_list, input generation, summaries and comparisons. Only ATen is included, which
// compiles in about half the time of <torch/torch.h>.
#include "tasks/inputs.hpp"

#include "tasks/aten_convert.hpp"
#include "tasks/prepare.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "common/hash.hpp"

namespace kforge::tasks {
namespace {

using detail::to_at;

status check_device(const device& d) {
  if (d.type == device::kind::cpu) return {};
  if (!at::hasCUDA()) return error{"device " + d.str() + ": LibTorch sees no CUDA device"};
  const auto n = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
  if (d.index < 0 || d.index >= n)
    return error{"device " + d.str() + ": only " + std::to_string(n) + " CUDA device(s) visible"};
  return {};
}

// A private generator: a clone of the device's default one, reseeded. Torch's global generator is
// never touched, so nothing else in the process can shift these numbers (or be shifted by them).
at::Generator fresh_generator(const at::Device& dev, std::uint64_t seed) {
  at::Generator gen;
  {
    const auto& def = at::globalContext().defaultGenerator(dev);
    std::lock_guard<std::mutex> lock(const_cast<at::Generator&>(def).mutex());
    gen = def.clone();
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return gen;
}

at::Tensor draw(const input_spec& in, const shape& dims, std::uint64_t seed, const device& dev) {
  const auto where = to_at(dev);
  auto gen = fresh_generator(where, seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(where);
  at::Tensor t;
  switch (in.init.dist) {
    case distribution::normal:
      t = at::empty(dims, f32).normal_(in.init.mean, in.init.std, gen);
      break;
    case distribution::uniform:
      t = at::empty(dims, f32).uniform_(in.init.low, in.init.high, gen);
      break;
    case distribution::randint:
      t = at::randint(static_cast<std::int64_t>(in.init.low),
                      static_cast<std::int64_t>(in.init.high), dims, gen,
                      at::TensorOptions().dtype(at::kLong).device(where));
      break;
    case distribution::constant:
      t = at::full(dims, in.init.value, at::TensorOptions().dtype(at::kDouble).device(where));
      break;
  }
  return t.to(to_at(in.type)).contiguous();
}

std::string torch_message(const std::exception& e) {
  // c10::Error messages carry a C++ backtrace after the first line on some builds; the first
  // lines are what a person needs.
  std::string m = e.what();
  if (auto pos = m.find("\nException raised from"); pos != std::string::npos) m.resize(pos);
  return m;
}

}  // namespace

// ---- device --------------------------------------------------------------------------------

result<device> device::parse(const std::string& s) {
  if (s == "cpu") return device::cpu();
  if (s == "cuda") return device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return device::cuda(std::stoi(s.substr(5)));
  return error{"device '" + s + "': expected cpu, cuda or cuda:N"};
}

std::string device::str() const {
  return type == kind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

bool cuda_available() {
  try {
    return at::hasCUDA() && at::detail::getCUDAHooks().getNumGPUs() > 0;
  } catch (const std::exception&) {
    return false;
  }
}

// ---- tensor_list ---------------------------------------------------------------------------

struct tensor_list::impl {
  std::vector<at::Tensor> tensors;
};

tensor_list::tensor_list() : impl_(std::make_unique<impl>()) {}
tensor_list::~tensor_list() = default;
tensor_list::tensor_list(const tensor_list& o) : impl_(std::make_unique<impl>(*o.impl_)) {}
tensor_list& tensor_list::operator=(const tensor_list& o) {
  if (this != &o) *impl_ = *o.impl_;
  return *this;
}
tensor_list::tensor_list(tensor_list&& o) noexcept : impl_(std::make_unique<impl>()) {
  std::swap(impl_, o.impl_);
}
tensor_list& tensor_list::operator=(tensor_list&& o) noexcept {
  std::swap(impl_, o.impl_);
  return *this;
}

std::size_t tensor_list::size() const { return impl_->tensors.size(); }

shape tensor_list::shape_of(std::size_t i) const {
  const auto s = impl_->tensors.at(i).sizes();
  return shape(s.begin(), s.end());
}

result<dtype> tensor_list::type_of(std::size_t i) const {
  switch (impl_->tensors.at(i).scalar_type()) {
    case at::kFloat: return dtype::float32;
    case at::kHalf: return dtype::float16;
    case at::kBFloat16: return dtype::bfloat16;
    case at::kInt: return dtype::int32;
    case at::kLong: return dtype::int64;
    case at::kBool: return dtype::boolean;
    default: return error{"dtype " + type_name(i) + " is not one of " + dtype_names()};
  }
}

std::string tensor_list::type_name(std::size_t i) const {
  return std::string(c10::toString(impl_->tensors.at(i).scalar_type()));
}

void tensor_list::replace(std::size_t i, const tensor_list& from, std::size_t j) {
  impl_->tensors.at(i) = from.impl_->tensors.at(j);
}

tensor_list tensor_list::pick(std::size_t i) const {
  tensor_list one;
  one.impl_->tensors.push_back(impl_->tensors.at(i));
  return one;
}

std::vector<at::Tensor>& tensor_list::tensors() { return impl_->tensors; }
const std::vector<at::Tensor>& tensor_list::tensors() const { return impl_->tensors; }

// ---- inputs --------------------------------------------------------------------------------

std::uint64_t input_seed(std::string_view task_id, std::uint64_t seed, std::string_view input) {
  std::uint64_t h = fnv1a64(task_id.data(), task_id.size());
  const unsigned char sep = 0;
  h = fnv1a64(&sep, 1, h);
  for (int b = 0; b < 8; ++b) {
    const auto byte = static_cast<unsigned char>(seed >> (8 * b));
    h = fnv1a64(&byte, 1, h);
  }
  h = fnv1a64(&sep, 1, h);
  h = fnv1a64(input.data(), input.size(), h);
  return (h ^ (h >> 32)) & 0xffffffffull;
}

namespace {

// One drawn tensor: `spec` (an input, or a draw of a task with prepare) at `dims`.
result<at::Tensor> draw_one(const task& t, const input_spec& spec, const char* kind,
                            const shape& dims, std::uint64_t seed, const device& dev) {
  try {
    return draw(spec, dims, input_seed(t.id, seed, spec.name), dev);
  } catch (const std::exception& e) {
    return error{"task '" + t.id + "': " + kind + " '" + spec.name + "' on " + dev.str() + ": " +
                 torch_message(e)};
  }
}

// The inputs of a task with prepare: every draw drawn as an input is (its own generator, seeded
// from its name), then prepare applied. The reference server and the candidate child both come
// here, so they agree bit for bit as they do on drawn inputs.
result<tensor_list> prepared_inputs(const task& t, std::uint64_t seed, const device& dev) {
  tensor_list draws;
  for (const auto& d : t.draws) {
    auto x = draw_one(t, d, "draw", d.shape, seed, dev);
    if (!x) return x.err();
    draws.tensors().push_back(std::move(x).value());
  }
  return run_prepare(t, draws);
}

}  // namespace

result<tensor_list> make_input(const task& t, std::size_t index, std::uint64_t seed,
                               shape_choice which, const device& dev) {
  if (index >= t.inputs.size())
    return error{"task '" + t.id + "': no input " + std::to_string(index)};
  if (which && *which >= t.variants.size())
    return error{"task '" + t.id + "': no variant " + std::to_string(*which)};
  if (auto s = check_device(dev); !s) return s.err();
  // Derived inputs come only together: input `index` is prepare's output from all the draws.
  if (!t.prepare.empty()) {
    auto all = prepared_inputs(t, seed, dev);
    if (!all) return all.err();
    return all->pick(index);
  }
  const auto& in = t.inputs[index];
  auto x = draw_one(t, in, "input", input_shapes(t, which)[index], seed, dev);
  if (!x) return x.err();
  tensor_list out;
  out.tensors().push_back(std::move(x).value());
  return out;
}

result<tensor_list> make_inputs(const task& t, std::uint64_t seed, shape_choice which,
                                const device& dev) {
  if (!t.prepare.empty()) {
    if (which && *which >= t.variants.size())
      return error{"task '" + t.id + "': no variant " + std::to_string(*which)};
    if (auto s = check_device(dev); !s) return s.err();
    return prepared_inputs(t, seed, dev);
  }
  tensor_list all;
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    auto one = make_input(t, i, seed, which, dev);
    if (!one) return one.err();
    all.tensors().push_back(one->tensors().front());
  }
  return all;
}

result<tensor_list> copy_to(const tensor_list& list, const device& dev) {
  if (auto s = check_device(dev); !s) return s.err();
  try {
    tensor_list out;
    for (const auto& t : list.tensors())
      out.tensors().push_back(
          t.to(to_at(dev), t.scalar_type(), /*non_blocking=*/false, /*copy=*/true));
    return out;
  } catch (const std::exception& e) {
    return error{"copy to " + dev.str() + ": " + torch_message(e)};
  }
}

// ---- summaries and comparison --------------------------------------------------------------

result<std::vector<tensor_summary>> summarize(const tensor_list& list, bool content_hash,
                                              double tiny) {
  try {
    std::vector<tensor_summary> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& t = list.tensors()[i];
      tensor_summary s;
      s.dims = list.shape_of(i);
      s.type = list.type_name(i);
      s.numel = t.numel();
      if (content_hash) {
        const auto host = t.detach().cpu().contiguous();
        s.content_hash = fnv1a64(host.data_ptr(), host.numel() * host.element_size());
      }
      if (s.numel > 0) {
        const bool floating = at::isFloatingType(t.scalar_type());
        if (floating) s.all_finite = at::isfinite(t).all().item<bool>();
        // float32 keeps every float16/bfloat16 value exactly; integers widen to double.
        const auto mag = t.to(floating ? at::kFloat : at::kDouble).abs();
        s.max_abs = mag.max().item<double>();
        if (tiny > 0) {
          const auto nonzero = mag.ne(0);
          const auto n = nonzero.sum().item<std::int64_t>();
          const auto small = nonzero.logical_and(mag.le(tiny)).sum().item<std::int64_t>();
          if (n > 0) s.tiny_fraction = static_cast<double>(small) / static_cast<double>(n);
        }
        const auto flat = t.reshape({-1});
        s.constant = at::equal(flat, flat[0].expand_as(flat));
      }
      out.push_back(std::move(s));
    }
    return out;
  } catch (const std::exception& e) {
    return error{"summarize: " + torch_message(e)};
  }
}

namespace {

// Elements compared at once: a KernelBench output of 1.6 G floats compared whole made five
// temporaries of its size (24 GiB at once, out of GPU memory beside the cached expected outputs);
// in slices of 2^26 (256 MiB as fp32) the comparison needs about 1.5 GiB more than its two tensors.
constexpr std::int64_t compare_slice = std::int64_t{1} << 26;

// One tensor's comparison, accumulated slice by slice over the flattened tensors.
struct tensor_comparison {
  double max_abs = 0, max_rel = 0;
  double excess = -INFINITY;  ///< largest |a - e| - allowed over the bad elements' slices
  std::int64_t bad = 0;
  std::int64_t first_bad = -1;

  void add(const at::Tensor& e, const at::Tensor& a, std::int64_t offset, const tolerance& tol) {
    const bool floating = at::isFloatingType(e.scalar_type());
    // float32 arithmetic is exact enough here: fp16/bf16 widen exactly, and the tolerance is
    // orders of magnitude above float32 rounding of the difference.
    const auto ew = e.to(floating ? at::kFloat : at::kDouble);
    const auto aw = a.to(floating ? at::kFloat : at::kDouble);
    const auto diff = (aw - ew).abs();
    at::Tensor bad_here;
    if (floating) {
      const auto allowed = tol.atol + tol.rtol * ew.abs();
      // `!(diff <= allowed)` also catches NaN; `a == e` lets equal infinities pass.
      bad_here = diff.le(allowed).logical_not().logical_and(aw.ne(ew));
    } else {
      bad_here = aw.ne(ew);
    }
    const auto finite_diff = at::where(at::isnan(diff), at::full({}, INFINITY, diff.options()), diff);
    max_abs = std::max(max_abs, finite_diff.max().item<double>());
    const auto nz = ew.abs() > 0;
    if (nz.any().item<bool>())
      max_rel = std::max(max_rel, (finite_diff.masked_select(nz) / ew.abs().masked_select(nz)).max().item<double>());
    const auto n_bad = bad_here.sum().item<std::int64_t>();
    if (n_bad == 0) return;
    bad += n_bad;
    excess = std::max(excess, (finite_diff - (tol.atol + tol.rtol * ew.abs())).max().item<double>());
    if (first_bad < 0) first_bad = offset + bad_here.to(at::kByte).argmax().item<std::int64_t>();
  }
};

}  // namespace

result<comparison> compare(const tensor_list& expected, const tensor_list& actual,
                           const tolerance& tol) {
  if (expected.size() != actual.size())
    return error{"compare: " + std::to_string(actual.size()) + " tensors, expected " +
                 std::to_string(expected.size())};
  comparison c;
  double worst_excess = -1.0;
  try {
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const auto& e = expected.tensors()[i];
      auto a = actual.tensors()[i].to(e.device());
      if (e.sizes() != a.sizes())
        return error{"compare: tensor " + std::to_string(i) + " has shape " +
                     to_string(actual.shape_of(i)) + ", expected " +
                     to_string(expected.shape_of(i))};
      if (e.scalar_type() != a.scalar_type())
        return error{"compare: tensor " + std::to_string(i) + " has dtype " + actual.type_name(i) +
                     ", expected " + expected.type_name(i)};
      const std::int64_t n = e.numel();
      if (n == 0) continue;
      const auto ef = e.reshape({-1}), af = a.reshape({-1});
      tensor_comparison t;
      for (std::int64_t at = 0; at < n; at += compare_slice) {
        const auto len = std::min(compare_slice, n - at);
        t.add(ef.narrow(0, at, len), af.narrow(0, at, len), at, tol);
      }
      c.max_abs_error = std::max(c.max_abs_error, t.max_abs);
      c.max_rel_error = std::max(c.max_rel_error, t.max_rel);
      if (t.bad == 0) continue;
      c.bad_count += static_cast<std::size_t>(t.bad);
      if (c.close || t.excess > worst_excess) {
        worst_excess = t.excess;
        c.worst_tensor = i;
        c.first_bad = t.first_bad;
      }
      c.close = false;
    }
    return c;
  } catch (const std::exception& e) {
    return error{"compare: " + torch_message(e)};
  }
}

}  // namespace kforge::tasks
