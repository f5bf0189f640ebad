#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "stages/best_kernels.hpp"
#include "stages/infra_error_log.hpp"
#include "config/manifest.hpp"
#include "stages/reward.hpp"
#include "stages/reward_state_file.hpp"
#include "stages/stage_factory.hpp"
#include "stages/buffer_stage.hpp"
#include "stages/reward_stage.hpp"
#include "stage_fixtures.hpp"
#include "tests/file_size_limit.hpp"

using namespace kforge;
using kforge::test::verdict;
using wire::VerdictStatus;

namespace {
wire::ScoredT score(pipeline::reward_model& m, const messages::envelope& e, std::uint64_t v = 0) {
  return m.score(*e.as<wire::Verdict>(), v);
}
}  // namespace

TEST_CASE("reward follows the formula of docs/architecture.md") {
  pipeline::reward_model m(reward_options{});
  // Wrong answers and compile errors earn nothing.
  CHECK(score(m, verdict("a", VerdictStatus::wrong_answer, 1, 1)).reward == 0);
  CHECK(score(m, verdict("a", VerdictStatus::compile_error, 0, 0)).reward == 0);
  // Equal speed: 0.5 + 0.5 * 1 = 1. Twice as fast: 0.5 + 0.5 * clamp(1 + 2 * 1) = 1.5 (clamped).
  auto same = score(m, verdict("a", VerdictStatus::ok, 2.0, 2.0));
  CHECK(same.reward == doctest::Approx(1.0));
  CHECK(same.speedup == doctest::Approx(1.0));
  CHECK(same.baseline_kind == wire::BaselineKind::reference_eager);
  CHECK(score(m, verdict("a", VerdictStatus::ok, 1.0, 2.0)).reward == doctest::Approx(1.5));
  // 1.25x faster: 0.5 + 0.5 * (1 + 2 * 0.25) = 1.25. Half speed: 0.5 + 0.5 * clamp(0) = 0.5.
  CHECK(score(m, verdict("a", VerdictStatus::ok, 1.6, 2.0)).reward == doctest::Approx(1.25));
  CHECK(score(m, verdict("a", VerdictStatus::ok, 4.0, 2.0)).reward == doctest::Approx(0.5));
  // Alpha and weights come from the options.
  reward_options o;
  o.alpha = 1;
  o.correctness_weight = 1;
  o.speed_weight = 0;
  pipeline::reward_model plain(o);
  CHECK(score(plain, verdict("a", VerdictStatus::ok, 1.0, 2.0)).reward == doctest::Approx(1.0));
}

TEST_CASE("infra errors are excluded, never rewarded") {
  pipeline::reward_model m(reward_options{});
  auto s = score(m, verdict("a", VerdictStatus::infra_error, 0, 0));
  CHECK(s.excluded.find("infra_error") != std::string::npos);
  CHECK(s.excluded.find("GPU lost") != std::string::npos);
  CHECK(m.excluded() == 1);
  CHECK(m.scored() == 0);
}

TEST_CASE("the baseline switches to the best kernel once the median speedup passes 2x") {
  reward_options o;
  o.baseline_check_every = 15;
  pipeline::reward_model m(o);
  // Version 0: three kernels at 3x, 4x and 2.5x over a 10 ms reference.
  for (double gen : {10.0 / 3, 2.5, 4.0}) CHECK(score(m, verdict("t", VerdictStatus::ok, gen, 10), 0).reward > 0);
  CHECK(m.switched_tasks() == 0);
  // Not yet time to check (every 15 versions).
  CHECK(score(m, verdict("t", VerdictStatus::ok, 2.5, 10), 14).baseline_kind ==
        wire::BaselineKind::reference_eager);
  // At version 15 the check runs: median 3x > 2x, so the baseline is now the best kernel, 2.5 ms.
  auto s = score(m, verdict("t", VerdictStatus::ok, 2.5, 10), 15);
  CHECK(m.switched_tasks() == 1);
  CHECK(s.baseline_kind == wire::BaselineKind::best_kernel);
  CHECK(s.baseline_ms == doctest::Approx(2.5));
  CHECK(s.reward == doctest::Approx(1.0));  // equal to the best: speed term 1
  // Another task keeps its own reference baseline.
  CHECK(score(m, verdict("u", VerdictStatus::ok, 5, 10), 15).baseline_kind ==
        wire::BaselineKind::reference_eager);
}

