#include "tasks/task_wire.hpp"

#include <memory>

namespace kforge::tasks {
namespace {

// tasks::dtype and wire::DType share one numbering (and kf_dtype's); the static_asserts keep it so.
static_assert(static_cast<int>(wire::DType::Float32) == static_cast<int>(dtype::float32));
static_assert(static_cast<int>(wire::DType::Float16) == static_cast<int>(dtype::float16));
static_assert(static_cast<int>(wire::DType::BFloat16) == static_cast<int>(dtype::bfloat16));
static_assert(static_cast<int>(wire::DType::Int32) == static_cast<int>(dtype::int32));
static_assert(static_cast<int>(wire::DType::Int64) == static_cast<int>(dtype::int64));
static_assert(static_cast<int>(wire::DType::Bool) == static_cast<int>(dtype::boolean));

wire::DType to_wire(dtype t) { return static_cast<wire::DType>(static_cast<int>(t)); }

result<dtype> from_wire(wire::DType t, const std::string& field) {
  const int v = static_cast<int>(t);
  if (v < static_cast<int>(wire::DType::MIN) || v > static_cast<int>(wire::DType::MAX))
    return error{field + ": unknown dtype value " + std::to_string(v)};
  return static_cast<dtype>(v);
}

std::unique_ptr<wire::TensorSpecT> spec(const std::string& name, const shape& s, dtype t) {
  auto w = std::make_unique<wire::TensorSpecT>();
  w->name = name;
  w->shape = s;
  w->dtype = to_wire(t);
  return w;
}

std::unique_ptr<wire::TensorSpecT> drawn_spec(const input_spec& in) {
  auto s = spec(in.name, in.shape, in.type);
  s->init = std::make_unique<wire::InitSpecT>();
  s->init->dist = std::string(to_string(in.init.dist));
  s->init->mean = in.init.mean;
  s->init->std = in.init.std;
  s->init->low = in.init.low;
  s->init->high = in.init.high;
  s->init->value = in.init.value;
  s->parameter = in.parameter;
  return s;
}

// `drawn`: whether the spec must carry an init (draws, and inputs of a task without prepare).
result<input_spec> from_wire(const wire::TensorSpecT* s, const std::string& field, bool drawn) {
  if (!s) return error{field + ": missing"};
  input_spec in;
  in.name = s->name;
  in.shape = s->shape;
  auto dt = from_wire(s->dtype, field + ".dtype");
  if (!dt) return dt.err();
  in.type = *dt;
  in.parameter = s->parameter;
  if (!drawn) return in;
  if (!s->init) return error{field + ".init: required field is missing"};
  auto dist = parse_distribution(s->init->dist);
  if (!dist) return error{field + ".init.dist: unknown distribution '" + s->init->dist + "'"};
  in.init = {*dist, s->init->mean, s->init->std, s->init->low, s->init->high, s->init->value};
  return in;
}

}  // namespace

wire::TaskT to_wire(const task& t) {
  wire::TaskT w;
  w.id = t.id;
  w.category = std::string(to_string(t.category));
  w.description = t.description;
  for (const auto& in : t.inputs) w.inputs.push_back(drawn_spec(in));
  for (const auto& d : t.draws) w.draws.push_back(drawn_spec(d));
  w.prepare = t.prepare;
  for (const auto& out : t.outputs) w.outputs.push_back(spec(out.name, out.shape, out.type));
  w.reference = t.reference;
  w.tolerance = std::make_unique<wire::ToleranceT>();
  w.tolerance->atol = t.tolerance.atol;
  w.tolerance->rtol = t.tolerance.rtol;
  for (const auto& v : t.variants) {
    auto sv = std::make_unique<wire::ShapeVariantT>();
    for (const auto& [name, s] : v.shapes) {
      auto ns = std::make_unique<wire::NamedShapeT>();
      ns->name = name;
      ns->shape = s;
      sv->shapes.push_back(std::move(ns));
    }
    w.variants.push_back(std::move(sv));
  }
  w.allow_cublas = t.allow_cublas;
  w.provenance = t.provenance;
  return w;
}

result<task> from_wire(const wire::TaskT& w) {
  const std::string where = "task '" + w.id + "' (wire)";
  auto fail = [&](const std::string& msg) { return error{where + ": " + msg}; };
  task t;
  t.id = w.id;
  auto cat = parse_category(w.category);
  if (!cat) return fail("category: unknown category '" + w.category + "'");
  t.category = *cat;
  t.description = w.description;
  t.prepare = w.prepare;
  for (std::size_t i = 0; i < w.draws.size(); ++i) {
    auto d = from_wire(w.draws[i].get(), "draws[" + std::to_string(i) + "]", true);
    if (!d) return fail(d.message());
    // The task format gives draws no role: a child re-parsing the task would refuse it.
    if (d->parameter) return fail("draws[" + std::to_string(i) + "].parameter: a draw is no input of the reference");
    t.draws.push_back(std::move(d).value());
  }
  for (std::size_t i = 0; i < w.inputs.size(); ++i) {
    auto in = from_wire(w.inputs[i].get(), "inputs[" + std::to_string(i) + "]", t.prepare.empty());
    if (!in) return fail(in.message());
    t.inputs.push_back(std::move(in).value());
  }
  for (std::size_t i = 0; i < w.outputs.size(); ++i) {
    const std::string field = "outputs[" + std::to_string(i) + "]";
    if (!w.outputs[i]) return fail(field + ": missing");
    auto dt = from_wire(w.outputs[i]->dtype, field + ".dtype");
    if (!dt) return fail(dt.message());
    t.outputs.push_back({w.outputs[i]->name, w.outputs[i]->shape, *dt});
  }
  t.reference = w.reference;
  t.tolerance = w.tolerance ? tolerance{w.tolerance->atol, w.tolerance->rtol}
                            : default_tolerance(t.outputs);
  for (std::size_t i = 0; i < w.variants.size(); ++i) {
    variant v;
    if (w.variants[i])
      for (const auto& ns : w.variants[i]->shapes) {
        if (!ns) continue;
        if (!v.shapes.emplace(ns->name, ns->shape).second)
          return fail("variants[" + std::to_string(i) + "]." + ns->name + ": given twice");
      }
    t.variants.push_back(std::move(v));
  }
  t.allow_cublas = w.allow_cublas;
  t.provenance = w.provenance;
  if (auto s = check_task(t); !s) return fail(s.message());
  return t;
}

}  // namespace kforge::tasks
