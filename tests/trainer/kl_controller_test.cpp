#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "trainer/kl_controller.hpp"

using kforge::trainer::kl_controller;
using kforge::trainer::kl_controller_options;
using kforge::trainer::kl_step_mode;

namespace {

kl_controller_options defaults() { return {}; }  // band [1e-3, 5e-3], window 100, x1.5, start 0.04

}  // namespace

TEST_CASE("kl_controller: above the band the coefficient rises one step, below it falls") {
  kl_controller c(defaults());
  CHECK(c.coef() == 0.04);

  auto u = c.update(1e-2);  // window mean 1e-2 > 5e-3
  CHECK(u.accepted);
  CHECK(u.direction == 1);
  CHECK(u.window_mean == doctest::Approx(1e-2));
  CHECK(u.coef == doctest::Approx(0.04 * 1.5));
  CHECK(c.coef() == u.coef);

  kl_controller d(defaults());
  u = d.update(1e-4);  // below 1e-3
  CHECK(u.direction == -1);
  CHECK(d.coef() == doctest::Approx(0.04 / 1.5));
}

TEST_CASE("kl_controller: inside the band the coefficient stays") {
  kl_controller c(defaults());
  for (double kl : {1e-3, 3e-3, 5e-3, 2e-3}) {  // band ends included
    const auto u = c.update(kl);
    CHECK(u.direction == 0);
    CHECK(c.coef() == 0.04);
  }
  CHECK(c.steps() == 4);
}

TEST_CASE("kl_controller: the decision uses the mean over the window, not the last step") {
  kl_controller c(defaults());
  c.update(3e-3);        // in band
  auto u = c.update(6e-3);  // step above band, but mean (3e-3 + 6e-3) / 2 = 4.5e-3 is inside
  CHECK(u.window_mean == doctest::Approx(4.5e-3));
  CHECK(u.direction == 0);
  CHECK(c.coef() == 0.04);
}

TEST_CASE("kl_controller: a step moves the coefficient only where its own KL agrees with the mean") {
  // A default run (2026-12-03): one spike at step 3, then KL at or below the band. The window mean
  // stays above the band for 9 steps; the coefficient used to rise at each (0.018 -> 0.68).
  kl_controller c(defaults());
  const double kl[] = {0, 0, 0.0485, 0, 0, 0, 0.0005, 0.0003, 0.0014, 0.0021, 0.0038};
  int raised = 0;
  for (double k : kl) raised += c.update(k).direction == 1;
  CHECK(raised == 1);  // at the spike itself
  CHECK(c.coef() == doctest::Approx(0.04 / 1.5 / 1.5 * 1.5));
  CHECK(c.window_mean() > 5e-3);  // the mean alone would still say "raise"
  // A step above the band while the mean is still below it leaves the coefficient too.
  kl_controller d(defaults());
  for (int i = 0; i < 10; ++i) d.update(0.0);
  const double low = d.coef();
  const auto u = d.update(6e-3);
  CHECK(u.window_mean < 1e-3);
  CHECK(u.direction == 0);
  CHECK(d.coef() == low);
}

TEST_CASE("kl_controller: the window holds the last 100 steps") {
  kl_controller_options o = defaults();
  o.min_coef = 1e-6;
  kl_controller c(o);
  for (int i = 0; i < 100; ++i) c.update(1.0);  // far above: 100 rises, stopped at max_coef 1.0
  CHECK(c.window_size() == 100);
  CHECK(c.coef() == 1.0);
  // 99 in-band values: the window still holds one 1.0, mean = (1 + 99 * 2e-3) / 100 > 5e-3.
  for (int i = 0; i < 99; ++i) c.update(2e-3);
  CHECK(c.window_size() == 100);
  CHECK(c.window_mean() == doctest::Approx((1.0 + 99 * 2e-3) / 100));
  // The 100th pushes the last 1.0 out: mean 2e-3, in band, no change from here on.
  const double before = c.coef();
  const auto u = c.update(2e-3);
  CHECK(u.window_mean == doctest::Approx(2e-3));
  CHECK(u.direction == 0);
  CHECK(c.coef() == before);
  CHECK(c.steps() == 200);
}

