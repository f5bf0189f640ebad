// `kforge replay` on a synthetic run directory: the recordings are made by calling the real reward
// and buffer logic directly (not through the actors), so a replay through the actors that matches
// them shows the actors add nothing nondeterministic.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "messages/recording.hpp"
#include "config/manifest.hpp"
#include "commands/replay_command.hpp"
#include "stages/stage_factory.hpp"
#include "stage_fixtures.hpp"

using namespace kforge;
namespace fs = std::filesystem;
using wire::VerdictStatus;

namespace {

/// A fresh directory, removed with everything in it at the end of the test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kforge-replay-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path / "recordings");
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string rec(const std::string& name) const { return (path / "recordings" / name).string(); }
};

/// The same payload under a header like the one a stage would have sent it with.
template <class Table>
messages::envelope reheader(const messages::envelope& e, const messages::header& h) {
  std::unique_ptr<typename Table::NativeTableType> native(e.as<Table>()->UnPack());
  return messages::pack(h, *native);
}

messages::header sent_by(const std::string& sender, std::uint64_t id, std::uint64_t sample,
                         std::uint64_t version) {
  return messages::header{id, sample, sender, /*send_time_ns=*/static_cast<std::int64_t>(id) + 1,
                          version};
}

struct timed {
  std::int64_t t;
  messages::envelope env;
};

void write(const std::string& path, const std::string& link, const std::vector<timed>& records) {
  auto w = messages::recording_writer::create(path, link);
  REQUIRE(w.ok());
  for (const auto& r : records) REQUIRE(w->write(r.env, r.t));
  REQUIRE(w->close().ok());
}

/// Groups of 4 candidates over three tasks and four policy versions, with a duplicate, an infra
/// error and a few failures, so baselines, dedup, exclusion and staleness all play a part.
std::vector<timed> make_verdicts() {
  std::vector<timed> out;
  std::uint64_t id = 0;
  for (std::uint64_t g = 0; g < 8; ++g) {
    const auto version = g / 2;
    const std::string task = "task" + std::to_string(g % 3);
    for (std::uint32_t i = 0; i < 4; ++i) {
      auto status = VerdictStatus::ok;
      if (i == 3 && g % 2 == 0) status = VerdictStatus::wrong_answer;
      if (g == 5 && i == 1) status = VerdictStatus::infra_error;
      const std::uint64_t code = (g == 2 && i == 2) ? 1 : 1 + i;  // g2: index 2 duplicates index 0
      auto v = test::verdict(task, status, 1.0 + 0.37 * i + 0.11 * g, 4.0, 1000 + g, i, 4, code);
      const auto h = sent_by("sandbox_pool/0", ++id, 50000 + g * 10 + i, version);
      out.push_back({static_cast<std::int64_t>(1000 * id), reheader<wire::Verdict>(v, h)});
    }
  }
  return out;
}

/// A synthetic run: RUN_DIR/manifest.toml and the verdicts, scored, weights and batches recordings
/// of one process "head", the outputs made by the real logic.
struct synthetic_run {
  temp_dir dir;
  std::size_t verdicts = 0, scored = 0, batches = 0;

  synthetic_run() {
    std::string text(pipeline::default_manifest_text());
    const std::string key = "groups_per_batch = 8";
    REQUIRE(text.find(key) != std::string::npos);
    text.replace(text.find(key), key.size(), "groups_per_batch = 2");
    std::ofstream(dir.path / "manifest.toml") << text;
    auto m = pipeline::parse_manifest(text, "manifest.toml");
    REQUIRE(m.ok());
    REQUIRE(m->buffer.groups_per_batch == 2);

    const auto in = make_verdicts();
    auto reward = pipeline::make_reward_logic(*m, "");
    std::vector<timed> scored_out;
    std::uint64_t id = 0;
    for (const auto& r : in) {
      const auto info = actors::envelope_info::of(r.env.get());
      auto s = reward->score(*r.env.as<wire::Verdict>(), info);
      REQUIRE(s.ok());
      REQUIRE(s->has_value());
      const auto h = sent_by("reward/0", ++id, info.sample_id, info.policy_version);
      scored_out.push_back({r.t + 500, messages::pack(h, **s)});
    }

    // The trainer publishes versions 1..3 while scored samples arrive; the buffer process receives
    // both, interleaved by time. Version 3 arrives early enough to make version-0 samples stale.
    std::vector<timed> weights;
    for (std::uint64_t v = 1; v <= 3; ++v) {
      wire::PolicyWeightsT w;
      w.version = v;
      weights.push_back({static_cast<std::int64_t>(6000 * v + 700),
                         messages::pack(sent_by("trainer/0", v, 0, v), w)});
    }
    auto buffer = pipeline::make_buffer_logic(*m);
    std::vector<timed> batches_out;
    std::uint64_t version = 0;
    std::size_t w = 0;
    for (const auto& s : scored_out) {
      for (; w < weights.size() && weights[w].t < s.t; ++w) {
        const auto v = weights[w].env.as<wire::PolicyWeights>()->version();
        if (v > version) (void)buffer->set_policy_version(version = v);
      }
      auto out = buffer->push(*s.env.as<wire::Scored>(), actors::envelope_info::of(s.env.get()));
      REQUIRE(out.ok());
      for (auto& b : out->batches)
        batches_out.push_back({s.t + 300, messages::pack(sent_by("buffer/0", ++id, 0, version), b)});
    }

    write(dir.rec("verdicts@head.kfrec"), "verdicts", in);
    write(dir.rec("scored@head.kfrec"), "scored", scored_out);
    write(dir.rec("weights@head.kfrec"), "weights", weights);
    write(dir.rec("batches@head.kfrec"), "batches", batches_out);
    verdicts = in.size();
    scored = scored_out.size();
    batches = batches_out.size();
  }

