#include "stages/stand_ins.hpp"

#include "agent/episode_turns.hpp"

#include <thread>

#include "common/hash.hpp"

namespace kforge::pipeline {

namespace {

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64: a cheap, well-spread hash step
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class stand_in_tasks final : public actors::task_source {
 public:
  explicit stand_in_tasks(stand_in_options o) : o_(o) {}

  result<std::vector<wire::GenerateRequestT>> next(std::uint64_t step) override {
    static const char* ops[] = {"relu", "sigmoid", "tanh", "gelu", "silu"};
    std::vector<wire::GenerateRequestT> out;
    for (std::uint32_t i = 0; i < o_.requests_per_step; ++i) {
      const auto pick = mix(o_.seed ^ mix(step * 1000003 + i));
      const std::string op = ops[pick % 5];
      const std::int64_t rows = 1024 << (pick >> 8) % 4;
      wire::GenerateRequestT r;
      r.task = std::make_unique<wire::TaskT>();
      r.task->id = std::string(stand_in_label) + "/" + op + "_" + std::to_string(rows);
      r.task->category = "elementwise";
      r.task->description = "Stand-in task: " + op + " of a float32 matrix.";
      r.task->reference = "def forward(x):\n    return torch." + op + "(x)\n";
      r.task->provenance = stand_in_label;
      auto spec = std::make_unique<wire::TensorSpecT>();
      spec->name = "x";
      spec->shape = {rows, 4096};
      r.task->inputs.push_back(std::move(spec));
      auto y = std::make_unique<wire::TensorSpecT>();
      y->name = "y";
      y->shape = {rows, 4096};
      r.task->outputs.push_back(std::move(y));
      r.prompt = "Write a CUDA kernel in the kforge ABI for: " + r.task->reference;
      r.prompt_hash = fnv1a64(r.prompt);
      r.group_size = o_.group_size;
      r.step = step;
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  stand_in_options o_;
};

class stand_in_sampler final : public actors::sampler_logic {
 public:
  explicit stand_in_sampler(stand_in_options o) : o_(o) {}

  result<std::vector<wire::CandidateT>> generate(const wire::GenerateRequest& req,
                                                 const actors::envelope_info& info) override {
    std::vector<wire::CandidateT> out;
    const std::string task = req.task() && req.task()->id() ? req.task()->id()->str() : "";
    const bool repeat = o_.repeat_every > 0 && groups_++ % o_.repeat_every == 0;
    for (std::uint32_t i = 0; i < req.group_size(); ++i) {
      wire::CandidateT c;
      c.task.reset(req.task() ? req.task()->UnPack() : nullptr);
      c.prompt_hash = req.prompt_hash();
      const std::string member = repeat ? "" : "." + std::to_string(i);
      c.source = "// " + std::string(stand_in_label) + " candidate " + std::to_string(info.sample_id) +
                 member + " for " + task + " (no model yet)\n" +
                 "#include <kforge/kernel_abi.h>\n";
      c.code_hash = fnv1a64(c.source);
      c.completion = "```cuda\n" + c.source + "```\n";
      c.episode = agent::first_turn(0, o_.max_turns, version_);
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<result<wire::CandidateT>> next_turns(const std::vector<turn_item>& turns) override {
    std::vector<result<wire::CandidateT>> out;
    for (const auto& t : turns) {
      std::unique_ptr<wire::ScoredT> s(t.observed->UnPack());
      auto n = agent::prepare_next_turn(*s, {});
      if (!n) {
        out.push_back(n.err());
        continue;
      }
      const std::string source = s->verdict->candidate->source + "// turn " + std::to_string(n->episode.turn) + "\n";
      out.push_back(agent::next_turn_candidate(*s, std::move(*n), {}, {}, "```cuda\n" + source + "```\n", source));
    }
    return out;
  }

  status set_weights(const wire::PolicyWeights& w) override {
    version_ = w.version();
    return {};
  }

 private:
  stand_in_options o_;
  std::uint64_t groups_ = 0;  ///< groups generated, for repeat_every
  std::uint64_t version_ = 0;
};

class stand_in_sandbox final : public actors::sandbox_logic {
 public:
  explicit stand_in_sandbox(stand_in_options o) : o_(o) {}

  result<wire::VerdictT> evaluate(const wire::Candidate& c, const actors::envelope_info&) override {
    if (o_.sandbox_delay.count() > 0) std::this_thread::sleep_for(o_.sandbox_delay);
    const auto h = mix(c.code_hash() ^ o_.seed);
    wire::VerdictT v;
    v.candidate.reset(c.UnPack());
    v.worker = stand_in_label;
    v.attempts = 1;
    const auto roll = h % 100;
    if (roll < 60) {
      v.status = wire::VerdictStatus::ok;
      v.candidate_timing = std::make_unique<wire::TimingT>();
      v.baseline_timing = std::make_unique<wire::TimingT>();
      v.baseline_timing->median_ms = 1.0;
      v.baseline_timing->trials = 30;
      v.candidate_timing->median_ms = 0.5 + static_cast<double>((h >> 8) % 1000) / 666.0;
      v.candidate_timing->trials = 30;
    } else if (roll < 80) {
      v.status = wire::VerdictStatus::compile_error;
    } else if (roll < 90) {
      v.status = wire::VerdictStatus::wrong_answer;
      v.max_abs_error = 1.0;
      v.first_bad_index = static_cast<std::int64_t>((h >> 16) % 4096);
    } else {
      v.status = wire::VerdictStatus::runtime_error;
    }
    v.reason = std::string(stand_in_label) +
               " verdict: nothing was compiled or run (the sandbox is not built yet)";
    return v;
  }

 private:
  stand_in_options o_;
};

class stand_in_trainer final : public actors::trainer_logic {
 public:
  explicit stand_in_trainer(stand_in_options o) : o_(o) {}

  result<wire::PolicyWeightsT> train(const wire::TrainBatch& batch,
                                     const actors::envelope_info&) override {
    std::uint64_t sum = 0;
    if (batch.groups())
      for (const auto* g : *batch.groups())
        if (g->samples())
          for (const auto* s : *g->samples()) sum = mix(sum ^ static_cast<std::uint64_t>(s->reward() * 1e6));
    wire::PolicyWeightsT w;
    w.version = ++version_;
    w.transport = wire::WeightsTransport::inline_bytes;
    w.path = stand_in_label;  // no weights exist: nothing was trained
    w.checksum = sum;
    return w;
  }

 private:
  stand_in_options o_;
  std::uint64_t version_ = 0;
};

}  // namespace

std::shared_ptr<actors::task_source> make_stand_in_tasks(const stand_in_options& o) {
  return std::make_shared<stand_in_tasks>(o);
}
std::shared_ptr<actors::sampler_logic> make_stand_in_sampler(const stand_in_options& o) {
  return std::make_shared<stand_in_sampler>(o);
}
std::shared_ptr<actors::sandbox_logic> make_stand_in_sandbox(const stand_in_options& o) {
  return std::make_shared<stand_in_sandbox>(o);
}
std::shared_ptr<actors::trainer_logic> make_stand_in_trainer(const stand_in_options& o) {
  return std::make_shared<stand_in_trainer>(o);
}

}  // namespace kforge::pipeline