TEST_CASE("reward state survives a checkpoint round trip") {
  pipeline::reward_model a(reward_options{});
  for (double gen : {1.0, 2.0, 3.0}) (void)score(a, verdict("t", VerdictStatus::ok, gen, 10), 0);
  pipeline::reward_model b(reward_options{});
  REQUIRE(b.from_json(a.to_json()).ok());
  CHECK(b.to_json() == a.to_json());
  auto sa = score(a, verdict("t", VerdictStatus::ok, 0.5, 10), 30);
  auto sb = score(b, verdict("t", VerdictStatus::ok, 0.5, 10), 30);
  CHECK(sa.reward == sb.reward);
  CHECK(sa.baseline_ms == sb.baseline_ms);
  CHECK_FALSE(b.from_json("{\"tasks\": 3}").ok());
  CHECK_FALSE(b.from_json("not json").ok());
}

namespace {

std::map<std::string, std::uint64_t> as_map(const std::vector<std::pair<std::string, std::uint64_t>>& v) {
  return {v.begin(), v.end()};
}

/// An ok verdict for `task` whose candidate source is `source`, at gen_ms against a 10 ms reference.
messages::envelope timed_kernel(const std::string& task, double gen_ms, const std::string& source) {
  wire::VerdictT v;
  v.candidate = kforge::test::candidate(task, 7, 0, 1, 42);
  v.candidate->source = source;
  v.status = VerdictStatus::ok;
  v.candidate_timing = std::make_unique<wire::TimingT>();
  v.candidate_timing->median_ms = gen_ms;
  v.baseline_timing = std::make_unique<wire::TimingT>();
  v.baseline_timing->median_ms = 10;
  v.checks = 3;
  return messages::pack(messages::header{}, v);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("reward counters: verdicts per status, speedup buckets, reward sum") {
  pipeline::reward_model m(reward_options{});
  pipeline::reward_counters c;
  auto feed = [&](const messages::envelope& e) {
    const auto& v = *e.as<wire::Verdict>();
    c.add(v, m.score(v, 0));
  };
  feed(verdict("a", VerdictStatus::compile_error, 0, 0));
  feed(verdict("a", VerdictStatus::compile_error, 0, 0));
  feed(verdict("a", VerdictStatus::hack_suspected, 1, 1));
  feed(verdict("a", VerdictStatus::infra_error, 0, 0));  // excluded: no reward, not scored
  feed(verdict("a", VerdictStatus::ok, 2.0, 2.0));        // 1x: reward 1.0
  feed(verdict("a", VerdictStatus::ok, 4.0, 2.0));        // 0.5x (bucket 0.5-1): reward 0.5
  feed(verdict("a", VerdictStatus::ok, 0.5, 2.0));        // 4x (>= 4): reward 1.5 (clamped)
  feed(verdict("a", VerdictStatus::ok, 0, 0));            // no timings: speedup unknown, reward 1
  const auto n = as_map(c.named());
  CHECK(n.at("status_compile_error") == 2);
  CHECK(n.at("status_hack_suspected") == 1);
  CHECK(n.at("status_infra_error") == 1);
  CHECK(n.at("status_ok") == 4);
  CHECK(n.count("status_wrong_answer") == 0);  // zero counters are left out
  CHECK(n.at("speedup_0.5_1") == 1);
  CHECK(n.at("speedup_1_1.5") == 1);
  CHECK(n.at("speedup_ge_4") == 1);
  CHECK(n.count("speedup_lt_0.5") == 0);
  CHECK(n.at("speedup_unknown") == 1);
  CHECK(n.at("scored") == 7);
  CHECK(n.at("reward_sum_micro") == 4'000'000);  // 0 + 0 + 0 + 1 + 0.5 + 1.5 + 1
  // The bucket names are what metrics.jsonl and the report use.
  CHECK(pipeline::status_counter(VerdictStatus::ok) == "status_ok");
  CHECK(std::string(pipeline::speedup_buckets.front().counter) == "speedup_lt_0.5");
}

TEST_CASE("the reward stage hands its counters to the actor as deltas") {
  pipeline::reward_stage st(reward_options{});
  actors::envelope_info info;
  auto e = verdict("a", VerdictStatus::ok, 1.0, 2.0);
  REQUIRE(st.score(*e.as<wire::Verdict>(), info).ok());
  REQUIRE(st.score(*e.as<wire::Verdict>(), info).ok());
  auto first = as_map(st.take_counters());
  CHECK(first.at("status_ok") == 2);
  CHECK(first.at("speedup_2_4") == 2);
  CHECK(first.at("scored") == 2);
  CHECK(first.count("best_updates") == 0);  // no run directory: no best kernels kept
  CHECK(st.take_counters().empty());        // taken: nothing new since
}

TEST_CASE("the best kernel per task is kept, and only a faster one replaces it") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kf-best-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    pipeline::reward_stage st(reward_options{}, dir.string());
    actors::envelope_info info;
    auto offer = [&](double gen, const std::string& src, std::uint64_t version) {
      info.policy_version = version;
      auto e = timed_kernel("l1/relu", gen, src);
      REQUIRE(st.score(*e.as<wire::Verdict>(), info).ok());
    };
    offer(5.0, "// first: 2x", 1);
    offer(2.5, "// faster: 4x", 2);
    offer(4.0, "// slower: 2.5x", 3);
    // A wrong answer never counts, however fast.
    info.policy_version = 4;
    auto wrong = verdict("l1/relu", VerdictStatus::wrong_answer, 0.1, 10);
    REQUIRE(st.score(*wrong.as<wire::Verdict>(), info).ok());
    CHECK(as_map(st.take_counters()).at("best_updates") == 2);
  }
  const auto stem = pipeline::best_kernels::file_stem("l1/relu");
  CHECK(stem == "l1__relu");
  CHECK(slurp(dir / "best" / (stem + ".cu")) == "// faster: 4x");
  const auto j = nlohmann::json::parse(slurp(dir / "best" / (stem + ".json")));
  CHECK(j["task"] == "l1/relu");
  CHECK(j["speedup"].get<double>() == doctest::Approx(4.0));
  CHECK(j["candidate_ms"].get<double>() == doctest::Approx(2.5));
  CHECK(j["baseline_ms"].get<double>() == doctest::Approx(10));
  CHECK(j["policy_version"] == 2);
  CHECK(j["verdict"]["status"] == "ok");
  CHECK(j["verdict"]["checks"] == 3);
  CHECK(j["source"] == stem + ".cu");
  // No temporary files are left behind.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "best")) files += e.is_regular_file();
  CHECK(files == 2);

