#include "model/generate.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

namespace kforge::model {
namespace {

status check_tokens(const std::vector<std::int64_t>& ids, std::int64_t vocab, const std::string& what) {
  for (auto id : ids)
    if (id < 0 || id >= vocab)
      return error{what + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                   std::to_string(vocab) + ")"};
  return status::success();
}

at::TensorOptions param_options(CausalLMImpl& model) {
  const at::Tensor w = model.output_weight();
  return at::TensorOptions().dtype(w.scalar_type()).device(w.device());
}

// Keeps the top_k largest logits and the top-p nucleus (transformers' TopK / TopP warpers), the
// rest set to -inf. logits [R, V] fp32, already divided by the temperature.
at::Tensor truncate(at::Tensor logits, std::int64_t top_k, double top_p) {
  const double ninf = -std::numeric_limits<double>::infinity();
  const std::int64_t V = logits.size(-1);
  if (top_k > 0 && top_k < V) {
    const at::Tensor kth = std::get<0>(at::topk(logits, top_k, -1)).narrow(-1, top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, ninf);
  }
  if (top_p < 1.0) {
    auto sorted = at::sort(logits, -1, /*descending=*/true);
    const at::Tensor& values = std::get<0>(sorted);
    const at::Tensor& order = std::get<1>(sorted);
    const at::Tensor probs = at::softmax(values, -1);
    // Drop a token when the tokens ranked above it already reach top_p (the first always stays).
    const at::Tensor drop_sorted = (at::cumsum(probs, -1) - probs) >= top_p;
    const at::Tensor drop = at::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
    logits = logits.masked_fill(drop, ninf);
  }
  return logits;
}

/// The device is held from the first kernel launch to each wait for the device, and let go while
/// the host waits (sampling_options::device_use).
struct device_window {
  const std::function<void(bool)>& use;
  bool held = false;
  void enter() {
    if (use && !held) use(true);
    held = true;
  }
  void leave() {
    if (use && held) use(false);
    held = false;
  }
  ~device_window() { leave(); }
};

/// The arguments' errors; the longest prompt's length when there are none.
result<std::size_t> check_generate_args(const std::vector<std::vector<std::int64_t>>& prompts,
                                        const sampling_options& o, std::int64_t vocab) {
  if (prompts.empty()) return error{"generate: no prompts"};
  if (o.n < 1) return error{"generate: n must be at least 1"};
  if (o.max_new_tokens < 1) return error{"generate: max_new_tokens must be at least 1"};
  if (!(o.temperature >= 0)) return error{"generate: temperature must be >= 0"};
  if (!(o.top_p > 0 && o.top_p <= 1)) return error{"generate: top_p must be in (0, 1]"};
  if (o.top_k < 0) return error{"generate: top_k must be >= 0"};
  if (o.check_stops_every < 0) return error{"generate: check_stops_every must be >= 0"};
  if (!o.prompt_seeds.empty() && o.prompt_seeds.size() != prompts.size())
    return error{"generate: " + std::to_string(o.prompt_seeds.size()) + " prompt seeds for " +
                 std::to_string(prompts.size()) + " prompts"};
  if (!o.prompt_n.empty() && o.prompt_n.size() != prompts.size())
    return error{"generate: " + std::to_string(o.prompt_n.size()) + " sample counts for " +
                 std::to_string(prompts.size()) + " prompts"};
  for (std::size_t i = 0; i < o.prompt_n.size(); ++i)
    if (o.prompt_n[i] < 1) return error{"generate: prompt " + std::to_string(i) + "'s sample count must be at least 1"};
  std::size_t longest = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return error{"generate: prompt " + std::to_string(i) + " is empty"};
    auto s = check_tokens(prompts[i], vocab, "generate: prompt " + std::to_string(i));
    if (!s) return s.err();
    longest = std::max(longest, prompts[i].size());
  }
  if (auto s = check_tokens({o.pad_token}, vocab, "generate: pad_token"); !s) return s.err();
  return longest;

}

/// Each prompt's sample count: prompt_n, or n for every prompt.
std::vector<std::int64_t> sample_counts(const sampling_options& o, std::size_t prompts) {
  return o.prompt_n.empty() ? std::vector<std::int64_t>(prompts, o.n) : o.prompt_n;
}

/// The uniforms of inverse-CDF sampling, [N, R] fp32 on `dev`: one per original row every step,
/// drawn from CPU generators (the whole run's seed, or each prompt's block of rows from its own
/// seed) so that they are reproducible on any device.
at::Tensor draw_uniforms(const sampling_options& o, const std::vector<std::int64_t>& counts, std::int64_t R,
                         std::int64_t N, const at::Device& dev) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor u;
  if (o.prompt_seeds.empty()) {
    at::Generator gen = at::detail::createCPUGenerator(o.seed);
    u = at::rand({N, R}, gen, f64);
  } else {  // [N, count] per prompt
    std::vector<at::Tensor> blocks;
    blocks.reserve(counts.size());
    for (std::size_t p = 0; p < counts.size(); ++p) {
      at::Generator gen = at::detail::createCPUGenerator(o.prompt_seeds[p]);
      blocks.push_back(at::rand({N, counts[p]}, gen, f64));
    }
    u = at::cat(blocks, 1);
  }
  return u.to(dev).to(at::kFloat);
}

