#pragma once
// Supervised pretraining of a small policy from scratch ("kforge-tiny"): (prompt, completion)
// pairs in, a Hugging Face-style checkpoint directory out that the engine sampler loads as it
// loads any other (config.json, model.safetensors, generation_config.json, tokenizer files).
//
// Data: JSON lines, one record a line, of two kinds.
//  - Single turn: {"prompt": P, "completion": C} (optionally "prefix_only": true, see
//    tokenize_example). An example is tokenized exactly as the engine sampler will later see it:
//    the prompt wrapped in the tokenizer directory's chat format (model/chat.hpp, detected as
//    make_engine_sampler detects it) and encoded on its own, then the completion encoded on its
//    own, then the end-of-turn token the sampler stops at. The loss is the token mean of
//    cross-entropy over the completion and that end token only; the prompt is context.
//  - Multi turn (an agent episode, agent/episode.hpp): {"prompt": P, "turns": [{"completion": C1,
//    "observation": O1, "train": false}, ..., {"completion": Cn}]}. The tokens are the context the
//    episode's last turn would see with the engine sampler: the wrapped prompt, then per turn its
//    completion and the end-of-turn token (a sampled turn that stopped ends with it), and after
//    every turn but the last its observation as the sampler appends it (engine_policy::
//    follow_up_ids: chat_format::follow_up(O, closed = true) encoded without special tokens,
//    which opens the next assistant turn). Every turn but the last has a string "observation";
//    the last has none. A turn's "train" (default true) says whether its completion and end token
//    are targets; the prompt and the observations never are. "prefix_only" and a top-level
//    "completion" are refused beside "turns"; at least one turn must be trained. Focus spans
//    (focus_from) are marked inside trained turns; lead tokens count from each trained turn's
//    start; max_completion_tokens applies to each turn's completion (end token included).
// Other keys of a record (task_id, variant, drill, ...) are ignored. An example longer than max_len
// is dropped and counted, never truncated: a kernel cut in half teaches nothing.
//
// Training: the model::CausalLM the RL trainer uses, initialised from the seed (normal(0, init_std)
// for every matrix, zero biases, RMSNorm weights 1: Hugging Face's Qwen2 init), AdamW (weight
// decay on matrices only), linear warmup then cosine decay, global grad-norm clipping. On CUDA the
// forward and backward run in bf16 on a bf16 copy of the weights while AdamW updates fp32 master
// weights (no autocast: its C++ API changed between LibTorch 1.13 and 2.x); on the CPU everything
// is fp32. A held-out split's loss is reported every eval_every steps and at the end.
//
// Output: written into `<out>.tmp` and renamed to `out` only when complete, together with
// pretrain.json (the options, the data file's hash, example counts, losses, wall time, the command
// line: how the weights were made) and train_log.jsonl (one line per logged step).
//
// This header is torch-free: the data side (pretrain_data.cpp) is plain C++ and only pretrain.cpp
// includes LibTorch.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "model/chat.hpp"
#include "model/tokenizer.hpp"

namespace kforge::trainer {

struct pretrain_options {
  // ---- inputs and output ----
  /// JSON-lines file of {"prompt": string, "completion": string} records, or multi-turn
  /// {"prompt": string, "turns": [...]} ones (the file comment; other keys ignored).
  std::string data;
  /// Directory holding tokenizer.json and tokenizer_config.json (chat template, eos/pad tokens);
  /// both are copied into the output so that it is a self-contained checkpoint.
  std::string tokenizer_dir;
  /// Checkpoint directory to write. Must not exist unless `overwrite`.
  std::string out;
  /// Replace an existing `out` (only once the new one is complete).
  bool overwrite = false;
  /// The command line that started the run, recorded in pretrain.json.
  std::string command;
  /// A checkpoint this run starts from instead of a random init (written by an earlier pretrain
  /// with the same tokenizer): its config.json gives the model shape and its weights the start,
  /// so a recipe longer than one sitting (a device call's time limit) goes on in another run. The
  /// optimiser and the schedule start afresh.
  std::string init_from;
  /// The model-shape flags given on the command line (--hidden, ...): with init_from they are an
  /// error, since the shape comes from the checkpoint.
  std::vector<std::string> shape_flags;