  // A later run into the same directory keeps a better kernel found earlier.
  {
    pipeline::reward_stage st(reward_options{}, dir.string());
    auto e = timed_kernel("l1/relu", 3.0, "// later, slower");
    REQUIRE(st.score(*e.as<wire::Verdict>(), actors::envelope_info{}).ok());
  }
  CHECK(slurp(dir / "best" / (stem + ".cu")) == "// faster: 4x");
  fs::remove_all(dir);
}

TEST_CASE("an infra_error verdict's reason is written down, the others' are not") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kf-infra-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto path = pipeline::infra_error_log::path_in(dir.string());
  auto feed = [&](pipeline::reward_stage& st, const std::string& task, VerdictStatus status,
                  std::uint64_t version) {
    actors::envelope_info info;
    info.policy_version = version;
    auto e = verdict(task, status, 1.0, 2.0, 7);
    REQUIRE(st.score(*e.as<wire::Verdict>(), info).ok());
  };
  {
    pipeline::reward_stage st(reward_options{}, dir.string());
    feed(st, "l1/relu", VerdictStatus::ok, 1);
    CHECK_FALSE(fs::exists(path));  // nothing to say: no file
    feed(st, "synth/abc", VerdictStatus::infra_error, 2);
    feed(st, "l1/relu", VerdictStatus::wrong_answer, 2);
  }
  {  // another stage into the same file (the head moves a finished leg's away: head.cpp) appends
    pipeline::reward_stage st(reward_options{}, dir.string());
    feed(st, "l1/gelu", VerdictStatus::infra_error, 3);
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["task"] == "synth/abc");
  CHECK(lines[0]["reason"] == "GPU lost");
  CHECK(lines[0]["policy_version"] == 2);
  CHECK(lines[0]["group_id"] == 7);
  CHECK(lines[1]["task"] == "l1/gelu");
  CHECK(lines[1]["policy_version"] == 3);
  {  // the first line written is said at once, the later ones only written
    std::ostringstream said;
    pipeline::infra_error_log log(dir.string(), said);
    auto e = verdict("l1/tanh", VerdictStatus::infra_error, 0, 0);
    CHECK(*log.offer(*e.as<wire::Verdict>(), 4));
    CHECK(*log.offer(*e.as<wire::Verdict>(), 5));
    CHECK(said.str() == "kforge reward: an infra_error verdict (the sandbox's fault; the sample is left "
                        "unscored) for l1/tanh: GPU lost (every one: " + path + ")\n");
  }

  // A directory it cannot write to is an error naming the file, and costs no sample its score.
  fs::remove_all(dir);
  {
    auto e = verdict("a", VerdictStatus::infra_error, 0, 0);
    std::ostringstream said;
    pipeline::infra_error_log missing((dir / "missing").string(), said);
    auto w = missing.offer(*e.as<wire::Verdict>(), 1);
    REQUIRE_FALSE(w.ok());
    CHECK(w.message().find("missing/infra_errors.jsonl") != std::string::npos);
    CHECK_FALSE(missing.offer(*e.as<wire::Verdict>(), 2).ok());
    CHECK(said.str() == "kforge reward: infra_error reason not kept: " + w.message() + "\n");  // once
    pipeline::reward_stage st(reward_options{}, (dir / "missing").string());
    feed(st, "a", VerdictStatus::infra_error, 1);
    CHECK(as_map(st.take_counters()).at("status_infra_error") == 1);
  }
  pipeline::infra_error_log none("");  // no run directory: nothing written, nothing said
  auto e = verdict("a", VerdictStatus::infra_error, 0, 0);
  CHECK_FALSE(*none.offer(*e.as<wire::Verdict>(), 1));
}

