#include "commands/replay_command.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <utility>
#include <vector>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actors/buffer_actor.hpp"
#include "actors/reward_actor.hpp"
#include "messages/recording.hpp"
#include "config/manifest.hpp"
#include "runtime/episode_token_limit.hpp"
#include "commands/replay_harness.hpp"
#include "stages/reward_state_file.hpp"
#include "stages/stage_factory.hpp"

namespace kforge::pipeline {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int exit_reproduced = 0;
constexpr int exit_differs = 1;  // also: unreadable input
constexpr int exit_usage = 2;

constexpr const char* tool = "kforge replay: ";

/// A replayable stage: the link it reads, the link it writes, and whether it also reads weights.
struct stage_spec {
  actor_kind kind;
  link input;
  link output;
  bool takes_weights;
};

std::optional<stage_spec> replayable(std::string_view name) {
  if (name == "reward") return stage_spec{actor_kind::reward, link::verdicts, link::scored, false};
  if (name == "buffer") return stage_spec{actor_kind::buffer, link::scored, link::batches, true};
  return std::nullopt;
}

std::string not_replayable_message(const std::string& name) {
  const auto kind = actor_kind_from_string(name);
  std::string m = tool;
  m += kind ? "stage \"" + name + "\" cannot be replayed.\n"
            : "unknown stage \"" + name + "\".\n";
  m += "Replayable stages: reward, buffer (deterministic: the same inputs give the same outputs).\n"
       "Not replayable today:\n";
  for (auto k : all_actor_kinds) {
    if (replayable(to_string(k))) continue;
    m += "  " + std::string(to_string(k)) + ": " + logic_description(k);
    // A stand-in is not worth replaying; the real brokers and workers depend on timing.
    if (!is_stand_in(k)) m += "; its output depends on which worker answers first";
    m += "\n";
  }
  m += "Sampling, sandbox timing and training are nondeterministic by nature, so none of them is "
       "replayed today; their recordings can still be read with kforge inspect.\n";
  return m;
}

/// Where FILE sits: RUN_DIR/recordings/LINK@PROCESS.kfrec gives the run directory and process;
/// so does RUN_DIR/recordings-before-step-N/, where a resumed run keeps an earlier leg's.
struct file_place {
  std::optional<fs::path> run_dir;
  fs::path recordings;  ///< the folder FILE is in (with run_dir)
  std::string process;  ///< empty when the name is not LINK@PROCESS.kfrec
};

file_place locate(const std::string& file) {
  file_place p;
  const fs::path path(file);
  const auto dir = path.parent_path();
  const auto name = dir.filename().string();
  if (name == "recordings" || name.rfind("recordings-before-step-", 0) == 0) {
    auto run = dir.parent_path();
    p.run_dir = run.empty() ? fs::path(".") : run;
    p.recordings = *p.run_dir / name;
  }
  const auto stem = path.stem().string();
  if (const auto at = stem.find('@'); at != std::string::npos && path.extension() == ".kfrec")
    p.process = stem.substr(at + 1);
  return p;
}

/// The one RUN_DIR/recordings/LINK@*.kfrec; an error asking for --expect when there is none or
/// several.
result<std::string> find_expected(const file_place& place, link out) {
  const std::string prefix = std::string(to_string(out)) + "@";
  const std::string wanted = "recordings/" + prefix + "*.kfrec";
  if (!place.run_dir)
    return error{"FILE is not in a run's recordings/ directory, so the expected outputs (" +
                 wanted + ") cannot be found: pass --expect FILE"};
  const auto dir = place.recordings;
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        it->path().extension() == ".kfrec")
      found.push_back(it->path().string());
  }
  if (ec) return error{"cannot list " + dir.string() + ": " + ec.message()};
  std::sort(found.begin(), found.end());
  if (found.empty())
    return error{"no expected outputs: nothing matches " + (dir / (prefix + "*.kfrec")).string() +
                 " (was the " + std::string(to_string(out)) +
                 " link recorded?); pass --expect FILE"};
  if (found.size() > 1) {
    std::string list;
    for (const auto& f : found) list += "\n  " + f;
    return error{"several recordings could hold the expected outputs:" + list +
                 "\npass the right one with --expect FILE"};
  }
  return found.front();
}

