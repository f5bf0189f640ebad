#pragma once
// New policy weights from the trainer to samplers on other GPUs over NCCL (weight_channel.hpp),
// without stopping either side. Built only where CUDA is (KFORGE_WITH_CUDA).
//
// The model's parameters travel as one flat buffer, in named_parameters() order (a tied weight
// once), in the sender's dtype; `layout_hash` hashes the names and shapes so a sampler whose model
// differs refuses rather than mixing weights up.
//
// weight_sender (the trainer's rank 0): publish() waits until the previous version's broadcast has
// ended (normally long ago: samplers take it as soon as it is announced), copies the parameters
// into its staging buffer and starts the broadcast on its own thread, then returns at once; the
// trainer trains on while its samplers join.
//
// weight_receiver (a sampler): announce() (the process's message pump, as soon as the message
// arrives) queues the version; the receiver's thread receives it into a staging buffer while the
// sampler generates. apply() (the sampler, between generation batches) waits for that version and
// copies it into the model. One staging buffer: a version is received only after the one before
// was applied, so the trainer is at most two versions ahead before its publish() waits.
//
// With several samplers NCCL's broadcast runs as a ring, so a sampler's version is complete only
// when every sampler has joined: a sampler whose staging buffer is still full (its generation batch
// has not ended) holds the others' apply() until it is free. With one sampler per trainer that
// never happens; with many, the slowest batch sets the pace of a version.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "model/transformer.hpp"
#include "trainer/nccl_id.hpp"

namespace kforge::trainer {

/// What a weights message says about an NCCL broadcast (pipeline turns it into PolicyWeights).
struct broadcast_info {
  std::uint64_t version = 0;
  nccl_id id;                 ///< the group's unique id
  int ranks = 0;              ///< the trainer and every sampler
  std::uint64_t bytes = 0;    ///< of the flat buffer
  std::uint64_t layout_hash = 0;
  std::string dtype;          ///< "bfloat16", "float32", ...
};

/// The hash of a model's parameter names and shapes, in broadcast order.
std::uint64_t layout_hash(model::CausalLMImpl& m);

class weight_sender {
 public:
  /// Rank 0 of a group of `ranks` (>= 2) on CUDA device `device`; makes the group's unique id.
  static result<std::unique_ptr<weight_sender>> create(int device, int ranks, std::chrono::milliseconds timeout);
  ~weight_sender();

  /// Announces `version` of `m` (on the sender's device): see above. An error when the previous
  /// broadcast failed or timed out; the channel is then broken and every later call fails, so the
  /// caller switches to files.
  result<broadcast_info> publish(model::CausalLMImpl& m, std::uint64_t version);

  struct impl;

 private:
  explicit weight_sender(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

class weight_receiver {
 public:
  /// Rank `rank` (>= 1) for `m`, a model on CUDA device `device`. Joins at the first version.
  static result<std::unique_ptr<weight_receiver>> create(model::CausalLMImpl& m, int device, int rank,
                                                         std::chrono::milliseconds timeout);
  ~weight_receiver();

  /// Queues a version for receiving. Thread-safe; returns at once; a version already queued is
  /// ignored, so the pump and apply() may both announce it.
  void announce(const broadcast_info& b);

  /// Waits for `b.version` (announcing it if nobody has) and copies it into `m`, the model given
  /// to create(). Nothing is copied on error: the model keeps its weights.
  status apply(const broadcast_info& b, model::CausalLMImpl& m);

  /// Ends receiving for good (`why` goes into later errors): a transfer waiting for the trainer is
  /// aborted, and apply() fails at once. For a trainer that has gone over to files, or a process
  /// that is stopping.
  void stop(const std::string& why);

  struct impl;

 private:
  explicit weight_receiver(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace kforge::trainer