  // ---- model shape (written as a Qwen2 config.json; the vocabulary comes from the tokenizer) ----
  std::int64_t hidden_size = 384;
  std::int64_t num_layers = 8;
  /// Query heads; must divide hidden_size, and hidden_size / heads must be even (rotary).
  std::int64_t num_heads = 6;
  /// Key/value heads (grouped-query attention); must divide num_heads.
  std::int64_t num_kv_heads = 2;
  std::int64_t intermediate_size = 1024;
  /// max_position_embeddings of config.json: the longest sequence the checkpoint claims to handle.
  /// >= max_len. Rotary embeddings have no table, so this only bounds what sampling may ask for.
  std::int64_t max_positions = 4096;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  /// lm_head shares the embedding matrix: for a small model the embedding is a large share of the
  /// parameters, and tying halves it.
  bool tie_embeddings = true;
  /// The vocabulary is the tokenizer's, rounded up to a multiple of this (tensor-core friendly
  /// shapes; the extra rows are never a target). 1: exactly the tokenizer's.
  std::int64_t vocab_multiple = 64;
  /// Standard deviation of the normal init of every matrix (Hugging Face's initializer_range).
  double init_std = 0.02;

  // ---- data and batching ----
  /// Seed of the init, the validation split and the shuffling: the same seed, data and options
  /// give the same weights (bit for bit on the CPU).
  std::uint64_t seed = 0;
  /// Longest example, prompt + completion + end token, in tokens; longer ones are dropped.
  std::int64_t max_len = 2048;
  /// Longest completion (end token included) in tokens; records with longer ones are dropped and
  /// counted. 0: no limit. Set it to the sampler's max_new_tokens: a kernel the policy cannot
  /// finish there only teaches it to start programs it will be cut off in (v14 wrote the
  /// writer's long strided GEMM + row program for held-out tasks and stopped at 3,072 tokens).
  std::int64_t max_completion_tokens = 0;
  /// Fraction of the examples held out for validation (0: none). At least one example is held out
  /// when > 0, and at least one kept for training.
  double val_fraction = 0.02;
  /// Sequences per optimiser step, when batch_tokens is 0. The last batch of an epoch may be smaller.
  std::int64_t batch_size = 16;
  /// Token budget per optimiser step (rows * longest row, padding included); > 0 overrides
  /// batch_size. Examples are grouped by length within shuffled windows to keep padding low.
  std::int64_t batch_tokens = 0;
  /// Token budget of one forward/backward pass (rows * longest row); a step's batch is cut into
  /// such micro-batches and their gradients accumulate (the loss stays the batch's token mean).
  /// 0: the whole batch in one pass.
  std::int64_t micro_batch_tokens = 0;