/// A recording read whole, with the link its header names.
struct recording {
  std::string path;
  std::string link;
  std::vector<messages::record> records;
};

result<recording> read_all(const std::string& path) {
  auto reader = messages::recording_reader::open(path);
  if (!reader) return reader.err();
  recording r{path, reader->info().link, {}};
  for (;;) {
    auto next = reader->next();
    if (!next) return next.err();
    if (!next->has_value()) return r;
    r.records.push_back(std::move(**next));
  }
}

/// Success when `r` records `expected` (a header without a link is taken on trust).
status check_link(const recording& r, link expected, const std::string& role) {
  if (r.link.empty() || r.link == to_string(expected)) return {};
  return error{r.path + " records link \"" + r.link + "\", but the " + role + " must be a \"" +
               std::string(to_string(expected)) + "\" recording"};
}

/// The two inputs in the order the process's bus pump handed them to the stage: by receive time,
/// each file kept in its own order (a wall clock can step back), `a` first on ties.
std::vector<messages::envelope> merge_by_receive_time(const std::vector<messages::record>& a,
                                                      const std::vector<messages::record>& b) {
  std::vector<messages::envelope> out;
  out.reserve(a.size() + b.size());
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const bool take_b =
        i == a.size() || (j < b.size() && b[j].receive_time_ns < a[i].receive_time_ns);
    out.push_back(take_b ? b[j++].env : a[i++].env);
  }
  return out;
}

/// The step a leg resumed at: the head sends its checkpoint's weights first, as sender "resume"
/// (process_runtime's resume_at).
std::optional<std::uint64_t> resumed_at(const recording& weights) {
  for (const auto& r : weights.records)
    if (r.env->sender() && r.env->sender()->string_view() == "resume")
      return r.env->policy_version();
  return std::nullopt;
}

/// Whether the leg of a run's recordings folder resumed, and at which step.
struct leg_resume {
  std::optional<std::uint64_t> step;  ///< nothing: a leg that started the run, or not known
  std::string unknown;                ///< why it is not known, or empty
};

/// Told by the "resume" message of a weights recording in that folder (any process's: the
/// trainer publishes it to every subscriber). Not known when the folder holds no weights recording
/// but the run kept reward states of resumed legs. An error: a weights recording unreadable.
result<leg_resume> leg_resumed_at(const file_place& place) {
  std::error_code ec;
  const std::string prefix = std::string(to_string(link::weights)) + "@";
  for (fs::directory_iterator it(place.recordings, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || it->path().extension() != ".kfrec") continue;
    auto w = read_all(it->path().string());
    if (!w) return w.err();
    return leg_resume{resumed_at(*w), {}};
  }
  const auto dir = fs::path(reward_state_file::path_in(place.run_dir->string())).parent_path();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("state-before-step-", 0) == 0)
      return leg_resume{std::nullopt, "cannot tell: the run was resumed (" + it->path().string() +
                                          "), but " + place.recordings.string() +
                                          " holds no weights recording to tell whether this leg "
                                          "was (add \"weights\" to [record] links)"};
  return leg_resume{};
}

/// What the stage produced from the inputs.
struct stage_run {
  std::vector<messages::envelope> outputs;
  actors::stage_metrics metrics;
};

