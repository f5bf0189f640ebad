// The second translation unit of kforge::tasks that includes LibTorch: compiling and running a
// reference. <torch/jit.h> rather than <torch/torch.h> halves its compile time.
#include "tasks/reference.hpp"
#include "tasks/prepare.hpp"

#include "tasks/aten_convert.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/jit.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

namespace kforge::tasks {
namespace {

std::string torch_message(const std::exception& e) {
  std::string m = e.what();
  if (auto pos = m.find("\nException raised from"); pos != std::string::npos) m.resize(pos);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

using detail::to_at;

// The tensors a TorchScript function returned: one Tensor, a tuple of them, or a list of them
// (forward and prepare alike); `where` starts the error. `list_named`: whether the error's
// "expected" names lists too (prepare's documented returns do, forward's do not).
status tensors_of(const c10::IValue& out, const std::string& where, bool list_named,
                  std::vector<at::Tensor>& list) {
  if (out.isTensor()) {
    list.push_back(out.toTensor());
  } else if (out.isTuple()) {
    for (const auto& v : out.toTupleRef().elements()) {
      if (!v.isTensor())
        return error{where + "returned a tuple holding " + v.tagKind() + "; every element must be a Tensor"};
      list.push_back(v.toTensor());
    }
  } else if (out.isTensorList()) {
    for (const at::Tensor& x : out.toTensorVector()) list.push_back(x);
  } else {
    return error{where + "returned " + out.tagKind() +
                 (list_named ? ", expected a Tensor, a tuple or a list of Tensors"
                             : ", expected a Tensor or a tuple of Tensors")};
  }
  return {};
}

void synchronize(const at::Device& dev) {
  if (dev.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(dev.index());
}

// prepare's compiled unit, one per distinct source: make_inputs runs prepare on every draw of a
// task's inputs, and compiling takes milliseconds that a timed loop of checks should not pay.
// Units are never evicted: a process sees a bounded set of tasks.
result<std::shared_ptr<torch::jit::CompilationUnit>> compiled_prepare(const task& t) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<torch::jit::CompilationUnit>> units;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = units.find(t.prepare); it != units.end()) return it->second;
  const std::string where = "task '" + t.id + "': prepare: ";
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  try {
    unit = torch::jit::compile(t.prepare);
  } catch (const std::exception& e) {
    return error{where + "does not compile: " + torch_message(e)};
  }
  auto* fn = unit->find_function("prepare");
  if (!fn) return error{where + "defines no function `prepare`"};
  const auto& args = fn->getSchema().arguments();
  if (args.size() != t.draws.size())
    return error{where + "takes " + std::to_string(args.size()) + " arguments, the task has " +
                 std::to_string(t.draws.size()) + " draws"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != t.draws[i].name)
      return error{where + "argument " + std::to_string(i) + " is '" + args[i].name() +
                   "', the task's draw " + std::to_string(i) + " is '" + t.draws[i].name +
                   "' (draws are passed in order)"};
    if (args[i].type()->kind() != c10::TypeKind::TensorType)
      return error{where + "argument '" + args[i].name() + "' is " + args[i].type()->str() +
                   ", every argument must be a Tensor"};
  }
  units.emplace(t.prepare, unit);
  return unit;
}

}  // namespace

