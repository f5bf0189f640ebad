#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "config/manifest.hpp"
#include "stages/sample_buffer.hpp"
#include "stages/stage_factory.hpp"
#include "stages/buffer_stage.hpp"
#include "stages/reward_stage.hpp"
#include "stages/seen_kernels_journal.hpp"
#include "stage_fixtures.hpp"
#include "tests/file_size_limit.hpp"

using namespace kforge;
using kforge::test::scored;

namespace {
std::vector<wire::TrainBatchT> add(pipeline::sample_buffer& b, const messages::envelope& e,
                                   std::uint64_t version = 0) {
  return b.add(*e.as<wire::Scored>(), version);
}
buffer_options opts(int groups_per_batch, int max_staleness = 2,
                    dedup_scope dedup = dedup_scope::group) {
  buffer_options o;
  o.groups_per_batch = groups_per_batch;
  o.max_staleness = max_staleness;
  o.dedup = dedup;
  return o;
}
}  // namespace

TEST_CASE("whole groups are served, groups_per_batch at a time") {
  pipeline::sample_buffer b(opts(2));
  std::vector<wire::TrainBatchT> batches;
  for (std::uint64_t g = 0; g < 4; ++g)
    for (std::uint32_t i = 0; i < 4; ++i) {
      auto out = add(b, scored(g, i, 4, g * 10 + i, 0.1 * i));
      // A batch appears exactly when the second and fourth groups complete.
      CHECK(out.size() == ((i == 3 && g % 2 == 1) ? 1u : 0u));
      for (auto& x : out) batches.push_back(std::move(x));
    }
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].step == 0);
  CHECK(batches[1].step == 1);
  REQUIRE(batches[0].groups.size() == 2);
  CHECK(batches[0].groups[0]->samples.size() == 4);
  CHECK(batches[0].groups[0]->group_id == 0);
  CHECK(b.counters().served == 16);
  CHECK(b.accounted());
}

TEST_CASE("duplicates by (prompt hash, code hash) are dropped and counted") {
  pipeline::sample_buffer b(opts(1));
  (void)add(b, scored(0, 0, 3, 42, 1));
  (void)add(b, scored(0, 1, 3, 42, 1));  // same prompt, same code
  auto out = add(b, scored(0, 2, 3, 43, 0));
  CHECK(b.counters().duplicate == 1);
  REQUIRE(out.size() == 1);
  CHECK(out[0].groups[0]->samples.size() == 2);
  // The group's baseline still sees the dropped repeat: the policy drew kernel 42 twice.
  CHECK(out[0].groups[0]->draw_rewards == std::vector<double>{1, 1, 0});
  // The same code for another prompt is not a duplicate.
  (void)add(b, scored(1, 0, 2, 42, 1));
  CHECK(b.counters().duplicate == 1);
  CHECK(b.accounted());
}

TEST_CASE("dedup scope: a kernel written again for the prompt in a later group") {
  // Group 0 and group 1 share a prompt (two steps of a run); kernel 42 is in both, twice in group 1.
  const auto run = [](dedup_scope scope) {
    pipeline::sample_buffer b(opts(1, 2, scope));
    const std::uint64_t prompt = 7;
    (void)add(b, scored(0, 0, 2, 42, 1, "", prompt));
    (void)add(b, scored(0, 1, 2, 43, 0, "", prompt));
    (void)add(b, scored(1, 0, 3, 42, 1, "", prompt));
    (void)add(b, scored(1, 1, 3, 42, 1, "", prompt));
    auto out = add(b, scored(1, 2, 3, 44, 0, "", prompt));
    CHECK(b.accounted());
    return std::make_pair(b.counters().duplicate, out.empty() ? 0 : out[0].groups[0]->samples.size());
  };
  // group (the default): only the repeat inside group 1 is dropped; 42 and 44 train.
  CHECK(buffer_options{}.dedup == dedup_scope::group);
  CHECK(run(dedup_scope::group) == std::make_pair<std::uint64_t, std::size_t>(1, 2));
  // run: both 42s of group 1 were seen at group 0; 44 alone is left, too small to train.
  CHECK(run(dedup_scope::run) == std::make_pair<std::uint64_t, std::size_t>(2, 0));
  // off: all three train.
  CHECK(run(dedup_scope::off) == std::make_pair<std::uint64_t, std::size_t>(0, 3));
  // Run-wide, the same kernel for another prompt is still not a duplicate.
  pipeline::sample_buffer b(opts(1, 2, dedup_scope::run));
  (void)add(b, scored(0, 0, 2, 42, 1, "", 7));
  (void)add(b, scored(0, 1, 2, 43, 0, "", 7));
  (void)add(b, scored(1, 0, 2, 42, 1, "", 8));
  (void)add(b, scored(1, 1, 2, 43, 0, "", 8));
  CHECK(b.counters().duplicate == 0);
  CHECK(b.counters().served == 4);
}