/// Spawns the stage with a collector as its downstream and sends it every input, one at a time,
/// as the bus pump does (a plain envelope, routed by the stage by payload type).
template <class Sink, class Msg, class Spawn>
result<stage_run> drive(const std::vector<messages::envelope>& inputs, Spawn&& spawn) {
  deterministic_system ds;
  auto collected = std::make_shared<std::vector<messages::envelope>>();
  auto sink = spawn_collector<Sink, Msg>(ds.system(), collected);
  auto stage = spawn(ds.system(), sink);
  if (!stage) return stage.err();
  for (const auto& e : inputs) {
    caf::anon_send(*stage, e);
    ds.run();
  }
  auto metrics = ds.metrics(*stage);
  caf::anon_send_exit(*stage, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  ds.run();
  if (!metrics) return error{"the stage did not report its metrics: " + to_string(metrics.error())};
  return stage_run{std::move(*collected), std::move(*metrics)};
}

/// Where a resumed leg's stage started: the kernels its buffer knew, its reward's state.
struct leg_start {
  std::vector<seen_kernels_journal::pair> seen;
  std::optional<std::string> reward_state;
};

result<stage_run> run_stage(const stage_spec& s, const manifest& m,
                            const std::vector<messages::envelope>& inputs, const leg_start& start) {
  if (s.kind == actor_kind::reward) {
    // No run directory: a replay re-scores, it writes neither best kernels nor state.
    auto logic = make_replay_reward_logic(m, start.reward_state);
    if (!logic) return error{"the leg's saved reward state: " + logic.message()};
    // Turns whose episode goes on leave the reward on the observations link, not the scored one
    // compared here: they are collected apart (the next turns they lead to are not replayed).
    auto observations = std::make_shared<std::vector<messages::envelope>>();
    return drive<actors::scored_sink, actors::scored_msg>(
        inputs, [&](caf::actor_system& sys, actors::scored_sink sink) {
          return actors::spawn_reward(sys, "reward/replay", *logic, sink, {},
                                      spawn_collector<actors::scored_sink, actors::scored_msg>(sys, observations));
        });
  }
  return drive<actors::batch_sink, actors::train_batch_msg>(
      inputs, [&](caf::actor_system& sys, actors::batch_sink sink) {
        return actors::spawn_buffer(sys, "buffer/replay", make_buffer_logic(m, start.seen), sink);
      });
}

// ---- comparing outputs ------------------------------------------------------------------------

std::string snippet(const json& j) {
  auto s = j.dump();
  if (s.size() > 72) s = s.substr(0, 69) + "...";
  return s;
}

/// The first place where two JSON values differ, as "path: replayed X, recorded Y".
std::optional<std::string> first_difference(const json& a, const json& b, const std::string& at) {
  // The JSON leaves out fields holding their schema default (0, false, empty), so absent is a value.
  constexpr const char* absent = "absent (schema default)";
  if (a == b) return std::nullopt;
  const auto where = at.empty() ? std::string("(root)") : at;
  if (a.is_object() && b.is_object()) {
    // nlohmann's objects are ordered maps, so this walks keys in one order for both.
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto path = at.empty() ? it.key() : at + "." + it.key();
      if (!b.contains(it.key()))
        return path + ": replayed " + snippet(*it) + ", recorded " + absent;
      if (auto d = first_difference(*it, b[it.key()], path)) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key()))
        return (at.empty() ? it.key() : at + "." + it.key()) + ": replayed " + absent +
               ", recorded " + snippet(*it);
  }
  if (a.is_array() && b.is_array()) {
    const auto n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i)
      if (auto d = first_difference(a[i], b[i], where + "[" + std::to_string(i) + "]")) return d;
    return where + ": replayed " + std::to_string(a.size()) + " elements, recorded " +
           std::to_string(b.size());
  }
  return where + ": replayed " + snippet(a) + ", recorded " + snippet(b);
}

/// The envelope as JSON without the header fields that legitimately differ between runs.
result<json> comparable_json(const messages::envelope& e) {
  auto text = messages::to_json(e);
  if (!text) return text.err();
  auto j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return error{"envelope JSON could not be parsed"};
  for (const char* k : {"message_id", "send_time_ns", "sender"}) j.erase(k);
  return j;
}

