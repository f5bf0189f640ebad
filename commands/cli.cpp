// The kforge binary: one executable, a subcommand per job. Each subcommand is a function in
// its own folder (runtime/, report/, sandbox/, tasks/, ...) returning an exit code; this file only parses flags.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/head.hpp"
#include "runtime/memory_table.hpp"
#include "commands/inspect_command.hpp"
#include "config/manifest.hpp"
#include "commands/replay_command.hpp"
#include "report/report.hpp"
#include "runtime/sandbox_service.hpp"
#include "runtime/slurm_launch.hpp"
#include "sandbox/children.hpp"
#include "sandbox/eval_cli.hpp"
#include "tasks/tasks_cli.hpp"
#ifdef KFORGE_HAVE_SAMPLE
#include "commands/optimize_cli.hpp"
#include "commands/sample_cli.hpp"
#include "commands/serve_cli.hpp"
#endif
#ifdef KFORGE_HAVE_TRAINER_RANK
#include "stages/policy_trainer_stage.hpp"
#endif
#ifdef KFORGE_HAVE_CORPUS
#include "corpus/corpus_cli.hpp"
#endif
#if defined(KFORGE_HAVE_PRETRAIN)
#include "trainer/pretrain_cli.hpp"
#include "trainer/pretrain_command.hpp"
#endif
#ifdef KFORGE_HAVE_TOKENIZER
#include "model/tokenizer_cli.hpp"
#endif
#ifdef KFORGE_MODEL_WITH_TORCH
#include "model/model_cli.hpp"
#endif

