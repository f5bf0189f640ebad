// The head's reading of the stage metrics: when the loop has run dry (pipeline/run_metrics.hpp).

#include <doctest/doctest.h>

#include "pipeline/run_metrics.hpp"

namespace {

namespace wire = kforge::wire;

using kforge::pipeline::loop_ran_dry;
using kforge::pipeline::metrics_board;

void row(metrics_board& b, const std::string& kind, std::uint64_t received, std::uint64_t sent,
         std::uint64_t judged = 0) {
  wire::StageMetricsT m;
  m.stage = kind;
  m.kind = kind;
  m.process = "head";
  m.received = received;
  m.sent = sent;
  if (judged > 0) {
    auto c = std::make_unique<wire::CounterT>();
    c->name = "groups_judged";
    c->value = judged;
    m.extra.push_back(std::move(c));
  }
  b.latest[kind] = std::move(m);
}

}  // namespace

TEST_CASE("the loop has run dry when every requested group is judged and the trainer is idle") {
  metrics_board b;
  row(b, "task_generator", 0, 24, 24);  // 3 steps of 8 groups requested, all judged
  row(b, "buffer", 192, 2);             // 2 batches sent; the third is short (groups dropped)
  row(b, "trainer", 2, 2);              // both trained and published
  CHECK(loop_ran_dry(b));

  SUBCASE("a group still out (generating, in the sandbox) is work in progress") {
    row(b, "task_generator", 0, 24, 23);
    CHECK_FALSE(loop_ran_dry(b));
  }
  SUBCASE("a trainer inside a step is work in progress") {
    row(b, "trainer", 3, 2);
    row(b, "buffer", 192, 3);
    CHECK_FALSE(loop_ran_dry(b));
  }
  SUBCASE("a batch the trainer has not reported receiving is in transit (or the trainer is busy)") {
    row(b, "buffer", 192, 3);
    CHECK_FALSE(loop_ran_dry(b));
  }
  SUBCASE("a trainer step that failed is finished too") {
    row(b, "trainer", 3, 2);
    b.latest["trainer"].errors = 1;
    row(b, "buffer", 192, 3);
    CHECK(loop_ran_dry(b));
  }
  SUBCASE("nothing requested yet is a run starting, not a dry loop") {
    metrics_board empty;
    row(empty, "buffer", 0, 0);
    CHECK_FALSE(loop_ran_dry(empty));
  }
}