/// Every double of the scored samples an envelope carries, with its path. The JSON form prints
/// doubles to 12 digits; these are compared bit for bit, so "exactly" means exactly.
void scored_doubles(const wire::Scored& s, const std::string& at,
                    std::vector<std::pair<std::string, double>>& out) {
  out.emplace_back(at + "reward", s.reward());
  out.emplace_back(at + "speedup", s.speedup());
  out.emplace_back(at + "baseline_ms", s.baseline_ms());
}

std::vector<std::pair<std::string, double>> exact_doubles(const messages::envelope& e) {
  std::vector<std::pair<std::string, double>> out;
  if (const auto* s = e.as<wire::Scored>()) scored_doubles(*s, "payload.", out);
  if (const auto* b = e.as<wire::TrainBatch>(); b && b->groups())
    for (flatbuffers::uoffset_t g = 0; g < b->groups()->size(); ++g) {
      const auto* group = b->groups()->Get(g);
      if (group->draw_rewards())
        for (flatbuffers::uoffset_t i = 0; i < group->draw_rewards()->size(); ++i)
          out.emplace_back("payload.groups[" + std::to_string(g) + "].draw_rewards[" +
                               std::to_string(i) + "]",
                           group->draw_rewards()->Get(i));
      if (!group->samples()) continue;
      for (flatbuffers::uoffset_t i = 0; i < group->samples()->size(); ++i)
        scored_doubles(*group->samples()->Get(i),
                       "payload.groups[" + std::to_string(g) + "].samples[" + std::to_string(i) +
                           "].",
                       out);
    }
  return out;
}

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// How `replayed` differs from `recorded`, or nullopt when they are the same output.
std::optional<std::string> compare(const messages::envelope& replayed,
                                   const messages::envelope& recorded) {
  const auto& a = replayed.get();
  const auto& b = recorded.get();
  if (a.sample_id() != b.sample_id())
    return "sample_id: replayed " + std::to_string(a.sample_id()) + ", recorded " +
           std::to_string(b.sample_id());
  if (a.policy_version() != b.policy_version())
    return "policy_version: replayed " + std::to_string(a.policy_version()) + ", recorded " +
           std::to_string(b.policy_version());
  if (replayed.type() != recorded.type())
    return "payload type: replayed " + std::string(messages::payload_name(replayed.type())) +
           ", recorded " + std::string(messages::payload_name(recorded.type()));
  auto ja = comparable_json(replayed);
  auto jb = comparable_json(recorded);
  if (!ja || !jb) return "cannot render as JSON: " + (ja ? jb.message() : ja.message());
  if (auto d = first_difference(*ja, *jb, "")) return d;
  const auto da = exact_doubles(replayed);
  const auto db = exact_doubles(recorded);
  for (std::size_t i = 0; i < std::min(da.size(), db.size()); ++i)
    if (std::memcmp(&da[i].second, &db[i].second, sizeof(double)) != 0)
      return da[i].first + ": replayed " + exact(da[i].second) + ", recorded " +
             exact(db[i].second) + " (beyond JSON's precision)";
  return std::nullopt;
}

/// Compares outputs with expected ones in order, prints the differences, and returns how many
/// positions differ (content, or an output missing or extra).
std::uint64_t report_diff(const std::vector<messages::envelope>& outputs,
                          const std::vector<messages::record>& expected, std::uint64_t show,
                          std::ostream& out) {
  std::uint64_t differ = 0;
  std::uint64_t shown = 0;
  const auto n = std::min(outputs.size(), expected.size());
  for (std::size_t i = 0; i < n; ++i) {
    auto d = compare(outputs[i], expected[i].env);
    if (!d) continue;
    if (++differ <= show) {
      out << "  output #" << i << " (sample " << expected[i].env->sample_id() << "): " << *d
          << "\n";
      ++shown;
    }
  }
  if (differ > shown) out << "  ... and " << differ - shown << " more differing outputs\n";
  if (expected.size() > n)
    out << "  missing: " << expected.size() - n << " recorded output(s) not produced, first #" << n
        << " (sample " << expected[n].env->sample_id() << ", "
        << messages::payload_name(expected[n].env.type()) << ")\n";
  if (outputs.size() > n)
    out << "  extra: " << outputs.size() - n << " output(s) produced but not recorded, first #" << n
        << " (sample " << outputs[n]->sample_id() << ", "
        << messages::payload_name(outputs[n].type()) << ")\n";
  return differ;
}