  /// `scored@head.kfrec` with `edit` applied to the records, written to `path`.
  template <class Edit>
  void edit_scored(const std::string& path, Edit edit) const {
    auto r = messages::recording_reader::open(dir.rec("scored@head.kfrec"));
    REQUIRE(r.ok());
    std::vector<timed> records;
    for (auto next = r->next(); next.ok() && next->has_value(); next = r->next())
      records.push_back({(*next)->receive_time_ns, (*next)->env});
    edit(records);
    write(path, "scored", records);
  }
};

struct outcome {
  int code;
  std::string out, err;
};

outcome run(pipeline::replay_options o) {
  std::ostringstream out, err;
  const int code = pipeline::replay(o, out, err);
  return {code, out.str(), err.str()};
}

pipeline::replay_options opts(const std::string& file, const std::string& stage) {
  pipeline::replay_options o;
  o.file = file;
  o.stage = stage;
  return o;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the reward stage reproduces its recorded outputs exactly") {
  synthetic_run r;
  const auto res = run(opts(r.dir.rec("verdicts@head.kfrec"), "reward"));
  INFO(res.out, res.err);
  CHECK(res.code == 0);
  const auto n = std::to_string(r.verdicts);
  CHECK(has(res.out, "reward: " + n + " inputs, " + n + " outputs, " + n + " expected, 0 differ"));
  CHECK(has(res.out, "reproduced exactly"));
  CHECK(has(res.out, "manifest.toml"));  // found next to the recordings, not the default
}

TEST_CASE("the buffer stage reproduces its batches, given the weights it received") {
  synthetic_run r;
  REQUIRE(r.batches >= 2);
  const auto res = run(opts(r.dir.rec("scored@head.kfrec"), "buffer"));
  INFO(res.out, res.err);
  CHECK(res.code == 0);
  CHECK(has(res.out, "weights@head.kfrec"));
  CHECK(has(res.out, "(+ 3 weights)"));
  CHECK(has(res.out, ", 0 differ"));
  CHECK_FALSE(has(res.err, "dedup"));  // the default manifest sets it

  // A manifest.toml from before [buffer] dedup existed: the replay says which dedup it uses.
  {
    const auto path = r.dir.path / "manifest.toml";
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    std::string t = text.str();
    const std::string key = "\ndedup = \"run\"\n";
    REQUIRE(t.find(key) != std::string::npos);
    std::ofstream(path) << t.replace(t.find(key), key.size(), "\n");
    const auto old = run(opts(r.dir.rec("scored@head.kfrec"), "buffer"));
    CHECK(has(old.err, "sets no [buffer] dedup"));
    CHECK(has(old.err, "add dedup = \"run\""));
    std::ofstream(path) << text.str();
  }

  // Without the weights the batches carry another policy version (and staleness differs): the
  // replay must notice, which shows the weights really are merged in.
  fs::remove(r.dir.rec("weights@head.kfrec"));
  const auto bare = run(opts(r.dir.rec("scored@head.kfrec"), "buffer"));
  INFO(bare.out, bare.err);
  CHECK(bare.code == 1);
  CHECK(has(bare.err, "replaying without weights"));
  CHECK(has(bare.out, "NOT reproduced"));
}

