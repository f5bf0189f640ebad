#include "commands/inspect_command.hpp"

#include <nlohmann/json.hpp>
#include <ostream>

#include "messages/recording.hpp"

namespace kforge::pipeline {

int inspect(const inspect_options& opt, std::ostream& out, std::ostream& err) {
  auto reader = messages::recording_reader::open(opt.file);
  if (!reader) {
    err << "kforge inspect: " << reader.message() << "\n";
    return 1;
  }
  if (opt.header)
    out << nlohmann::json{{"recording", {{"schema_hash", reader->info().schema_hash},
                                         {"link", reader->info().link},
                                         {"created_ns", reader->info().created_ns}}}}
               .dump()
        << "\n";
  std::uint64_t shown = 0;
  for (;;) {
    auto rec = reader->next();
    if (!rec) {
      err << "kforge inspect: " << rec.message() << "\n";
      return 1;
    }
    if (!rec->has_value()) return 0;
    const auto& r = **rec;
    if (opt.payload && messages::payload_name(r.env.type()) != *opt.payload) continue;
    auto json = messages::to_json(r.env);
    if (!json) {
      err << "kforge inspect: " << opt.file << ": " << json.message() << "\n";
      return 1;
    }
    // The envelope's JSON is spliced in as is: it is already one valid JSON object.
    out << "{\"receive_time_ns\": " << r.receive_time_ns << ", \"envelope\": " << *json << "}\n";
    if (opt.limit && ++shown >= opt.limit) return 0;
  }
}

}  // namespace kforge::pipeline