result<tensor_list> run_prepare(const task& t, const tensor_list& draws) {
  const std::string where = "task '" + t.id + "': prepare: ";
  if (draws.size() != t.draws.size())
    return error{where + "given " + std::to_string(draws.size()) + " draws, the task has " +
                 std::to_string(t.draws.size())};
  auto unit = compiled_prepare(t);
  if (!unit) return unit.err();
  tensor_list inputs;
  try {
    std::vector<c10::IValue> stack(draws.tensors().begin(), draws.tensors().end());
    at::NoGradGuard no_grad;
    torch::jit::GraphOptimizerEnabledGuard no_optimization(false);
    c10::IValue out = (*(*unit)->find_function("prepare"))(std::move(stack));
    auto& list = inputs.tensors();
    if (auto s = tensors_of(out, where, true, list); !s) return s.err();
    if (list.size() != t.inputs.size())
      return error{where + "returned " + std::to_string(list.size()) +
                   " tensors, the task declares " + std::to_string(t.inputs.size()) + " inputs"};
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& in = t.inputs[i];
      if (list[i].scalar_type() != to_at(in.type))
        return error{where + "input '" + in.name + "' has dtype " + inputs.type_name(i) +
                     ", the task declares " + std::string(to_string(in.type))};
      if (inputs.shape_of(i) != in.shape)
        return error{where + "input '" + in.name + "' has shape " + to_string(inputs.shape_of(i)) +
                     ", the task declares " + to_string(in.shape)};
      // Kernels get dense buffers, and a check that poisons or redraws one input must not
      // change another through shared memory.
      bool aliases = false;
      for (std::size_t j = 0; j < i; ++j)
        aliases = aliases || list[i].storage().is_alias_of(list[j].storage());
      if (aliases || !list[i].is_contiguous())
        list[i] = list[i].clone(at::MemoryFormat::Contiguous);
    }
  } catch (const std::exception& e) {
    return error{where + "failed on " +
                 (draws.empty() ? std::string("?") : draws.tensors().front().device().str()) +
                 ": " + torch_message(e)};
  }
  return inputs;
}

struct reference::impl {
  task spec;
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  torch::jit::Function* forward = nullptr;
};

reference::reference(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
reference::reference(reference&&) noexcept = default;
reference& reference::operator=(reference&&) noexcept = default;
reference::~reference() = default;

const task& reference::spec() const { return impl_->spec; }

result<reference> reference::compile(const task& t) {
  const std::string where = "task '" + t.id + "': reference: ";
  auto p = std::make_unique<impl>();
  p->spec = t;
  try {
    p->unit = torch::jit::compile(t.reference);
  } catch (const std::exception& e) {
    return error{where + "does not compile: " + torch_message(e)};
  }
  p->forward = p->unit->find_function("forward");
  if (!p->forward) return error{where + "defines no function `forward`"};
  try {
    const auto& args = p->forward->getSchema().arguments();
    if (args.size() != t.inputs.size())
      return error{where + "forward takes " + std::to_string(args.size()) +
                   " arguments, the task has " + std::to_string(t.inputs.size()) + " inputs"};
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i].name() != t.inputs[i].name)
        return error{where + "forward's argument " + std::to_string(i) + " is '" +
                     args[i].name() + "', the task's input " + std::to_string(i) + " is '" +
                     t.inputs[i].name + "' (inputs are passed in order)"};
      if (args[i].type()->kind() != c10::TypeKind::TensorType)
        return error{where + "argument '" + args[i].name() + "' is " + args[i].type()->str() +
                     ", every argument must be a Tensor (fix scalars in the source)"};
    }
  } catch (const std::exception& e) {
    return error{where + torch_message(e)};
  }
  return reference(std::move(p));
}

result<tensor_list> reference::run(const tensor_list& inputs) const {
  const auto& t = impl_->spec;
  const std::string where = "task '" + t.id + "': reference: ";
  if (inputs.size() != t.inputs.size())
    return error{where + "given " + std::to_string(inputs.size()) + " inputs, the task has " +
                 std::to_string(t.inputs.size())};
  bool primary = true;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    primary = primary && inputs.shape_of(i) == t.inputs[i].shape;

  tensor_list outputs;
  try {
    const auto dev = inputs.tensors().front().device();
    std::vector<c10::IValue> stack;
    for (const auto& x : inputs.tensors()) {
      if (x.device() != dev)
        return error{where + "inputs are on more than one device (" + dev.str() + ", " +
                     x.device().str() + ")"};
      stack.emplace_back(x);
    }
    if (dev.is_cuda()) {
      at::globalContext().setAllowTF32CuBLAS(false);
      at::globalContext().setAllowTF32CuDNN(false);
    }
    at::NoGradGuard no_grad;
    // Per thread: the executor made on first run keeps this setting, and later runs keep it.
    torch::jit::GraphOptimizerEnabledGuard no_optimization(false);
    c10::IValue out = (*impl_->forward)(std::move(stack));

    auto& list = outputs.tensors();
    if (auto s = tensors_of(out, where, false, list); !s) return s.err();

    if (list.size() != t.outputs.size())
      return error{where + "returned " + std::to_string(list.size()) +
                   " tensors, the task declares " + std::to_string(t.outputs.size()) +
                   " outputs"};
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& o = t.outputs[i];
      if (list[i].scalar_type() != to_at(o.type))
        return error{where + "output '" + o.name + "' has dtype " + outputs.type_name(i) +
                     ", the task declares " + std::string(to_string(o.type))};
      if (primary && outputs.shape_of(i) != o.shape)
        return error{where + "output '" + o.name + "' has shape " +
                     to_string(outputs.shape_of(i)) + " at the primary input shapes, the task " +
                     "declares " + to_string(o.shape)};
      // Callers poison and compare outputs in place: an output must own its memory.
      bool aliases = false;
      for (const auto& x : inputs.tensors())
        aliases = aliases || list[i].storage().is_alias_of(x.storage());
      for (std::size_t j = 0; j < i; ++j)
        aliases = aliases || list[i].storage().is_alias_of(list[j].storage());
      if (aliases || !list[i].is_contiguous())
        list[i] = list[i].clone(at::MemoryFormat::Contiguous);
    }
  } catch (const std::exception& e) {
    return error{where + "failed on " + (inputs.empty() ? std::string("?")
                                                        : inputs.tensors().front().device().str()) +
                 ": " + torch_message(e)};
  }
  return outputs;
}