  // ---- optimisation ----
  /// Optimiser steps; 0: `epochs` passes over the training split.
  std::int64_t steps = 0;
  /// Passes over the training split when steps is 0.
  std::int64_t epochs = 1;
  /// Peak learning rate, reached after warmup.
  double lr = 1e-3;
  /// The cosine decay ends at lr * min_lr_ratio.
  double min_lr_ratio = 0.1;
  /// Share of the steps spent in the linear warmup from 0.
  double warmup_fraction = 0.05;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  /// Decoupled weight decay of AdamW, applied to matrices only (not to biases or norm weights).
  double weight_decay = 0.1;
  /// Global L2 norm the gradient is clipped to; <= 0: no clipping.
  double max_grad_norm = 1.0;
  /// The first lead_tokens completion tokens of every example count lead_weight times in the
  /// training loss (0 / 1: a plain token mean). A corpus completion opens by restating the task's
  /// reference, the only part copied from the prompt; those few tokens are ~1 % of the targets,
  /// and a 7 M-parameter policy learned every other token and not them (kforge-tiny v2/v3,
  /// bench/RESULTS.md). Logged and validation losses stay plain token means.
  std::int64_t lead_tokens = 0;
  double lead_weight = 1.0;
  /// Focus spans: in every completion, from the literal text focus_from to the end of the next
  /// focus_to, the tokens count focus_weight times (a token partly inside counts whole). For the
  /// corpus kernels' per-element function (from "// One element of the reference" to "\n}\n"):
  /// the only lines of a kernel that depend on the task's ops, ~5 % of its targets, which a 7.6 M
  /// model wrote as its usual chain whatever the task (kforge-tiny v7, bench/RESULTS.md). Both
  /// empty: off; both or neither must be given.
  std::string focus_from, focus_to;
  double focus_weight = 1.0;