TEST_CASE("stale samples and groups are dropped as the policy moves on") {
  pipeline::sample_buffer b(opts(2, /*max_staleness=*/1));
  b.set_policy_version(5);
  (void)add(b, scored(0, 0, 2, 1, 1), 3);  // 2 versions old: stale on arrival
  CHECK(b.counters().stale == 1);
  (void)add(b, scored(1, 0, 2, 2, 1), 5);
  (void)add(b, scored(1, 1, 2, 3, 1), 5);
  CHECK(b.ready_groups() == 1);
  b.set_policy_version(7);  // the waiting group is now 2 versions old
  CHECK(b.ready_groups() == 0);
  CHECK(b.counters().stale == 3);
  CHECK(b.accounted());
  // A group that goes stale while still open is dropped when it completes, not served.
  (void)add(b, scored(2, 0, 2, 4, 1), 7);
  b.set_policy_version(9);
  CHECK(add(b, scored(2, 1, 2, 5, 0), 9).empty());
  CHECK(b.counters().stale == 5);
  CHECK(b.ready_groups() == 0);
  CHECK(b.accounted());
}

TEST_CASE("one kept sample is served where the trainer's baseline is the draws and they differ") {
  // Run-wide dedup leaves kernel 44 alone beside a repeat of 42 (reward 1): against the draws
  // {1, 0} it has a signal, against itself none.
  const auto run = [](bool single, double repeat_reward) {
    auto o = opts(1, 2, dedup_scope::run);
    o.serve_single_with_draws = single;
    pipeline::sample_buffer b(o);
    (void)add(b, scored(0, 0, 2, 42, repeat_reward, "", 7));
    (void)add(b, scored(0, 1, 2, 43, 0, "", 7));
    (void)add(b, scored(1, 0, 2, 42, repeat_reward, "", 7));
    auto out = add(b, scored(1, 1, 2, 44, 0, "", 7));
    CHECK(b.accounted());
    return out.empty() ? std::vector<double>{} : out[0].groups[0]->draw_rewards;
  };
  CHECK(run(true, 1) == std::vector<double>{1, 0});
  CHECK(run(false, 1).empty());  // "kept": too small
  CHECK(run(true, 0).empty());   // the draws are all equal: no signal either way
}

TEST_CASE("the pipeline's buffer serves single samples exactly when the trainer's baseline is the draws") {
  // Two groups of two; in each the second member repeats the first's kernel (dropped as a
  // duplicate) with another reward: one kept sample, draws {1, 0}.
  const auto batches = [](group_baseline baseline) {
    auto m = pipeline::default_manifest();
    REQUIRE(m.ok());
    m->trainer.baseline = baseline;
    m->buffer.groups_per_batch = 1;
    auto buffer = pipeline::make_buffer_logic(*m);
    actors::envelope_info info;
    std::size_t n = 0;
    for (std::uint32_t g = 0; g < 2; ++g)
      for (std::uint32_t k = 0; k < 2; ++k) {
        auto e = scored(g, k, 2, 42, k == 0 ? 1.0 : 0.0);
        auto out = buffer->push(*e.as<wire::Scored>(), info);
        REQUIRE(out.ok());
        n += out->batches.size();
      }
    return n;
  };
  CHECK(pipeline::default_manifest()->trainer.baseline == group_baseline::draws);
  CHECK(batches(group_baseline::draws) == 2);
  CHECK(batches(group_baseline::kept) == 0);
}