TEST_CASE("a changed reward is reported with its index and field") {
  synthetic_run r;
  const auto tampered = (r.dir.path / "tampered.kfrec").string();
  r.edit_scored(tampered, [](std::vector<timed>& recs) {
    auto& e = recs.at(7).env;
    std::unique_ptr<wire::ScoredT> s(e.as<wire::Scored>()->UnPack());
    s->reward += 0.25;
    messages::header h{e->message_id(), e->sample_id(), e->sender()->str(), e->send_time_ns(),
                       e->policy_version()};
    e = messages::pack(h, *s);
  });
  auto o = opts(r.dir.rec("verdicts@head.kfrec"), "reward");
  o.expect = tampered;
  const auto res = run(o);
  INFO(res.out, res.err);
  CHECK(res.code == 1);
  CHECK(has(res.out, ", 1 differ"));
  CHECK(has(res.out, "output #7 (sample "));
  CHECK(has(res.out, "payload.reward"));
  CHECK(has(res.out, "NOT reproduced"));
}

TEST_CASE("a difference below JSON's printed precision is still a difference") {
  synthetic_run r;
  const auto tampered = (r.dir.path / "tiny.kfrec").string();
  r.edit_scored(tampered, [](std::vector<timed>& recs) {
    auto& e = recs.at(0).env;
    std::unique_ptr<wire::ScoredT> s(e.as<wire::Scored>()->UnPack());
    REQUIRE(s->reward > 0);
    s->reward = std::nextafter(s->reward, 10.0);  // one ulp: invisible in 12 printed digits
    messages::header h{e->message_id(), e->sample_id(), e->sender()->str(), e->send_time_ns(),
                       e->policy_version()};
    e = messages::pack(h, *s);
  });
  auto o = opts(r.dir.rec("verdicts@head.kfrec"), "reward");
  o.expect = tampered;
  const auto res = run(o);
  INFO(res.out, res.err);
  CHECK(res.code == 1);
  CHECK(has(res.out, "output #0 (sample "));
  CHECK(has(res.out, "payload.reward: replayed "));
  CHECK(has(res.out, "beyond JSON's precision"));
}

TEST_CASE("a missing expected output and an extra one are differences") {
  synthetic_run r;
  const auto shorter = (r.dir.path / "shorter.kfrec").string();
  r.edit_scored(shorter, [](std::vector<timed>& recs) { recs.pop_back(); });
  auto o = opts(r.dir.rec("verdicts@head.kfrec"), "reward");
  o.expect = shorter;
  const auto res = run(o);
  INFO(res.out, res.err);
  CHECK(res.code == 1);
  CHECK(has(res.out, ", 0 differ"));
  CHECK(has(res.out, "extra: 1 output(s) produced but not recorded, first #" +
                         std::to_string(r.scored - 1)));

  // Fewer inputs than the recorded outputs: the missing ones are named.
  const auto fewer = (r.dir.path / "recordings" / "fewer@head.kfrec").string();
  {
    auto rd = messages::recording_reader::open(r.dir.rec("verdicts@head.kfrec"));
    REQUIRE(rd.ok());
    std::vector<timed> recs;
    for (auto next = rd->next(); next.ok() && next->has_value(); next = rd->next())
      recs.push_back({(*next)->receive_time_ns, (*next)->env});
    recs.resize(recs.size() - 2);
    write(fewer, "verdicts", recs);
  }
  const auto miss = run(opts(fewer, "reward"));
  INFO(miss.out, miss.err);
  CHECK(miss.code == 1);
  CHECK(has(miss.out, "missing: 2 recorded output(s) not produced"));
}

TEST_CASE("usage errors: unknown stage, wrong link, ambiguous expected outputs") {
  synthetic_run r;
  const auto verdicts = r.dir.rec("verdicts@head.kfrec");
  for (const char* stage : {"sampler", "trainer", "no_such_stage"}) {
    const auto res = run(opts(verdicts, stage));
    INFO(stage, res.err);
    CHECK(res.code == 2);
    CHECK(has(res.err, "Replayable stages: reward, buffer"));
    CHECK(has(res.err, "stand-in"));
  }
  // A verdicts recording is not the buffer's input.
  const auto wrong = run(opts(verdicts, "buffer"));
  CHECK(wrong.code == 2);
  CHECK(has(wrong.err, "records link \"verdicts\""));
  // Two candidates for the expected outputs: ask for --expect rather than guess.
  fs::copy_file(r.dir.rec("scored@head.kfrec"), r.dir.rec("scored@other.kfrec"));
  const auto two = run(opts(verdicts, "reward"));
  CHECK(two.code == 2);
  CHECK(has(two.err, "--expect"));
}

