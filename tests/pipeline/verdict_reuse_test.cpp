// Repeated kernels are judged once: the repeat gets a copy of the verdict (its own candidate,
// reused, no milliseconds). With scope group, other groups, other sources and sandbox faults are
// judged; with scope task, an earlier group's verdict for the same prompt and source is copied too.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messages/rollout_generated.h"
#include "stages/verdict_reuse.hpp"

using namespace kforge;

namespace {

// Judges by the source's first word ("ok ...", "wrong ...", "infra ..."); counts its calls and,
// with `hold`, blocks each call until released.
class fake_sandbox final : public actors::sandbox_logic {
 public:
  std::atomic<int> calls{0};
  bool hold = false;
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> waiting{0};
  std::string infra_once;  ///< this source's first judgment is a sandbox fault

  result<wire::VerdictT> evaluate(const wire::Candidate& c, const actors::envelope_info&) override {
    ++calls;
    if (hold) {
      std::unique_lock lock(mu);
      ++waiting;
      cv.wait(lock, [&] { return released; });
    }
    wire::VerdictT v;
    v.candidate.reset(c.UnPack());
    const std::string src = c.source()->str();
    const bool fault = !infra_once.empty() && src == infra_once;
    if (fault) infra_once.clear();
    v.status = fault                        ? wire::VerdictStatus::infra_error
               : src.rfind("ok", 0) == 0    ? wire::VerdictStatus::ok
               : src.rfind("infra", 0) == 0 ? wire::VerdictStatus::infra_error
                                             : wire::VerdictStatus::wrong_answer;
    v.reason = "judged " + src;
    v.compile_ms = 900;
    v.verify_ms = 300;
    v.time_ms = 400;
    v.candidate_timing = std::make_unique<wire::TimingT>();
    v.candidate_timing->median_ms = 1.5;
    return v;
  }
  void release() {
    std::lock_guard lock(mu);
    released = true;
    cv.notify_all();
  }
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    return {{"compile_us", 7}};
  }
};

// A candidate's wire bytes (kept alive by the caller).
std::vector<std::uint8_t> candidate(std::uint64_t group, std::uint32_t index, const std::string& source,
                                    std::uint64_t prompt_hash = 77) {
  wire::CandidateT c;
  c.task = std::make_unique<wire::TaskT>();
  c.task->id = "l1/relu";
  c.prompt_hash = prompt_hash;
  c.group_id = group;
  c.group_index = index;
  c.group_size = 8;
  c.source = source;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::Candidate::Pack(fbb, &c));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

result<wire::VerdictT> judge(pipeline::verdict_reuse& r, std::uint64_t group, std::uint32_t index,
                             const std::string& source, std::uint64_t prompt_hash = 77) {
  const auto bytes = candidate(group, index, source, prompt_hash);
  return r.evaluate(*flatbuffers::GetRoot<wire::Candidate>(bytes.data()), {});
}

std::map<std::string, std::uint64_t> counters(pipeline::verdict_reuse& r) {
  std::map<std::string, std::uint64_t> m;
  for (const auto& [k, v] : r.take_counters()) m[k] += v;
  return m;
}

}  // namespace

TEST_CASE("a repeat within its group gets the first verdict, marked reused, without being judged") {
  auto inner = std::make_shared<fake_sandbox>();
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group);
  auto a = judge(reuse, 1, 0, "ok kernel A");
  REQUIRE(a.ok());
  CHECK_FALSE(a->reused);
  CHECK(a->compile_ms == 900);
  auto b = judge(reuse, 1, 5, "ok kernel A");
  REQUIRE(b.ok());
  CHECK(inner->calls == 1);
  CHECK(b->reused);
  CHECK(b->status == wire::VerdictStatus::ok);
  CHECK(b->reason == "judged ok kernel A");
  REQUIRE(b->candidate_timing);
  CHECK(b->candidate_timing->median_ms == 1.5);  // the speedup the reward reads is the first's
  CHECK(b->compile_ms == 0);
  CHECK(b->verify_ms == 0);
  CHECK(b->time_ms == 0);
  REQUIRE(b->candidate);
  CHECK(b->candidate->group_index == 5);  // its own candidate: the buffer matches it to its sample
  auto c = counters(reuse);
  CHECK(c["reused_verdicts"] == 1);
  CHECK(c["compile_us"] == 7);  // the inner logic's counters pass through
  CHECK(counters(reuse)["reused_verdicts"] == 0);  // deltas

  // Another source in the group, and the same source in another group (other inputs): judged.
  CHECK_FALSE(judge(reuse, 1, 6, "wrong kernel B")->reused);
  CHECK_FALSE(judge(reuse, 2, 0, "ok kernel A")->reused);
  CHECK(inner->calls == 3);
  // A wrong answer is reused like any verdict of the candidate's own making.
  CHECK(judge(reuse, 1, 7, "wrong kernel B")->reused);
  CHECK(inner->calls == 3);
}

