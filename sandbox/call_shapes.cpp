#include "sandbox/call_shapes.hpp"

namespace kforge::sandbox {

namespace {

std::string shape_text(const tasks::shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// "name dtype [shape]" for each tensor, named from `specs` where it has them; `budget` is how
/// many may still be named, and falls by those named.
template <class Spec>
std::string list(const std::vector<Spec>& specs, const std::vector<tasks::shape>& shapes, const char* unnamed,
                 std::size_t& budget) {
  std::string out;
  std::size_t named = 0;
  for (; named < shapes.size() && named < budget; ++named) {
    if (named) out += ", ";
    if (named < specs.size())
      out += specs[named].name + " " + std::string(tasks::to_string(specs[named].type)) + " ";
    else
      out += std::string(unnamed) + " " + std::to_string(named) + " ";
    out += shape_text(shapes[named]);
  }
  budget -= named;
  if (named < shapes.size()) out += (named ? ", and " : "") + std::to_string(shapes.size() - named) + " more";
  return out;
}

}  // namespace

std::string describe_call(const tasks::task& t, const std::vector<tasks::shape>& inputs,
                          const std::vector<tasks::shape>& outputs, std::size_t max_tensors) {
  std::size_t budget = max_tensors;
  std::string out = "called with " + list(t.inputs, inputs, "input", budget);
  return out + "; outputs " + list(t.outputs, outputs, "output", budget);
}

}  // namespace kforge::sandbox