TEST_CASE("a truncated or foreign input recording is named, with exit code 1") {
  synthetic_run r;
  const auto truncated = r.dir.rec("truncated@head.kfrec");
  fs::copy_file(r.dir.rec("verdicts@head.kfrec"), truncated);
  fs::resize_file(truncated, fs::file_size(truncated) - 5);
  const auto cut = run(opts(truncated, "reward"));
  INFO(cut.err);
  CHECK(cut.code == 1);
  CHECK(has(cut.err, truncated));
  CHECK(has(cut.err, "truncated"));

  // A header written under another message schema.
  const auto foreign = r.dir.rec("foreign@head.kfrec");
  {
    const std::string meta = R"({"schema_hash":"0123456789abcdef","link":"verdicts"})";
    std::ofstream f(foreign, std::ios::binary);
    f << "KFREC001";
    for (int i = 0; i < 4; ++i) f.put(static_cast<char>((meta.size() >> (8 * i)) & 0xff));
    f << meta;
  }
  const auto alien = run(opts(foreign, "reward"));
  INFO(alien.err);
  CHECK(alien.code == 1);
  CHECK(has(alien.err, foreign));
  CHECK(has(alien.err, "schema"));
}

TEST_CASE("a resumed leg's reward replays from the state it started from") {
  synthetic_run r;
  auto m = pipeline::parse_manifest(pipeline::default_manifest_text(), "manifest.toml");
  REQUIRE(m.ok());
  // Where the leg resumed at step 3 started: task0's baseline already switched to a 0.5 ms kernel,
  // so its kernels score lower than against the 4 ms reference.
  const auto state_file = r.dir.path / "reward" / "state-before-step-3.json";
  fs::create_directories(state_file.parent_path());
  const std::string state =
      R"({"last_check":0,"scored":3,"excluded":0,"tasks":{"task0":{"reference_ms":4.0,)"
      R"("best_ms":0.5,"speedups":[8.0,8.0,8.0],"switched":true}}})";
  std::ofstream(state_file) << state;
  // The leg's recordings: its reward's outputs from that state, and the trainer's "resume"
  // message at version 3 first in its weights.
  const auto in = make_verdicts();
  auto reward = pipeline::make_replay_reward_logic(*m, state);
  REQUIRE(reward.ok());
  std::vector<timed> scored_out;
  std::uint64_t id = 0;
  for (const auto& rec : in) {
    const auto info = actors::envelope_info::of(rec.env.get());
    auto s = (*reward)->score(*rec.env.as<wire::Verdict>(), info);
    REQUIRE(s.ok());
    scored_out.push_back({rec.t + 500, messages::pack(sent_by("reward/0", ++id, info.sample_id,
                                                              info.policy_version), **s)});
  }
  write(r.dir.rec("scored@head.kfrec"), "scored", scored_out);
  wire::PolicyWeightsT w;
  w.version = 3;
  write(r.dir.rec("weights@head.kfrec"), "weights", {{10, messages::pack(sent_by("resume", 1, 0, 3), w)}});

  const auto res = run(opts(r.dir.rec("verdicts@head.kfrec"), "reward"));
  INFO(res.out, res.err);
  CHECK(res.code == 0);
  CHECK(has(res.out, "the leg resumed at step 3: its reward starts from " + state_file.string()));
  CHECK(has(res.out, ", 0 differ"));

  // Without the state file the same leg does not replay: the state is what made its rewards.
  fs::rename(state_file, r.dir.path / "aside.json");
  const auto bare = run(opts(r.dir.rec("verdicts@head.kfrec"), "reward"));
  CHECK(bare.code == 1);
  CHECK(has(bare.out, "its reward had no saved state to start from"));
  CHECK(has(bare.out, "NOT reproduced"));
  fs::rename(r.dir.path / "aside.json", state_file);

  // No weights recording to tell the resume step: said, and replayed from a fresh state.
  fs::remove(r.dir.rec("weights@head.kfrec"));
  const auto unknown = run(opts(r.dir.rec("verdicts@head.kfrec"), "reward"));
  CHECK(unknown.code == 1);
  CHECK(has(unknown.err, "note: cannot tell: the run was resumed"));
  CHECK(has(unknown.err, "replaying from a fresh reward state"));
  // A weights recording that cannot be read stops the replay, naming it.
  std::ofstream(r.dir.rec("weights@head.kfrec")) << "not a recording";
  const auto broken = run(opts(r.dir.rec("verdicts@head.kfrec"), "reward"));
  CHECK(broken.code == 1);
  CHECK(has(broken.err, "weights@head.kfrec"));
  CHECK_FALSE(has(broken.out, "reward: 32 inputs"));  // stopped before replaying anything
}