result<std::vector<shape>> reference::output_shapes(
    const std::vector<shape>& input_shapes) const {
  const auto& t = impl_->spec;
  if (input_shapes.size() != t.inputs.size())
    return error{"task '" + t.id + "': output_shapes: given " +
                 std::to_string(input_shapes.size()) + " shapes for " +
                 std::to_string(t.inputs.size()) + " inputs"};
  try {
    std::vector<c10::IValue> stack;
    for (std::size_t i = 0; i < input_shapes.size(); ++i)
      stack.emplace_back(at::empty(input_shapes[i], at::TensorOptions()
                                                        .dtype(to_at(t.inputs[i].type))
                                                        .device(at::kMeta)));
    at::NoGradGuard no_grad;
    torch::jit::GraphOptimizerEnabledGuard no_optimization(false);
    c10::IValue out = (*impl_->forward)(std::move(stack));
    std::vector<shape> shapes;
    auto add = [&](const at::Tensor& x) {
      shapes.emplace_back(x.sizes().begin(), x.sizes().end());
    };
    if (out.isTensor()) {
      add(out.toTensor());
    } else if (out.isTuple()) {
      for (const auto& v : out.toTupleRef().elements()) {
        if (!v.isTensor()) return error{"task '" + t.id + "': reference returned a non-Tensor"};
        add(v.toTensor());
      }
    } else {
      return error{"task '" + t.id + "': reference returned " + out.tagKind()};
    }
    return shapes;
  } catch (const std::exception& e) {
    return error{"task '" + t.id + "': shapes on meta tensors: " + torch_message(e)};
  }
}

result<timing> reference::time(const tensor_list& inputs, int warmup, int trials) const {
  if (inputs.empty() || trials < 1) return error{"time: no inputs or no trials"};
  try {
    const auto dev = inputs.tensors().front().device();
    at::Tensor flush;
    if (dev.is_cuda())
      flush = at::empty({64 << 20}, at::TensorOptions().dtype(at::kFloat).device(dev));
    for (int i = 0; i < warmup; ++i) {
      auto r = run(inputs);
      if (!r) return r.err();
    }
    std::vector<double> ms;
    for (int i = 0; i < trials; ++i) {
      if (flush.defined()) flush.zero_();
      synchronize(dev);
      const auto t0 = std::chrono::steady_clock::now();
      auto r = run(inputs);
      synchronize(dev);
      const auto t1 = std::chrono::steady_clock::now();
      if (!r) return r.err();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    auto at_q = [&](double q) { return ms[static_cast<std::size_t>(q * (ms.size() - 1) + 0.5)]; };
    return timing{at_q(0.5), at_q(0.25), at_q(0.75), trials};
  } catch (const std::exception& e) {
    return error{"task '" + impl_->spec.id + "': timing: " + torch_message(e)};
  }
}

}  // namespace kforge::tasks