/// Inverse-CDF sampling from the top-k / top-p truncated distribution of `scaled` (logits over
/// the temperature, [A, V] fp32), with one uniform per row (`u`, [A, 1]).
at::Tensor sample_tokens(const at::Tensor& scaled, const at::Tensor& u, const sampling_options& o, std::int64_t vocab) {
  const at::Tensor probs = at::softmax(truncate(scaled, o.top_k, o.top_p), -1);
  const at::Tensor cdf = at::cumsum(probs, -1);
  const at::Tensor target = (u * cdf.narrow(-1, cdf.size(-1) - 1, 1)).clamp_min(1e-30);
  return (cdf < target).sum(-1).clamp_max(vocab - 1);
}

/// Records `step` as the first stop of each row whose `next` token is a stop token and that had
/// none (`stop_at` [R]: N for none). `rows`: the original rows of the batch's, undefined when the
/// batch holds them all in order.
void mark_stops(at::Tensor& stop_at, const at::Tensor& next, const at::Tensor& stop_ids, const at::Tensor& rows,
                std::int64_t step, std::int64_t N) {
  const at::Tensor hit = (next.unsqueeze(-1) == stop_ids).any(-1);
  const at::Tensor before = rows.defined() ? stop_at.index_select(0, rows) : stop_at;
  const at::Tensor after = before.masked_fill(hit & (before == N), step);
  if (rows.defined())
    stop_at.index_copy_(0, rows, after);
  else
    stop_at = after;
}

/// Each row's tokens and log-probs ([R, steps] on the CPU) up to and with its first stop token
/// (`stop_at`, N for none; undefined without stop tokens), decoded when `tok` is given.
std::vector<generation> to_generations(const at::Tensor& tokens, const at::Tensor& logps, const at::Tensor& stop_at,
                                       const std::vector<std::int64_t>& counts, std::int64_t N,
                                       const sampling_options& o, const tokenizer* tok) {
  const std::int64_t steps = tokens.size(1);
  const auto* tok_p = tokens.data_ptr<std::int64_t>();
  const auto* lp_p = logps.data_ptr<float>();
  std::vector<generation> out;
  std::int64_t r = 0;  // rows are prompt-major
  for (std::size_t p = 0; p < counts.size(); ++p) {
    for (std::int64_t k = 0; k < counts[p]; ++k, ++r) {
      generation& g = out.emplace_back();
      g.prompt = p;
      g.sample = static_cast<std::size_t>(k);
      const std::int64_t first_stop = stop_at.defined() ? stop_at.data_ptr<std::int64_t>()[r] : N;
      g.stopped = first_stop < N;
      const std::int64_t len = g.stopped ? first_stop + 1 : steps;
      g.tokens.assign(tok_p + r * steps, tok_p + r * steps + len);
      g.logprobs.assign(lp_p + r * steps, lp_p + r * steps + len);
      if (tok != nullptr) {
        std::vector<std::int64_t> body = g.tokens;
        if (g.stopped) body.pop_back();
        g.text = tok->decode(body, o.skip_special_tokens);
      }
    }
  }
  return out;
}

// The prompts' forward through the cache, in slices of their L positions, each attending over the
// cache so far: the attention's scratch grows with P x slice x L (measured 2026-12-07: 64 episode
// turns of about 8K tokens in one forward took over 50 GiB, and the sandbox's candidate children on
// the same GPU ran out of memory). The last position's logits [P, 1, V].
at::Tensor prefill(CausalLMImpl& model, const at::Tensor& ids, const at::Tensor& prompt_mask, forward_args& args,
                   double scratch_bytes) {
  const std::int64_t P = ids.size(0), L = ids.size(1);
  const double per_position =
      static_cast<double>(P) * L * attention_bytes_per_pair(model.config, param_options(model).dtype().toScalarType(), ids.is_cuda());
  const auto slice = static_cast<std::int64_t>(std::clamp(scratch_bytes / per_position, 1.0, static_cast<double>(L)));
  at::Tensor logits;
  for (std::int64_t t0 = 0; t0 < L; t0 += slice) {
    const std::int64_t n = std::min(slice, L - t0);
    args.attention_mask = prompt_mask.narrow(1, 0, t0 + n);
    logits = model.forward(ids.narrow(1, t0, n), args);
  }
  return logits;
}

}  // namespace