TEST_CASE("excluded samples complete their group but are never trained on") {
  pipeline::sample_buffer b(opts(1));
  (void)add(b, scored(0, 0, 3, 1, 1));
  (void)add(b, scored(0, 1, 3, 2, 0, "infra_error: GPU lost"));
  auto out = add(b, scored(0, 2, 3, 3, 0.5));
  REQUIRE(out.size() == 1);
  CHECK(out[0].groups[0]->samples.size() == 2);
  CHECK(out[0].groups[0]->draw_rewards == std::vector<double>{1, 0.5});  // no reward: not a draw
  CHECK(b.counters().excluded == 1);
  // A group left with one trainable sample carries no GRPO signal: dropped and counted.
  (void)add(b, scored(1, 0, 2, 4, 1));
  CHECK(add(b, scored(1, 1, 2, 5, 0, "infra_error: x")).empty());
  CHECK(b.counters().groups_too_small == 1);
  CHECK(b.counters().small_group == 1);
  CHECK(b.open_groups() == 0);
  CHECK(b.accounted());
}

TEST_CASE("the buffer stage reports why it dropped samples, as deltas") {
  pipeline::buffer_stage stage(opts(1, /*max_staleness=*/0));
  auto push = [&](const messages::envelope& e, std::uint64_t version) {
    actors::envelope_info info;
    info.policy_version = version;
    auto out = stage.push(*e.as<wire::Scored>(), info);
    REQUIRE(out.ok());
    return out->dropped;
  };
  std::uint64_t dropped = push(scored(0, 0, 3, 42, 1), 0);
  CHECK(dropped == 0);
  dropped += push(scored(0, 1, 3, 42, 1), 0);  // a duplicate; the group waits for its third
  CHECK(dropped == 1);
  auto c = stage.take_counters();
  CHECK(std::map<std::string, std::uint64_t>(c.begin(), c.end()) ==
        std::map<std::string, std::uint64_t>{{"dropped_duplicate", 1}});
  CHECK(stage.take_counters().empty());  // deltas: nothing new since

  dropped += stage.set_policy_version(1);
  dropped += push(scored(1, 0, 2, 7, 1), 0);  // a version old: stale on arrival
  c = stage.take_counters();
  std::map<std::string, std::uint64_t> n(c.begin(), c.end());
  CHECK(n.count("dropped_duplicate") == 0);
  CHECK(n["dropped_stale"] >= 1);
  std::uint64_t parts = 1;  // the duplicate, reported before
  for (const auto& [name, k] : n) parts += k;
  CHECK(parts == dropped);  // the parts add up to the stage's dropped count
}

namespace {
std::vector<std::string> lines_of(const std::filesystem::path& f) {
  std::ifstream in(f);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
// Pushes one group of `codes` for prompt 7; returns how many were dropped as duplicates.
std::uint64_t push_group(actors::buffer_logic& b, std::uint64_t group,
                         const std::vector<std::uint64_t>& codes) {
  std::uint64_t dropped = 0;
  for (std::uint32_t k = 0; k < codes.size(); ++k) {
    actors::envelope_info info;
    auto out = b.push(*scored(group, k, static_cast<std::uint32_t>(codes.size()), codes[k],
                              k % 2 ? 0.0 : 1.0, "", 7)
                           .as<wire::Scored>(),
                      info);
    REQUIRE(out.ok());
    dropped += out->dropped;
  }
  return dropped;
}
}  // namespace

TEST_CASE("a resumed run's buffer knows the kernels the run saw before (dedup = run)") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kforge-seen-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto m = pipeline::default_manifest();
  REQUIRE(m.ok());
  REQUIRE(m->buffer.dedup == dedup_scope::run);
  m->buffer.groups_per_batch = 1;
  const auto current = fs::path(pipeline::seen_kernels_journal::path_in(dir.string()));
  const auto before = [&](int step) {
    return current.parent_path() / ("seen_kernels-before-step-" + std::to_string(step) + ".txt");
  };