TEST_CASE("kl_controller: bounds are respected in both modes") {
  kl_controller_options o = defaults();
  o.min_coef = 0.01;
  o.max_coef = 0.1;
  kl_controller up(o);
  for (int i = 0; i < 10; ++i) up.update(1.0);
  CHECK(up.coef() == 0.1);
  const auto u = up.update(1.0);
  CHECK(u.direction == 0);  // already at the bound
  kl_controller down(o);
  for (int i = 0; i < 10; ++i) down.update(0.0);
  CHECK(down.coef() == 0.01);

  o.mode = kl_step_mode::additive;
  o.step = 0.015;
  o.min_coef = 0.0;
  kl_controller add(o);
  add.update(1.0);
  CHECK(add.coef() == doctest::Approx(0.055));
  kl_controller sub(o);
  sub.update(0.0);
  CHECK(sub.coef() == doctest::Approx(0.025));
  sub.update(0.0);
  sub.update(0.0);  // 0.025 - 0.015 - 0.015 < 0: clamped to min_coef 0
  CHECK(sub.coef() == 0.0);
  for (int i = 0; i < 200; ++i) sub.update(1.0);  // at 0 in additive mode it can still come back
  CHECK(sub.coef() > 0.0);
}

TEST_CASE("kl_controller: initial coefficient 0 switches the penalty off") {
  kl_controller_options o = defaults();
  o.initial_coef = 0;
  kl_controller c(o);
  const auto u = c.update(1.0);
  CHECK(c.coef() == 0.0);
  CHECK(u.window_mean == 1.0);  // still recorded for the log
}

TEST_CASE("kl_controller: a non-finite KL is rejected and counted") {
  kl_controller c(defaults());
  const auto u = c.update(std::numeric_limits<double>::quiet_NaN());
  CHECK_FALSE(u.accepted);
  CHECK(c.rejected() == 1);
  CHECK(c.steps() == 0);
  CHECK(c.window_size() == 0);
  CHECK(c.coef() == 0.04);
}

TEST_CASE("kl_controller: options are validated with the field named") {
  auto bad = [](auto edit) {
    kl_controller_options o;
    edit(o);
    return validate(o).ok() ? std::string() : validate(o).message();
  };
  CHECK(bad([](auto&) {}).empty());
  CHECK(bad([](auto& o) { o.target_high = o.target_low; }).find("target_high") != std::string::npos);
  CHECK(bad([](auto& o) { o.window = 0; }).find("window") != std::string::npos);
  CHECK(bad([](auto& o) { o.step = 1.0; }).find("step") != std::string::npos);
  CHECK(bad([](auto& o) { o.min_coef = 0; }).find("min_coef") != std::string::npos);
  CHECK(bad([](auto& o) { o.initial_coef = 2.0; }).find("initial_coef") != std::string::npos);
  CHECK_THROWS_AS(kl_controller([] {
                    kl_controller_options o;
                    o.window = 0;
                    return o;
                  }()),
                  std::invalid_argument);
}

TEST_CASE("kl_controller: a checkpointed controller continues exactly like the original") {
  kl_controller a(defaults());
  for (int i = 0; i < 150; ++i) a.update(1e-3 * (1 + (i * 7919) % 13) / 3.0);
  kl_controller b(defaults());
  REQUIRE(b.from_json(a.to_json()).ok());
  CHECK(b.coef() == a.coef());
  CHECK(b.steps() == a.steps());
  CHECK(b.window_size() == a.window_size());
  CHECK(b.window_mean() == a.window_mean());
  for (int i = 0; i < 50; ++i) {
    const double kl = 1e-3 * (1 + (i * 104729) % 11) / 2.0;
    const auto ua = a.update(kl);
    const auto ub = b.update(kl);
    CHECK(ua.coef == ub.coef);  // bit-identical, not approximately
    CHECK(ua.window_mean == ub.window_mean);
  }
  CHECK(a.to_json() == b.to_json());

  CHECK_FALSE(b.from_json("not json").ok());
  CHECK(b.from_json(R"({"version":1,"coef":7.0,"window":[],"steps":0,"rejected":0})")
            .message()
            .find("coef") != std::string::npos);
  CHECK(b.from_json(R"({"version":1,"coef":0.04,"window":[0.1]})").message().find("steps") !=
        std::string::npos);
  CHECK(b.coef() == a.coef());  // failed restores left it alone
}