namespace {

// Subcommands kforge starts itself, talking to them over a socket on fd 3. Run by hand there is
// no such socket: they say who starts them and end with a usage error rather than serve nobody.
bool fd3_is_socket() {
  struct stat st {};
  return ::fstat(3, &st) == 0 && S_ISSOCK(st.st_mode);
}

int started_by_kforge(const std::string& command, const std::string& starter) {
  std::cerr << "kforge " << command << " is started by " << starter
            << ": fd 3 is not its control socket\n";
  return 2;
}

// CLI11's parse errors (unknown flag, missing argument, bad value) are usage errors: exit 2 with
// CLI11's message. --help and --version keep exit 0.
int parse_error_exit(CLI::App& app, const CLI::ParseError& e) {
  const int code = app.exit(e);
  return code == static_cast<int>(CLI::ExitCodes::Success) ? 0 : 2;
}

/// A subcommand and how it runs once the command line is parsed. Its options live in the closure,
/// so each registration is one function and main() only dispatches.
struct command {
  CLI::App* cmd;
  std::function<int()> run;
};

command add_run(CLI::App& app) {
  auto run = std::make_shared<kforge::pipeline::run_command_options>();
  auto no_progress = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("run", "Start a run: the topology of a pipeline manifest");
  cmd->add_option("--manifest,-m", run->manifest, "Pipeline manifest (TOML); default: embedded")
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", run->steps, "Training steps (overrides run.steps)");
  cmd->add_option("--run-dir", run->run_dir, "Run directory (overrides run.run_dir)");
  cmd->add_option("--resume", run->resume,
                  "Continue the run in RUN_DIR from its newest checkpoint (its own manifest; "
                  "--steps may raise the total)");
  cmd->add_option("--time-limit", run->time_limit_s,
                  "Stop after this many seconds as if the steps were done: drain, checkpoint, "
                  "summary, exit 0 when the counts balance (overrides run.time_limit_s; 0: none; "
                  "with --resume, per leg)");
  cmd->add_flag("--no-progress", *no_progress, "No live progress line");
  cmd->add_flag("--check", run->check_only,
                "Validate the manifest, print the plan and what each stage needs; start nothing");
  cmd->add_option("--launcher", run->launcher,
                  "slurm: inside a Slurm allocation, place the manifest's nodes on the allocated "
                  "nodes, derive the links across them, and start each other node's processes "
                  "as srun job steps (docs/cluster.md)")
      ->check(CLI::IsMember({"slurm"}));
  return {cmd, [run, no_progress] {
            if (*no_progress) run->progress = false;
            return kforge::pipeline::run_command(*run, std::cout, std::cerr);
          }};
}

command add_worker(CLI::App& app) {
  auto worker = std::make_shared<kforge::pipeline::worker_command_options>();
  auto sandbox_worker = std::make_shared<kforge::pipeline::sandbox_worker_options>();
  auto role = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("worker",
                                 "Run one process of a manifest's topology (the head starts local ones itself)");
  cmd->add_option("--manifest,-m", worker->manifest, "Pipeline manifest");
  cmd->add_option("--process,-p", worker->process, "Process name in the manifest");
  cmd->add_option("--role", *role, "sandbox: join a running sandbox pool without a manifest process entry")
      ->check(CLI::IsMember({"sandbox"}));
  cmd->add_option("--connect", sandbox_worker->connect,
                  "With --role sandbox: the pool's worker endpoint (tcp://HEAD:PORT)");
  cmd->add_option("--threads", sandbox_worker->threads,
                  "With --role sandbox: candidates in flight, 1-256 like "
                  "sandbox.compile_jobs (default 4)")
      ->check(CLI::Range(1, kforge::max_compile_jobs));
  cmd->add_option("--run-dir", worker->run_dir, "Run directory (default: run.run_dir)");
  cmd->add_option("--steps", worker->steps, "Training steps (the head passes its override)");
  cmd->add_option("--resume-step", worker->resume_step,
                  "A resumed run's step (the head passes it, with --resume-checkpoint)");
  cmd->add_option("--resume-checkpoint", worker->resume_checkpoint,
                  "A resumed run's checkpoint directory (the head passes it)");
  return {cmd, [worker, sandbox_worker, role] {
            if (*role == "sandbox") {
              sandbox_worker->manifest = worker->manifest;
              return kforge::pipeline::sandbox_worker_command(*sandbox_worker, std::cout, std::cerr);
            }
            if (worker->manifest.empty() || worker->process.empty()) {
              std::cerr << "kforge worker: needs --manifest FILE --process NAME (or --role sandbox "
                           "--connect ENDPOINT)\n";
              return 2;
            }
            return kforge::pipeline::worker_command(*worker, std::cerr);
          }};
}

command add_inspect(CLI::App& app) {
  auto o = std::make_shared<kforge::pipeline::inspect_options>();
  auto* cmd = app.add_subcommand("inspect", "Print a recording as JSON lines");
  cmd->add_option("file", o->file, "Recording (.kfrec)")->required();
  cmd->add_option("--payload", o->payload, "Only envelopes of this payload type");
  cmd->add_option("--limit", o->limit, "At most this many envelopes (0: all)");
  cmd->add_flag("--header", o->header, "Print the recording header first");
  return {cmd, [o] { return kforge::pipeline::inspect(*o, std::cout, std::cerr); }};
}

command add_replay(CLI::App& app) {
  auto o = std::make_shared<kforge::pipeline::replay_options>();
  auto* cmd = app.add_subcommand("replay",
                                 "Feed a stage its recorded inputs and diff its outputs against the recorded ones");
  cmd->add_option("file", o->file, "The stage's input recording")->required();
  cmd->add_option("--stage", o->stage, "Stage to replay: reward or buffer")->required();
  cmd->add_option("--expect", o->expect, "Recording of the expected outputs");
  cmd->add_option("--weights", o->weights, "Buffer only: recording of its weights input");
  cmd->add_option("--manifest", o->manifest, "The run's manifest (stage settings)");
  cmd->add_option("--show", o->show, "Differences to print in full");
  return {cmd, [o] { return kforge::pipeline::replay(*o, std::cout, std::cerr); }};
}

command add_report(CLI::App& app) {
  auto o = std::make_shared<kforge::pipeline::report_options>();
  auto* cmd = app.add_subcommand("report",
                                 "Write one self-contained HTML page about a run: charts, tables, best kernels");
  cmd->add_option("run_dir", o->run_dir, "Run directory")->required();
  cmd->add_option("--out,-o", o->out, "HTML file to write (default RUN_DIR/report.html)");
  return {cmd, [o] { return kforge::pipeline::report_command(*o, std::cout, std::cerr); }};
}

/// `kforge manifest`: what `--print-default`, `--launcher slurm` or plain validation prints.
struct manifest_options {
  std::string file;
  bool print_default = false;
  std::string launcher;
};

int manifest_command(const manifest_options& o) {
  if (o.print_default) {
    std::cout << kforge::pipeline::default_manifest_text();
    return 0;
  }
  if (o.launcher == "slurm") {
    auto placed = o.file.empty()
                      ? kforge::pipeline::place_on_slurm(kforge::pipeline::default_manifest_text(), "<default manifest>")
                      : kforge::pipeline::place_file_on_slurm(o.file);
    if (!placed) {
      std::cerr << "kforge manifest: " << placed.message() << "\n";
      return 2;
    }
    kforge::pipeline::print_placement(*placed, std::cout);
    std::cout << placed->placed.m.summary();
    return 0;
  }
  auto m = o.file.empty() ? kforge::pipeline::default_manifest() : kforge::pipeline::load_manifest(o.file);
  if (!m) {
    std::cerr << "kforge manifest: " << m.message() << "\n";
    return 2;
  }
  std::cout << m->summary();
  return 0;
}

command add_manifest(CLI::App& app) {
  auto o = std::make_shared<manifest_options>();
  auto* cmd = app.add_subcommand("manifest", "Validate a pipeline manifest and print its summary");
  cmd->add_option("file", o->file, "Manifest (default: the embedded one)");
  cmd->add_flag("--print-default", o->print_default, "Print the embedded default manifest");
  cmd->add_option("--launcher", o->launcher,
                  "slurm: validate it placed on the Slurm allocation the environment "
                  "describes (SLURM_JOB_NODELIST, ...) and print the placement")
      ->check(CLI::IsMember({"slurm"}));
  return {cmd, [o] { return manifest_command(*o); }};
}

command add_memory_plan(CLI::App& app) {
  auto o = std::make_shared<kforge::pipeline::memory_table_options>();
  auto* cmd = app.add_subcommand(
      "memory-plan", "Print the memory plan's estimates (as `kforge run --check` makes them) for models "
                     "and ways of training them, as a Markdown table; only config.json is read");
  cmd->add_option("models", o->models, "Model directories or config.json files")->required();
  cmd->add_option("--micro-batch", o->micro_batch, "Sequences per micro-batch (default 4)");
  cmd->add_option("--tokens", o->sequence_tokens, "Tokens per sequence (default 4096)");
  cmd->add_option("--lora-rank", o->lora_rank, "Rank of the LoRA modes (default 64)");
  cmd->add_option("--shard-ranks", o->shard_ranks, "Ranks of the sharded-optimiser modes, comma-separated (default 2,8)")
      ->delimiter(',');
  return {cmd, [o] { return kforge::pipeline::memory_table_command(*o, std::cout, std::cerr); }};
}

/// eval, compare, the sandbox's children and tasks: registered by their own folders.
void add_sandbox_and_tasks(CLI::App& app, std::vector<command>& commands) {
  auto eval = std::make_shared<kforge::sandbox::eval_options>();
  commands.push_back({kforge::sandbox::add_eval_subcommand(app, *eval),
                      [eval] { return kforge::sandbox::eval_command(*eval, std::cout, std::cerr); }});
  auto compare = std::make_shared<kforge::sandbox::compare_options>();
  commands.push_back({kforge::sandbox::add_compare_subcommand(app, *compare),
                      [compare] { return kforge::sandbox::compare_command(*compare, std::cout, std::cerr); }});
  const auto [child_cmd, ref_cmd] = kforge::sandbox::add_sandbox_children(app);
  commands.push_back({child_cmd, [] {
                        return fd3_is_socket() ? kforge::sandbox::candidate_child_main()
                                               : started_by_kforge("sandbox-child", "the sandbox");
                      }});
  commands.push_back({ref_cmd, [] {
                        return fd3_is_socket() ? kforge::sandbox::reference_server_main()
                                               : started_by_kforge("sandbox-ref", "the sandbox");
                      }});
  auto tasks = std::make_shared<kforge::tasks::tasks_options>();
  auto* tasks_cmd = kforge::tasks::add_tasks_subcommand(app, *tasks);
  commands.push_back({tasks_cmd, [tasks, tasks_cmd] {
                        if (tasks_cmd->got_subcommand("check-server") && !fd3_is_socket())
                          return started_by_kforge("tasks check-server", "kforge tasks validate");
                        return kforge::tasks::run_tasks_subcommand(*tasks_cmd, *tasks, std::cout, std::cerr);
                      }});
}

#ifdef KFORGE_HAVE_TRAINER_RANK
command add_trainer_rank(CLI::App& app) {
  auto* cmd = app.add_subcommand("trainer-rank",
                                 "Join a running trainer as one of its data-parallel ranks (trainer.remote_ranks)");
  auto connect = std::make_shared<std::string>();
  auto device = std::make_shared<int>(-2);
  cmd->add_option("--connect", *connect, "Rank 0's trainer.rank_endpoint (tcp://HOST:PORT)");
  cmd->add_option("--device", *device, "This rank's CUDA device, or -1 for the CPU (needed with --connect)");
  return {cmd, [connect, device] {
            if (!connect->empty() && *device < -1) {
              std::cerr << "kforge trainer-rank: --connect needs --device N (a CUDA device, or -1 for the CPU)\n";
              return 2;
            }
            if (connect->empty() && !fd3_is_socket()) {
              std::cerr << "kforge trainer-rank is started by the trainer: fd 3 is not its "
                           "control socket (on another host: --connect ENDPOINT --device N)\n";
              return 2;
            }
            return kforge::pipeline::trainer_rank_main(*connect, std::max(*device, -1));
          }};
}
#endif

/// Commands built only where their libraries are (LibTorch, the corpus writer).
void add_optional(CLI::App& app, std::vector<command>& commands, [[maybe_unused]] int argc,
                  [[maybe_unused]] char** argv) {
#ifdef KFORGE_HAVE_SAMPLE
  auto sample = std::make_shared<kforge::pipeline::sample_options>();
  commands.push_back({kforge::pipeline::add_sample_subcommand(app, *sample),
                      [sample] { return kforge::pipeline::sample_command(*sample, std::cout, std::cerr); }});
  auto optimize = std::make_shared<kforge::pipeline::optimize_options>();
  commands.push_back({kforge::pipeline::add_optimize_subcommand(app, *optimize),
                      [optimize] { return kforge::pipeline::optimize_command(*optimize, std::cout, std::cerr); }});
  auto serve = std::make_shared<kforge::pipeline::serve_options>();
  commands.push_back({kforge::pipeline::add_serve_subcommand(app, *serve),
                      [serve] { return kforge::pipeline::serve_command(*serve, std::cout, std::cerr); }});
#endif
#ifdef KFORGE_HAVE_CORPUS
  auto corpus = std::make_shared<kforge::corpus::corpus_options>();
  commands.push_back({kforge::corpus::add_corpus_subcommand(app, *corpus),
                      [corpus] { return kforge::corpus::corpus_command(*corpus, std::cout, std::cerr); }});
#endif
#if defined(KFORGE_HAVE_PRETRAIN)
  auto pretrain = std::make_shared<kforge::trainer::pretrain_options>();
  commands.push_back({kforge::trainer::add_pretrain_subcommand(app, *pretrain), [pretrain, argc, argv] {
                        pretrain->command = kforge::trainer::pretrain_command_line(argc, argv);
                        return kforge::trainer::pretrain_command(*pretrain, std::cout, std::cerr);
                      }});
#endif
#ifdef KFORGE_HAVE_TRAINER_RANK
  commands.push_back(add_trainer_rank(app));
#endif
#ifdef KFORGE_HAVE_TOKENIZER
  auto tokenizer = std::make_shared<kforge::model::tokenizer_train_options>();
  commands.push_back({kforge::model::add_tokenizer_subcommand(app, *tokenizer), [tokenizer] {
                        return kforge::model::run_tokenizer_subcommand(*tokenizer, std::cout, std::cerr);
                      }});
#endif
#ifdef KFORGE_MODEL_WITH_TORCH
  auto model_tools = std::make_shared<kforge::model::model_subcommand_options>();
  auto* model_cmd = kforge::model::add_model_subcommand(app, *model_tools);
  commands.push_back({model_cmd, [model_tools, model_cmd] {
                        return kforge::model::run_model_subcommand(*model_cmd, *model_tools, std::cout, std::cerr);
                      }});
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kforge: reinforcement learning for fast, correct CUDA kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kforge 0.1.0");
  std::vector<command> commands{add_run(app),    add_worker(app),   add_inspect(app),
                                add_replay(app), add_report(app),   add_manifest(app),
                                add_memory_plan(app)};
  add_sandbox_and_tasks(app, commands);
  add_optional(app, commands, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_error_exit(app, e);
  }
  for (const auto& c : commands)
    if (*c.cmd) return c.run();
  return 1;
}