result<std::vector<generation>> generate(CausalLMImpl& model, const std::vector<std::vector<std::int64_t>>& prompts,
                                         const sampling_options& o, const tokenizer* tok) {
  const std::int64_t vocab = model.config.vocab_size;
  auto longest = check_generate_args(prompts, o, vocab);
  if (!longest) return longest.err();

  try {
    at::NoGradGuard no_grad;
    const at::TensorOptions popt = param_options(model);
    const auto dev = popt.device();
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    const std::int64_t P = static_cast<std::int64_t>(prompts.size());
    const std::vector<std::int64_t> counts = sample_counts(o, prompts.size());
    const std::int64_t R = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    const std::int64_t L = static_cast<std::int64_t>(*longest);
    const std::int64_t N = o.max_new_tokens;
    const std::int64_t capacity = L + N;

    // Prompts left-padded to L so every row's next token is at the same index. Built on the host in
    // one piece and moved once.
    std::vector<std::int64_t> ids_host(static_cast<std::size_t>(P * L), o.pad_token);
    std::vector<std::int64_t> mask_host(static_cast<std::size_t>(P * capacity), 0);
    std::vector<std::int64_t> prompt_len(static_cast<std::size_t>(P));
    for (std::int64_t i = 0; i < P; ++i) {
      const auto& p = prompts[static_cast<std::size_t>(i)];
      const auto n = static_cast<std::int64_t>(p.size());
      std::copy(p.begin(), p.end(), ids_host.begin() + i * L + (L - n));
      std::fill_n(mask_host.begin() + i * capacity + (L - n), n, 1);
      prompt_len[static_cast<std::size_t>(i)] = n;
    }
    // Each prompt is prefilled once, then its cache, mask and last logits are copied to its rows
    // (prompt-major): a GRPO group's G samples share one prompt, and a long prompt's prefill costs G
    // times less.
    // Held from here to each wait for the device.
    device_window window{o.device_use};
    window.enter();
    const at::Tensor ids = at::tensor(ids_host, i64).view({P, L}).to(dev);
    const at::Tensor prompt_mask = at::tensor(mask_host, i64).view({P, capacity}).to(dev);
    kv_cache cache = make_kv_cache(model.config, P, capacity, popt);
    forward_args args;
    args.cache = &cache;
    args.last_only = true;
    at::Tensor logits = prefill(model, ids, prompt_mask, args, o.prefill_scratch_bytes).select(1, 0).to(at::kFloat);
    at::Tensor mask = prompt_mask;
    at::Tensor lengths = at::tensor(prompt_len, i64).to(dev);
    if (R > P) {
      const at::Tensor to_rows = at::arange(P, i64).repeat_interleave(at::tensor(counts, i64)).to(dev);
      for (auto& t : cache.k) t = t.index_select(0, to_rows);
      for (auto& t : cache.v) t = t.index_select(0, to_rows);
      logits = logits.index_select(0, to_rows);
      mask = mask.index_select(0, to_rows);
      lengths = lengths.index_select(0, to_rows);
    }

    const bool greedy = o.temperature == 0;
    const double temperature = greedy ? 1.0 : o.temperature;
    const bool has_stops = !o.stop_tokens.empty();
    const at::Tensor stop_ids = has_stops ? at::tensor(o.stop_tokens, i64).to(dev) : at::Tensor();
    // Inverse-CDF sampling with uniforms from a CPU generator, reproducible on any device: one per
    // original row every step (so a row's samples do not depend on which others stopped), all
    // drawn here in step-major order (the order step-by-step draws would take) and moved to the
    // device once, rather than a host-to-device copy, which waits for the device, every step.
    const at::Tensor uniforms = greedy ? at::Tensor() : draw_uniforms(o, counts, R, N, dev);  // [N, R] fp32

    // Per step, tokens and log-probs stay on the device ([N, R] by original row), and so does the
    // step at which each row first produced a stop token (N: not yet). The host looks at the stops
    // only every `sync_every` steps (a transfer waits for the device, which would otherwise run
    // ahead of the host's kernel launches); rows that stopped are then dropped from the batch
    // (cache, mask and all) once enough of them have, so long samples do not drag finished ones
    // along. A stopped row still in the batch produces tokens nobody reads. Without stop tokens the
    // loop never waits. On the CPU waiting costs nothing, so it checks every step.
    const std::int64_t sync_every = o.check_stops_every > 0 ? o.check_stops_every : dev.is_cpu() ? 1 : 8;
    at::Tensor tokens_d = at::empty({N, R}, i64.device(dev));
    at::Tensor logps_d = at::empty({N, R}, at::TensorOptions().dtype(at::kFloat).device(dev));
    at::Tensor stop_at = has_stops ? at::full({R}, N, i64.device(dev)) : at::Tensor();
    // `rows` maps the batch's rows to the original ones.
    std::vector<std::int64_t> rows_host(static_cast<std::size_t>(R));
    for (std::int64_t r = 0; r < R; ++r) rows_host[static_cast<std::size_t>(r)] = r;
    at::Tensor rows = at::arange(R, i64.device(dev));
    at::Tensor generated = at::zeros({R, 0}, i64.device(dev));  // kept for the processor only
    std::int64_t steps = 0;

    for (std::int64_t step = 0; step < N; ++step) {
      const std::int64_t A = rows.size(0);
      const bool all_rows = A == R;
      if (o.processor) o.processor(logits, generated, rows, step);
      const at::Tensor scaled = temperature == 1.0 ? logits : logits / temperature;  // x / 1 == x
      at::Tensor u;
      if (!greedy) {
        u = uniforms.select(0, step).unsqueeze(1);
        if (!all_rows) u = u.index_select(0, rows);
      }
      at::Tensor next = greedy ? at::argmax(logits, -1) : sample_tokens(scaled, u, o, vocab);
      const at::Tensor logp = at::log_softmax(scaled, -1).gather(-1, next.unsqueeze(-1)).squeeze(-1);
      if (all_rows) {
        tokens_d.select(0, step).copy_(next);
        logps_d.select(0, step).copy_(logp);
      } else {
        tokens_d.select(0, step).index_copy_(0, rows, next);
        logps_d.select(0, step).index_copy_(0, rows, logp);
      }
      if (has_stops) mark_stops(stop_at, next, stop_ids, all_rows ? at::Tensor() : rows, step, N);
      steps = step + 1;
      if (steps == N) break;
      if (o.processor) generated = at::cat({generated, next.unsqueeze(1)}, 1);

      if (has_stops && steps % sync_every == 0) {
        const at::Tensor stop_c = stop_at.to(at::kCPU).contiguous();
        // The device is idle here (the host just waited for it): a waiting exclusive user goes
        // in before the next window (common/gpu_use_lock.hpp's gate).
        window.leave();
        window.enter();
        const auto* stop_p = stop_c.data_ptr<std::int64_t>();
        std::vector<std::int64_t> keep;
        for (std::int64_t a = 0; a < A; ++a)
          if (stop_p[rows_host[static_cast<std::size_t>(a)]] == N) keep.push_back(a);
        if (keep.empty()) break;
        if (static_cast<std::int64_t>(keep.size()) <= A - std::max<std::int64_t>(1, A / 8)) {
          const at::Tensor idx = at::tensor(keep, i64).to(dev);
          for (at::Tensor* t : {&mask, &lengths, &rows, &next}) *t = t->index_select(0, idx);
          for (auto& t : cache.k) t = t.index_select(0, idx);
          for (auto& t : cache.v) t = t.index_select(0, idx);
          if (o.processor) generated = generated.index_select(0, idx);
          for (std::size_t k = 0; k < keep.size(); ++k) rows_host[k] = rows_host[static_cast<std::size_t>(keep[k])];
          rows_host.resize(keep.size());
        }
      }

      mask.select(1, L + step).fill_(1);
      args.attention_mask = mask.narrow(1, 0, L + step + 1);
      args.positions = (lengths + step).unsqueeze(1);
      logits = model.forward(next.unsqueeze(1), args).select(1, 0).to(at::kFloat);
    }

    // One transfer of everything generated; each row ends after its first stop token.
    const at::Tensor tokens_c = tokens_d.narrow(0, 0, steps).t().contiguous().to(at::kCPU);
    const at::Tensor logps_c = logps_d.narrow(0, 0, steps).t().contiguous().to(at::kCPU);
    const at::Tensor stop_c = has_stops ? stop_at.to(at::kCPU).contiguous() : at::Tensor();
    window.leave();
    return to_generations(tokens_c, logps_c, stop_c, counts, N, o, tok);
  } catch (const c10::Error& e) {
    return error{std::string("generate: ") + e.what_without_backtrace()};
  }
}

