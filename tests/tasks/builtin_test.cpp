// The built-in library as data: it parses, is big and varied enough, and every task carries a
// small variant for CI and primary shapes big enough to time on an H200.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "tasks/builtin.hpp"

using namespace kforge::tasks;

namespace {

std::int64_t input_bytes(const task& t, shape_choice which) {
  std::int64_t n = 0;
  const auto shapes = input_shapes(t, which);
  for (std::size_t i = 0; i < t.inputs.size(); ++i)
    n += numel(shapes[i]) * static_cast<std::int64_t>(element_size(t.inputs[i].type));
  return n;
}

std::int64_t output_bytes(const task& t) {
  std::int64_t n = 0;
  for (const auto& o : t.outputs)
    n += numel(o.shape) * static_cast<std::int64_t>(element_size(o.type));
  return n;
}

}  // namespace

TEST_CASE("the built-in library parses: >= 150 tasks, unique ids, every category") {
  auto tasks = builtin_tasks();
  REQUIRE_MESSAGE(tasks.ok(), (tasks.ok() ? "" : tasks.message()));
  CHECK(tasks->size() >= 150);
  std::set<std::string> ids;
  std::map<category, int> per_category;
  for (const auto& t : *tasks) {
    CHECK(ids.insert(t.id).second);
    ++per_category[t.category];
    CHECK(t.provenance.rfind("builtin:", 0) == 0);
    CHECK_FALSE(t.description.empty());
  }
  for (auto c : {category::elementwise, category::reduction, category::normalization,
                 category::gemm, category::conv, category::fused, category::other})
    CHECK_MESSAGE(per_category[c] >= 10, to_string(c));
  CHECK(builtin_files().size() == 7);
}

TEST_CASE("every built-in task has a small variant for CI and big primary shapes") {
  auto tasks = builtin_tasks();
  REQUIRE(tasks.ok());
  for (const auto& t : *tasks) {
    INFO(t.id);
    REQUIRE_FALSE(t.variants.empty());
    const auto small = smallest_shapes(t);
    REQUIRE(small.has_value());
    // A CPU runs the small shapes in CI: keep them to at most a few MB of input.
    CHECK(input_bytes(t, small) <= (4 << 20));
    // Memory-bound tasks must move well over 100 MB to take >= 0.1 ms on an H200; compute-bound
    // ones (GEMM, convolution) move fewer bytes. The GPU test checks the time itself.
    CHECK(input_bytes(t, std::nullopt) + output_bytes(t) >= (8 << 20));
  }
}