TEST_CASE("a sandbox fault is not reused: the repeat is judged itself") {
  auto inner = std::make_shared<fake_sandbox>();
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group);
  CHECK(judge(reuse, 1, 0, "infra lost the GPU")->status == wire::VerdictStatus::infra_error);
  auto again = judge(reuse, 1, 1, "infra lost the GPU");
  CHECK_FALSE(again->reused);
  CHECK(inner->calls == 2);
}

TEST_CASE("a repeat arriving while the first is judged waits for that verdict") {
  auto inner = std::make_shared<fake_sandbox>();
  inner->hold = true;
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group);
  auto first = std::async(std::launch::async, [&] { return judge(reuse, 3, 0, "ok kernel C"); });
  while (inner->waiting.load() == 0) std::this_thread::yield();
  auto repeat = std::async(std::launch::async, [&] { return judge(reuse, 3, 1, "ok kernel C"); });
  CHECK(repeat.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  inner->release();
  auto a = first.get();
  auto b = repeat.get();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK_FALSE(a->reused);
  CHECK(b->reused);
  CHECK(inner->calls == 1);
}

TEST_CASE("only the last max_keys (group, source) pairs are remembered") {
  auto inner = std::make_shared<fake_sandbox>();
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group, 2);
  for (std::uint64_t g : {1, 2, 3}) CHECK_FALSE(judge(reuse, g, 0, "ok kernel")->reused);
  CHECK(judge(reuse, 3, 1, "ok kernel")->reused);
  CHECK(judge(reuse, 2, 1, "ok kernel")->reused);
  CHECK_FALSE(judge(reuse, 1, 1, "ok kernel")->reused);  // forgotten: judged again
  CHECK(inner->calls == 4);
}

TEST_CASE("scope task: a kernel judged for its prompt in an earlier group is copied, not judged") {
  auto inner = std::make_shared<fake_sandbox>();
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::task);
  CHECK_FALSE(judge(reuse, 1, 0, "ok kernel A")->reused);
  CHECK(judge(reuse, 1, 3, "ok kernel A")->reused);  // its group's repeat
  auto later = judge(reuse, 2, 4, "ok kernel A");    // a later group of the same prompt
  REQUIRE(later.ok());
  CHECK(later->reused);
  CHECK(later->status == wire::VerdictStatus::ok);
  REQUIRE(later->candidate_timing);
  CHECK(later->candidate_timing->median_ms == 1.5);
  CHECK(later->compile_ms == 0);
  REQUIRE(later->candidate);
  CHECK(later->candidate->group_id == 2);  // its own candidate, not the first's
  CHECK(later->candidate->group_index == 4);
  CHECK(judge(reuse, 2, 5, "ok kernel A")->reused);  // and that group's own repeat
  CHECK(inner->calls == 1);
  auto c = counters(reuse);
  CHECK(c["reused_verdicts"] == 2);          // within a group
  CHECK(c["reused_earlier_verdicts"] == 1);  // from an earlier group: one per later group

  // Another prompt with the same source, and another source: judged.
  CHECK_FALSE(judge(reuse, 3, 0, "ok kernel A", 78)->reused);
  CHECK_FALSE(judge(reuse, 2, 6, "wrong kernel B")->reused);
  CHECK(inner->calls == 3);
  // A sandbox fault is not handed to a later group either.
  CHECK(judge(reuse, 4, 0, "infra lost the GPU")->status == wire::VerdictStatus::infra_error);
  CHECK_FALSE(judge(reuse, 5, 0, "infra lost the GPU")->reused);
  CHECK(inner->calls == 5);
}

TEST_CASE("scope group: a kernel of an earlier group is judged again, on its own group's inputs") {
  auto inner = std::make_shared<fake_sandbox>();
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group);
  CHECK_FALSE(judge(reuse, 1, 0, "ok kernel A")->reused);
  CHECK_FALSE(judge(reuse, 2, 0, "ok kernel A")->reused);
  CHECK(inner->calls == 2);
  CHECK(counters(reuse).count("reused_earlier_verdicts") == 0);
}

TEST_CASE("a key forgotten after a sandbox fault and judged again is remembered like any other") {
  auto inner = std::make_shared<fake_sandbox>();
  inner->infra_once = "ok kernel K";
  pipeline::verdict_reuse reuse(inner, verdict_reuse_scope::group, 2);
  CHECK(judge(reuse, 1, 0, "ok kernel K")->status == wire::VerdictStatus::infra_error);
  CHECK(judge(reuse, 1, 1, "ok kernel K")->status == wire::VerdictStatus::ok);  // judged again
  CHECK(judge(reuse, 2, 0, "ok kernel A")->status == wire::VerdictStatus::ok);
  // K and A are the last two keys: K's first, forgotten entry must not have evicted K.
  CHECK(judge(reuse, 1, 2, "ok kernel K")->reused);
  CHECK(judge(reuse, 2, 1, "ok kernel A")->reused);
  CHECK(inner->calls == 3);
}