  // ---- device, logging, output format ----
  /// "auto" (CUDA when LibTorch sees a GPU, else the CPU), "cpu", "cuda" or "cuda:N".
  std::string device = "auto";
  /// On CUDA: bf16 forward/backward with fp32 master weights; false: fp32 throughout. The CPU
  /// always computes in fp32.
  bool bf16 = true;
  /// Logged steps: a train_log.jsonl line and a progress line every this many steps (and the last).
  std::int64_t log_every = 10;
  /// Validation loss every this many steps (and after the last); 0: only after the last.
  std::int64_t eval_every = 100;
  /// Weights in model.safetensors as bf16 (half the size; what the sampler runs on a GPU anyway)
  /// or fp32.
  bool save_bf16 = true;
};

/// Checks the options that do not need any file: sizes, fractions, the device's spelling.
/// Errors name the option as the command line spells it ("--heads 5 does not divide --hidden 64").
[[nodiscard]] status validate(const pretrain_options& o);

/// How examples become tokens: the tokenizer, the chat format the sampler will wrap prompts in,
/// and the token that ends a completion.
struct sft_format {
  model::tokenizer tok;
  model::chat_format chat;
  /// Appended to every completion; the first stop token of the written generation_config.json.
  /// ChatML: <|im_end|>; Llama 3: <|eot_id|>; raw: the tokenizer's eos (tokenizer_config.json).
  std::int64_t eos = 0;
  /// Padding token (never a target): the tokenizer's pad token, else eos.
  std::int64_t pad = 0;
  /// Bos token when the tokenizer configures one (written to generation_config.json).
  std::optional<std::int64_t> bos;
};

/// Loads `dir`/tokenizer.json and the chat format and special tokens of `dir`/tokenizer_config.json
/// (and generation_config.json when there is one), as make_engine_sampler does for a checkpoint.
[[nodiscard]] result<sft_format> load_sft_format(const std::string& dir);

/// One turn of a multi-turn example: its completion (end token included) as positions
/// [begin, end) of sft_example::ids, and whether those are targets.
struct sft_turn_span {
  std::int64_t begin = 0, end = 0;
  bool train = true;
};

/// One tokenized example.
struct sft_example {
  /// Prompt tokens (chat-wrapped), then completion tokens, then the eos token; for a multi-turn
  /// record, completion + eos of each turn with the observation's follow-up tokens between turns.
  std::vector<std::int64_t> ids;
  /// The first prompt_tokens ids are context. Single turn (`turns` empty): ids[prompt_tokens..]
  /// are the targets.
  std::int64_t prompt_tokens = 0;
  /// Multi turn: every turn's completion span, in order; the targets are those of the trained
  /// turns (observations, between the spans, and untrained turns are context). Empty for a
  /// single-turn record.
  std::vector<sft_turn_span> turns;
  /// Focus spans (pretrain_options::focus_from): [begin, end) positions into ids.
  std::vector<std::pair<std::int64_t, std::int64_t>> focus;
};

/// The [begin, end) ranges of ex.ids that are targets of the loss, ascending: [max(prompt_tokens,
/// 1), ids.size()) for a single turn, the trained turns' spans for a multi-turn example (position 0
/// is never a target: nothing precedes it).
std::vector<std::pair<std::int64_t, std::int64_t>> target_spans(const sft_example& ex);

/// The number of targets of `ex` (the ones of target_mask).
std::int64_t target_count(const sft_example& ex);

/// The training loss's weight of target position t of `ex` (target_mask(ex)[t] == 1):
/// lead_weight within the first lead_tokens tokens of its completion (of its turn, multi turn),
/// focus_weight inside a focus span (the larger where both hold), else 1.
double target_weight(const sft_example& ex, std::int64_t t, const pretrain_options& o);

/// `prompt` and `completion` as the model trains on them (see the file comment).
/// `end_turn` false: a record marked "prefix_only" (a copy drill, corpus/copy_drill.hpp) whose
/// completion is only the start of an answer, so no end-of-turn token follows it.
sft_example tokenize_example(const sft_format& fmt, std::string_view prompt, std::string_view completion,
                             bool end_turn = true);

/// One turn of a multi-turn record: the model's completion, the observation that follows it
/// (none on the last turn), and whether the completion is learnt.
struct sft_turn {
  std::string completion;
  std::optional<std::string> observation;
  bool train = true;
};

/// A multi-turn record as the model trains on it (see the file comment): ids and the turns' spans.
/// Every turn but the last must have an observation (read_sft_data checks that; here a missing
/// one is taken as empty, one on the last turn is left out).
sft_example tokenize_turns(const sft_format& fmt, std::string_view prompt, const std::vector<sft_turn>& turns);

/// Per position of ex.ids: 1 where that token is a target of the loss (completion and eos; the
/// trained turns' completions and eos for a multi-turn example), 0 for the prompt, observations
/// and untrained turns. Position i is predicted from positions < i, so position 0 is never a target.
std::vector<std::uint8_t> target_mask(const sft_example& ex);

/// A data file, tokenized.
struct sft_dataset {
  std::vector<sft_example> examples;  ///< in file order, the dropped ones left out
  std::int64_t records = 0;           ///< records read (blank lines are not records)
  std::int64_t dropped_too_long = 0;  ///< records longer than max_len tokens
  std::int64_t longest_dropped = 0;   ///< tokens of the longest dropped record
  std::int64_t dropped_long_completion = 0;  ///< within max_len, but completions over max_completion
  std::int64_t longest_completion_dropped = 0;  ///< completion tokens of the longest of those
  std::int64_t tokens = 0;            ///< tokens of the kept examples
  std::int64_t target_tokens = 0;     ///< of those, targets (completion + eos of trained turns)
  std::int64_t focus_tokens = 0;      ///< of those, inside focus spans
  std::int64_t focus_examples = 0;    ///< kept examples with at least one focus span
  std::string hash;                   ///< "fnv1a64:" + 16 hex digits of the file's bytes
  std::int64_t bytes = 0;             ///< size of the file
};

/// Reads and tokenizes `path`, marking focus spans where focus_from and focus_to are given.
/// Errors: an unreadable file, a line that is not a JSON object with string "prompt" and
/// "completion", or a malformed multi-turn record ("FILE:LINE: ..."), no example left within
/// max_len. `max_completion` > 0 also drops (and counts) the records whose completion (any turn's,
/// multi turn), end of turn included, is longer.
[[nodiscard]] result<sft_dataset> read_sft_data(const std::string& path, const sft_format& fmt,
                                                std::int64_t max_len, const std::string& focus_from = "",
                                                const std::string& focus_to = "",
                                                std::int64_t max_completion = 0);

/// Deterministic shuffles and batches, torch-free so that they are testable on their own.
/// Held-out examples: the first round(n * fraction) of a seeded permutation of 0..n-1 (at least one
/// when fraction > 0, never all); the rest, in file order, are the training split.
struct data_split {
  std::vector<std::size_t> train;
  std::vector<std::size_t> val;
};
data_split split_examples(std::size_t n, double val_fraction, std::uint64_t seed);

/// One epoch's batches over `items` (indices into `lengths`): a seeded shuffle, then (with a
/// token budget) windows of the shuffled order sorted by length and cut greedily so that rows *
/// longest row <= batch_tokens (a row longer than the budget is a batch alone), and the batches
/// shuffled; with batch_tokens 0, consecutive groups of batch_size of the shuffled order.
std::vector<std::vector<std::size_t>> plan_epoch(const std::vector<std::size_t>& items,
                                                 const std::vector<std::int64_t>& lengths,
                                                 std::int64_t batch_size, std::int64_t batch_tokens,
                                                 std::uint64_t seed, std::int64_t epoch);

/// Consecutive runs of `batch` (in order) whose rows * longest row fit in `budget` (0: one run).
std::vector<std::vector<std::size_t>> cut_by_tokens(const std::vector<std::size_t>& batch,
                                                    const std::vector<std::int64_t>& lengths,
                                                    std::int64_t budget);

/// The learning rate at optimiser step `step` (0-based) of `total`: linear warmup from lr/warmup
/// to lr over the first ceil(warmup_fraction * total) steps, then cosine down to lr * min_lr_ratio.
double lr_at(const pretrain_options& o, std::int64_t step, std::int64_t total);

/// What a run did (also in pretrain.json).
struct pretrain_report {
  std::string out;                 ///< the checkpoint directory written
  std::string device;              ///< "cpu", "cuda:0"
  std::int64_t parameters = 0;     ///< trainable parameters (tied lm_head counted once)
  std::int64_t train_examples = 0;
  std::int64_t val_examples = 0;
  std::int64_t steps = 0;          ///< optimiser steps taken
  double epochs = 0;               ///< passes over the training split (fractional with steps)
  double first_train_loss = 0;     ///< loss of the first step's batch, before any update
  double final_train_loss = 0;     ///< token mean over the last logged window
  double final_val_loss = -1;      ///< after the last step; -1 without a validation split
  double seconds = 0;              ///< wall time of the training loop (validation included)
  double tokens_per_second = 0;    ///< non-padding training tokens (forward + backward) per such second
  std::int64_t tokens = 0;         ///< non-padding training tokens over the run
  std::int64_t skipped_steps = 0;  ///< steps whose gradient norm was not finite (weights left alone)
  double last_grad_norm = 0;       ///< the last step's, before clipping
};

/// Resolves "auto" / "cpu" / "cuda" / "cuda:N" against what LibTorch sees ("cuda:0" for "cuda");
/// an error when a GPU is asked for and there is none.
[[nodiscard]] result<std::string> resolve_device(const std::string& device);

/// Checks that `o.out` can be written: it does not exist (or o.overwrite) and `<out>.tmp` can be
/// created next to it (created and removed again).
[[nodiscard]] status check_output_dir(const pretrain_options& o);

/// With --init: `o` with the model shape of the checkpoint's config.json, which must be one this
/// command wrote for this tokenizer (a Qwen2 of its padded vocabulary) with at least --max-len
/// positions. Without --init: `o` as it is.
[[nodiscard]] result<pretrain_options> with_init_shape(const pretrain_options& o, const sft_format& fmt);

/// Trains and writes the checkpoint. `data` must come from read_sft_data(o.data, fmt, o.max_len).
/// Progress lines go to `log` when given. On error no `o.out` is written and `<out>.tmp` is removed.
[[nodiscard]] result<pretrain_report> run_pretrain(const pretrain_options& o, const sft_format& fmt,
                                                   const sft_dataset& data, std::ostream* log = nullptr);

}  // namespace kforge::trainer
