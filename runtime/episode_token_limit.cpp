#include "runtime/episode_token_limit.hpp"

#include <filesystem>

#if defined(KFORGE_HAVE_MODEL_CONFIG)
#include "model/config.hpp"
#endif

namespace kforge::pipeline {

void bound_episode_tokens(manifest& m) {
#if defined(KFORGE_HAVE_MODEL_CONFIG)
  if (m.agent.max_turns <= 1 || m.agent.max_tokens > 0 || m.sampler.backend != sampler_backend::engine ||
      m.sampler.model.empty())
    return;
  auto config = model::load_model_config((std::filesystem::path(m.sampler.model) / "config.json").string());
  if (!config) return;
  // A next turn starts from under max_tokens plus its observation (agent/episode_turns.hpp goes_on).
  const auto turn = m.sampler.max_new_tokens + static_cast<std::int64_t>(m.agent.observation_max_tokens);
  if (auto limit = model::turn_context_limit(*config, turn)) m.agent.max_tokens = *limit;
#else
  (void)m;
#endif
}

}  // namespace kforge::pipeline