  // Leg 1 sees kernels 42 and 43 and writes both down.
  auto leg1 = pipeline::make_run_buffer_logic(*m, dir.string(), std::nullopt);
  REQUIRE(leg1.ok());
  CHECK(push_group(**leg1, 0, {42, 43}) == 0);
  CHECK(lines_of(current).size() == 2);

  // Leg 2, resumed at step 1: 42 is a duplicate, as in one uninterrupted run; 44 is new.
  auto leg2 = pipeline::make_run_buffer_logic(*m, dir.string(), 1);
  REQUIRE(leg2.ok());
  CHECK(lines_of(before(1)).size() == 2);
  CHECK(push_group(**leg2, 1, {42, 44, 45}) == 1);
  CHECK(lines_of(current).size() == 2);  // 44 and 45: this leg's

  // Leg 3, resumed at step 2, starts from both earlier legs; a replay of leg 2 from leg 1's alone.
  // It is resumed twice: the first time it stopped before seeing a kernel (an empty file).
  REQUIRE(pipeline::make_run_buffer_logic(*m, dir.string(), 2).ok());
  CHECK(lines_of(current).empty());
  auto leg3 = pipeline::make_run_buffer_logic(*m, dir.string(), 2);
  REQUIRE_MESSAGE(leg3.ok(), leg3.message());
  CHECK(lines_of(before(2)).size() == 2);
  CHECK(push_group(**leg3, 2, {42, 44, 46}) == 2);
  auto seen = pipeline::seen_kernels_journal::read_before(dir.string(), 1);
  REQUIRE(seen.ok());
  CHECK(seen->size() == 2);
  auto replayed = pipeline::make_buffer_logic(*m, *seen);
  CHECK(push_group(*replayed, 1, {42, 44, 45}) == 1);

  // A new run in the same directory starts with nothing seen and removes the old files.
  auto fresh = pipeline::make_run_buffer_logic(*m, dir.string(), std::nullopt);
  REQUIRE(fresh.ok());
  CHECK_FALSE(fs::exists(before(1)));
  CHECK(push_group(**fresh, 0, {42, 43}) == 0);

  // A damaged record stops the resume with the file and line; group-wide dedup keeps none.
  std::ofstream(before(5)) << "0000000000000007 000000000000002a\nnot a pair\n";
  auto bad = pipeline::make_run_buffer_logic(*m, dir.string(), 5);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find(before(5).string() + ":2: not \"PROMPT_HASH CODE_HASH\"") !=
        std::string::npos);
  fs::remove_all(dir);
  m->buffer.dedup = dedup_scope::group;
  auto group = pipeline::make_run_buffer_logic(*m, dir.string(), std::nullopt);
  REQUIRE(group.ok());
  CHECK_FALSE(fs::exists(current));
}

// A full disk (RLIMIT_FSIZE) refuses a pair: its line is left out whole, and the error names the
// file and the reason.
TEST_CASE("a seen kernel the disk refuses leaves the journal whole and names the file") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("kforge-seen-full-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto j = pipeline::seen_kernels_journal::open(dir.string(), std::nullopt);
  REQUIRE(j.ok());
  REQUIRE(j->append({1, 2}).ok());
  {
    kforge::testing::file_size_limit limit(33 + 10);  // one line and a bit
    auto s = j->append({3, 4});
    REQUIRE_FALSE(s.ok());
    CHECK(s.message() == "buffer: " + j->path() + ": cannot write: File too large");
  }
  CHECK(fs::file_size(j->path()) == 34);
  auto read = pipeline::seen_kernels_journal::read_before(dir.string(), 0);  // no before-step file
  REQUIRE(read.ok());
  fs::rename(j->path(), fs::path(j->path()).parent_path() / "seen_kernels-before-step-1.txt");
  read = pipeline::seen_kernels_journal::read_before(dir.string(), 1);
  REQUIRE_MESSAGE(read.ok(), read.message());
  CHECK(*read == std::vector<pipeline::seen_kernels_journal::pair>{{1, 2}});
  fs::remove_all(dir);
}