// A full disk (RLIMIT_FSIZE) refuses the second line: it is left out whole, and the error names
// the file and the reason.
TEST_CASE("an infra_error reason the disk refuses leaves whole lines and names the file") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kf-infra-full-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto path = pipeline::infra_error_log::path_in(dir.string());
  std::ostringstream said;
  pipeline::infra_error_log log(dir.string(), said);
  auto e = verdict("l1/tanh", VerdictStatus::infra_error, 0, 0);
  REQUIRE(log.offer(*e.as<wire::Verdict>(), 1).ok());
  const auto one_line = fs::file_size(path);
  {
    kforge::testing::file_size_limit limit(one_line + 10);
    auto w = log.offer(*e.as<wire::Verdict>(), 2);
    REQUIRE_FALSE(w.ok());
    CHECK(w.message() == path + ": cannot write: File too large");
  }
  CHECK(fs::file_size(path) == one_line);
  CHECK(said.str().find("infra_error reason not kept: " + path + ": cannot write: File too large") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("best kernel file names are plain, never hidden") {
  using pipeline::best_kernels;
  CHECK(best_kernels::file_stem("l2/conv relu+bias") == "l2__conv_relu_bias");
  CHECK(best_kernels::file_stem("../x") == "_..__x");
  CHECK(best_kernels::file_stem("") == "_");
}

TEST_CASE("a resumed run's reward goes on from the state the last leg left") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kforge-reward-state-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto m = pipeline::default_manifest();
  REQUIRE(m.ok());
  m->reward.baseline_check_every = 1;
  const auto current = fs::path(pipeline::reward_state_file::path_in(dir.string()));
  const auto before = [&](std::uint64_t step) {
    return fs::path(pipeline::reward_state_file::before_path(dir.string(), step));
  };
  const auto score_at = [](actors::reward_logic& r, std::uint64_t version, double gen_ms) {
    actors::envelope_info info;
    info.policy_version = version;
    auto e = verdict("t", VerdictStatus::ok, gen_ms, 10);
    auto s = r.score(*e.as<wire::Verdict>(), info);
    REQUIRE(s.ok());
    REQUIRE(s->has_value());
    return std::move(**s);
  };

  // Leg 1: kernels at 4x and 5x; at version 1 the median (4.5x) is past 2x, so the baseline is
  // the best kernel (2 ms) from then on. The state is written when the version moves on.
  {
    auto leg1 = pipeline::make_run_reward_logic(*m, dir.string(), std::nullopt);
    REQUIRE(leg1.ok());
    (void)score_at(**leg1, 0, 2.5);
    (void)score_at(**leg1, 0, 2.0);
    CHECK_FALSE(fs::exists(current));
    CHECK(score_at(**leg1, 1, 2.0).baseline_kind == wire::BaselineKind::best_kernel);
    REQUIRE(fs::exists(current));
    pipeline::reward_model saved(m->reward);
    REQUIRE(saved.from_json(slurp(current)).ok());
    CHECK(saved.scored() == 2);  // what versions before 1 made of it
  }  // the stage ends: its last sample is written too
  {
    pipeline::reward_model saved(m->reward);
    REQUIRE(saved.from_json(slurp(current)).ok());
    CHECK(saved.scored() == 3);
    CHECK(saved.switched_tasks() == 1);
  }

  // Leg 2, resumed at step 1: the task is still judged against its best kernel, not eager.
  auto leg2 = pipeline::make_run_reward_logic(*m, dir.string(), 1);
  REQUIRE_MESSAGE(leg2.ok(), leg2.message());
  CHECK(fs::exists(before(1)));
  CHECK_FALSE(fs::exists(current));
  auto s = score_at(**leg2, 1, 4.0);
  CHECK(s.baseline_kind == wire::BaselineKind::best_kernel);
  CHECK(s.baseline_ms == doctest::Approx(2.0));
  // Without the state the same sample would be judged against eager (10 ms): 2.5x.
  auto fresh_stage = pipeline::make_replay_reward_logic(*m, std::nullopt);
  REQUIRE(fresh_stage.ok());
  CHECK(score_at(**fresh_stage, 1, 4.0).baseline_kind == wire::BaselineKind::reference_eager);
  // A replay of leg 2 starts where leg 2 started.
  auto state = pipeline::reward_state_file::read_before(dir.string(), 1);
  REQUIRE(state.ok());
  REQUIRE(state->has_value());
  auto replayed = pipeline::make_replay_reward_logic(*m, *state);
  REQUIRE(replayed.ok());
  CHECK(score_at(**replayed, 1, 4.0).reward == s.reward);
  leg2->reset();

  // Leg 2 wrote what it scored when it ended; a leg resumed at step 3 would start from that.
  REQUIRE(fs::exists(current));
  fs::remove(current);
  // A damaged state stops the resume, naming the file; a missing one starts afresh, said.
  std::ofstream(before(3)) << "{\"tasks\": 3}";
  auto bad = pipeline::make_run_reward_logic(*m, dir.string(), 3);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find(before(3).string() + ": reward state") != std::string::npos);
  CHECK(bad.message().find("remove the file") != std::string::npos);
  auto none = pipeline::make_run_reward_logic(*m, dir.string(), 7);
  REQUIRE(none.ok());
  CHECK(score_at(**none, 7, 4.0).baseline_kind == wire::BaselineKind::reference_eager);
  none->reset();

  // A new run in the same directory removes the earlier run's states.
  auto fresh = pipeline::make_run_reward_logic(*m, dir.string(), std::nullopt);
  REQUIRE(fresh.ok());
  CHECK_FALSE(fs::exists(before(1)));
  CHECK_FALSE(fs::exists(current));
  fresh->reset();
  fs::remove_all(dir);
}
