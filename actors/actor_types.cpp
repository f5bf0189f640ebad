#include "actors/actor_types.hpp"

#include <caf/message.hpp>

namespace kforge::actors {

void init_actor_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::kforge_actors>();
  // CAF 0.17.6's add_error_category<T>(atom) does not compile (its renderer lambda has the wrong
  // signature), so the renderer is spelled out: "kforge: wrong_payload (expected a ...)".
  cfg.add_error_category(
      caf::detail::error_factory<actor_errc>::category,
      [](std::uint8_t code, caf::atom_value, const caf::message& context) {
        std::string out = "kforge: " + to_string(static_cast<actor_errc>(code));
        if (context.match_elements<std::string>())
          out += " (" + context.get_as<std::string>(0) + ")";
        else if (!context.empty())
          out += " " + to_string(context);
        return out;
      });
}

}  // namespace kforge::actors