result<scored_batch> score_batch(CausalLMImpl& model, const std::vector<score_item>& items, const score_options& o) {
  if (items.empty()) return error{"score: no items"};
  const std::int64_t vocab = model.config.vocab_size;
  std::size_t longest = 0, longest_completion = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].prompt.empty()) return error{"score: item " + std::to_string(i) + " has an empty prompt"};
    for (const auto* part : {&items[i].prompt, &items[i].completion}) {
      auto s = check_tokens(*part, vocab, "score: item " + std::to_string(i));
      if (!s) return s.err();
    }
    longest = std::max(longest, items[i].prompt.size() + items[i].completion.size());
    longest_completion = std::max(longest_completion, items[i].completion.size());
  }
  try {
    const auto dev = param_options(model).device();
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    const auto B = static_cast<std::int64_t>(items.size());
    const auto T = static_cast<std::int64_t>(longest);
    const auto C = static_cast<std::int64_t>(longest_completion);
    // Right-padded sequences: positions count from 0 in every row without needing the mask.
    at::Tensor ids = at::full({B, T}, o.pad_token, i64);
    at::Tensor mask = at::zeros({B, T}, i64);
    at::Tensor targets = at::full({B, std::max<std::int64_t>(C, 1)}, o.pad_token, i64);
    at::Tensor where = at::zeros({B, std::max<std::int64_t>(C, 1)}, i64);  // logits index predicting each target
    at::Tensor cmask = at::zeros({B, std::max<std::int64_t>(C, 1)}, at::TensorOptions().dtype(at::kFloat));
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& it = items[static_cast<std::size_t>(b)];
      std::vector<std::int64_t> seq = it.prompt;
      seq.insert(seq.end(), it.completion.begin(), it.completion.end());
      const auto n = static_cast<std::int64_t>(seq.size());
      const auto p = static_cast<std::int64_t>(it.prompt.size());
      const auto c = static_cast<std::int64_t>(it.completion.size());
      ids.select(0, b).narrow(0, 0, n).copy_(at::tensor(seq, i64));
      mask.select(0, b).narrow(0, 0, n).fill_(1);
      if (c > 0) {
        targets.select(0, b).narrow(0, 0, c).copy_(at::tensor(it.completion, i64));
        where.select(0, b).narrow(0, 0, c).copy_(at::arange(p - 1, p - 1 + c, i64));
        cmask.select(0, b).narrow(0, 0, c).fill_(1);
      }
    }
    forward_args args;
    args.attention_mask = mask.to(dev);
    // The output projection only at the positions that predict completion tokens: the prompt's
    // other positions never reach the [*, V] logits, which dominate memory for large vocabularies.
    const at::Tensor hidden = model.model->forward(ids.to(dev), args);  // [B, T, H]
    const at::Tensor picked = hidden.gather(1, where.to(dev).unsqueeze(-1).expand({B, where.size(1), hidden.size(-1)}));
    const at::Tensor logits = at::matmul(picked, model.output_weight().t()).to(at::kFloat);  // [B, C, V]
    const double temperature = o.temperature == 0 ? 1.0 : o.temperature;
    const at::Tensor logp = at::log_softmax(logits / temperature, -1).gather(-1, targets.to(dev).unsqueeze(-1)).squeeze(-1);
    const at::Tensor m = cmask.to(dev);
    scored_batch out;
    out.logprobs = (logp * m).narrow(1, 0, C);
    out.mask = m.narrow(1, 0, C);
    return out;
  } catch (const c10::Error& e) {
    return error{std::string("score: ") + e.what_without_backtrace()};
  }
}

status score(CausalLMImpl& model, const std::vector<score_item>& items, const score_options& o,
             const std::function<void(std::size_t, const scored_batch&)>& fn) {
  if (o.micro_batch < 1) return error{"score: micro_batch must be at least 1"};
  const auto mb = static_cast<std::size_t>(o.micro_batch);
  for (std::size_t first = 0; first < items.size(); first += mb) {
    const std::vector<score_item> part(items.begin() + static_cast<std::ptrdiff_t>(first),
                                       items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), first + mb)));
    auto b = score_batch(model, part, o);
    if (!b) return b.err();
    fn(first, b.value());
  }
  return status::success();
}

}  // namespace kforge::model