// ---- the command ------------------------------------------------------------------------------

result<manifest> find_manifest(const replay_options& opt, const file_place& place,
                               std::string& used, std::ostream& err) {
  if (opt.manifest) {
    used = *opt.manifest;
    return load_manifest(*opt.manifest);
  }
  if (place.run_dir) {
    const auto path = (*place.run_dir / "manifest.toml").string();
    std::error_code ec;
    if (fs::exists(path, ec)) {
      used = path;
      return load_manifest(path);
    }
  }
  used = "<default manifest>";
  err << tool << "note: no manifest.toml next to the recordings and no --manifest: using the "
      << "embedded default, whose stage settings may not be the run's\n";
  return default_manifest();
}

int replay_checked(const replay_options& opt, std::ostream& out, std::ostream& err) {
  const auto spec = replayable(opt.stage);
  if (!spec) {
    err << not_replayable_message(opt.stage);
    return exit_usage;
  }
  if (opt.file.empty()) {
    err << tool << "no input recording given\n";
    return exit_usage;
  }
  if (opt.weights && !spec->takes_weights) {
    err << tool << "--weights applies to the buffer stage only; the " << opt.stage
        << " stage does not read weights\n";
    return exit_usage;
  }
  const auto place = locate(opt.file);

  std::string manifest_used;
  auto m = find_manifest(opt, place, manifest_used, err);
  if (!m) {
    err << tool << m.message() << "\n";
    return exit_differs;
  }
  bound_episode_tokens(*m);  // as the run did, so episodes end where they ended there
  if (const auto note = dedup_left_out_note(*m); opt.stage == "buffer" && !note.empty())
    err << tool << note;

  std::string expect_path;
  if (opt.expect) {
    expect_path = *opt.expect;
  } else {
    auto found = find_expected(place, spec->output);
    if (!found) {
      err << tool << found.message() << "\n";
      return exit_usage;
    }
    expect_path = *found;
  }

  std::optional<std::string> weights_path = opt.weights;
  if (spec->takes_weights && !weights_path) {
    if (place.run_dir && !place.process.empty()) {
      const auto p = (place.recordings /
                      (std::string(to_string(link::weights)) + "@" + place.process + ".kfrec"))
                         .string();
      std::error_code ec;
      if (fs::exists(p, ec)) weights_path = p;
    }
    if (!weights_path)
      err << tool << "note: no weights recording for process \""
          << (place.process.empty() ? std::string("?") : place.process)
          << "\" (recordings/weights@PROCESS.kfrec, or --weights): replaying without weights, "
          << "so staleness is judged against policy version 0\n";
  }

  // Read everything first: a broken file is reported before any work is done.
  auto inputs = read_all(opt.file);
  if (!inputs) {
    err << tool << inputs.message() << "\n";
    return exit_differs;
  }
  if (auto s = check_link(*inputs, spec->input, "input of the " + opt.stage + " stage"); !s) {
    err << tool << s.message() << "\n";
    return exit_usage;
  }
  recording weights;
  if (weights_path) {
    auto w = read_all(*weights_path);
    if (!w) {
      err << tool << w.message() << "\n";
      return exit_differs;
    }
    if (auto s = check_link(*w, link::weights, "weights recording"); !s) {
      err << tool << s.message() << "\n";
      return exit_usage;
    }
    weights = std::move(*w);
  }
  auto expected = read_all(expect_path);
  if (!expected) {
    err << tool << expected.message() << "\n";
    return exit_differs;
  }
  if (auto s = check_link(*expected, spec->output, "expected output"); !s) {
    err << tool << s.message() << "\n";
    return exit_usage;
  }

  out << "replaying " << opt.stage << ": input " << opt.file;
  if (weights_path) out << " + weights " << *weights_path;
  out << ", expected " << expect_path << ", manifest " << manifest_used << "\n";

  // A resumed leg's reward started from the state the leg before it left (reward_state_file.hpp).
  leg_start start;
  if (spec->kind == actor_kind::reward && place.run_dir) {
    const auto leg = leg_resumed_at(place);
    if (!leg) {
      err << tool << leg.message() << "\n";
      return exit_differs;
    }
    if (!leg->unknown.empty()) {
      err << tool << "note: " << leg->unknown << ": replaying from a fresh reward state\n";
    } else if (const auto step = leg->step) {
      const auto run_dir = place.run_dir->string();
      auto state = reward_state_file::read_before(run_dir, *step);
      if (!state) {
        err << tool << state.message() << "\n";
        return exit_differs;
      }
      start.reward_state = std::move(*state);
      out << "  the leg resumed at step " << *step << ": its reward "
          << (start.reward_state ? "starts from " + reward_state_file::before_path(run_dir, *step)
                                 : std::string("had no saved state to start from"))
          << "\n";
    }
  }
  // A resumed leg's buffer started out knowing the kernels the legs before it saw (dedup = "run").
  std::vector<seen_kernels_journal::pair>& seen = start.seen;
  if (spec->kind == actor_kind::buffer && m->buffer.dedup == dedup_scope::run)
    if (const auto step = resumed_at(weights)) {
      if (!place.run_dir) {
        err << tool << "the leg resumed at step " << *step << ", so its buffer started from the "
            << "kernels the run saw before (RUN_DIR/buffer/); this recording is not in a run's "
            << "recordings folder, so they cannot be found\n";
        return exit_usage;
      }
      auto before = seen_kernels_journal::read_before(place.run_dir->string(), *step);
      if (!before) {
        err << tool << before.message() << "\n";
        return exit_differs;
      }
      seen = std::move(*before);
      out << "  the leg resumed at step " << *step << ": " << seen.size()
          << " kernel(s) the run saw before count as seen\n";
    }
  auto run = run_stage(*spec, *m, merge_by_receive_time(inputs->records, weights.records), start);
  if (!run) {
    err << tool << run.message() << "\n";
    return exit_differs;
  }

  std::ostringstream details;
  const auto differ = report_diff(run->outputs, expected->records, opt.show, details);
  out << opt.stage << ": " << inputs->records.size() << " inputs";
  if (weights_path) out << " (+ " << weights.records.size() << " weights)";
  out << ", " << run->outputs.size() << " outputs, " << expected->records.size() << " expected, "
      << differ << " differ\n";
  const auto& mt = run->metrics;
  out << "  stage counters: received " << mt.received << ", sent " << mt.sent << ", dropped "
      << mt.dropped << ", errors " << mt.errors;
  if (!mt.last_error.empty()) out << " (last: " << mt.last_error << ")";
  out << "\n" << details.str();

  const bool same = differ == 0 && run->outputs.size() == expected->records.size();
  out << (same ? "reproduced exactly\n" : "NOT reproduced\n");
  return same ? exit_reproduced : exit_differs;
}

}  // namespace

int replay(const replay_options& opt, std::ostream& out, std::ostream& err) {
  // Nothing below should throw; this keeps a bug (or a CAF start-up failure) from escaping main.
  try {
    return replay_checked(opt, out, err);
  } catch (const std::exception& e) {
    err << tool << "internal error: " << e.what() << "\n";
  } catch (...) {
    err << tool << "internal error\n";
  }
  return exit_differs;
}

}  // namespace kforge::pipeline
