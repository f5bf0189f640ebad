#pragma once
// Where [agent] max_tokens leaves episodes open, a run with an engine policy bounds them by the
// policy's context, as `kforge optimize` does: no next turn may run past the checkpoint's
// max_position_embeddings. The reward stage decides before the observation is rendered, so the
// bound is that context less one turn of sampler.max_new_tokens and one observation of
// agent.observation_max_tokens. Past the positions it was trained on a model has nothing to go
// by, and its turns there would be trained on as if they were its best.

#include "config/manifest.hpp"

namespace kforge::pipeline {

/// Sets m.agent.max_tokens from the engine policy's config.json when episodes have more than one
/// turn and it is 0. A config that cannot be read leaves it as it is (the model checks say why).
/// Every process of a run and a replay apply it, each reading the model's config.json: a process
/// that cannot (a node without the model directory) leaves episodes open, so a manifest for such
/// a layout sets agent.max_tokens itself.
void bound_episode_tokens(manifest& m);

}  // namespace kforge::pipeline
