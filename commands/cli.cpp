// The kforge binary: one executable, a subcommand per job. Each subcommand is a function in
// its own folder (runtime/, report/, sandbox/, tasks/, ...) returning an exit code; this file only parses flags.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <iostream>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kforge: reinforcement learning for fast, correct CUDA kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kforge 0.1.0");

  kforge::pipeline::run_command_options run;
  auto* run_cmd = app.add_subcommand("run", "Start a run: the topology of a pipeline manifest");
  run_cmd->add_option("--manifest,-m", run.manifest, "Pipeline manifest (TOML); default: embedded")
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--steps", run.steps, "Training steps (overrides run.steps)");
  run_cmd->add_option("--run-dir", run.run_dir, "Run directory (overrides run.run_dir)");
  run_cmd->add_option("--resume", run.resume,
                      "Continue the run in RUN_DIR from its newest checkpoint (its own manifest; "
                      "--steps may raise the total)");
  run_cmd->add_option("--time-limit", run.time_limit_s,
                      "Stop after this many seconds as if the steps were done: drain, checkpoint, "
                      "summary, exit 0 when the counts balance (overrides run.time_limit_s; 0: none; "
                      "with --resume, per leg)");
  bool no_progress = false;
  run_cmd->add_flag("--no-progress", no_progress, "No live progress line");
  run_cmd->add_flag("--check", run.check_only,
                    "Validate the manifest, print the plan and what each stage needs; start nothing");
  run_cmd->add_option("--launcher", run.launcher,
                      "slurm: inside a Slurm allocation, place the manifest's nodes on the allocated "
                      "nodes, derive the links across them, and start each other node's processes "
                      "as srun job steps (docs/cluster.md)")
      ->check(CLI::IsMember({"slurm"}));

  kforge::pipeline::worker_command_options worker;
  auto* worker_cmd = app.add_subcommand(
      "worker", "Run one process of a manifest's topology (the head starts local ones itself)");
  worker_cmd->add_option("--manifest,-m", worker.manifest, "Pipeline manifest");
  worker_cmd->add_option("--process,-p", worker.process, "Process name in the manifest");
  std::string worker_role;
  kforge::pipeline::sandbox_worker_options sandbox_worker;
  worker_cmd->add_option("--role", worker_role,
                         "sandbox: join a running sandbox pool without a manifest process entry")
      ->check(CLI::IsMember({"sandbox"}));
  worker_cmd->add_option("--connect", sandbox_worker.connect,
                         "With --role sandbox: the pool's worker endpoint (tcp://HEAD:PORT)");
  worker_cmd->add_option("--threads", sandbox_worker.threads,
                         "With --role sandbox: candidates in flight, 1-256 like "
                         "sandbox.compile_jobs (default 4)")
      ->check(CLI::Range(1, kforge::max_compile_jobs));
  worker_cmd->add_option("--run-dir", worker.run_dir, "Run directory (default: run.run_dir)");
  worker_cmd->add_option("--steps", worker.steps, "Training steps (the head passes its override)");
  worker_cmd->add_option("--resume-step", worker.resume_step,
                         "A resumed run's step (the head passes it, with --resume-checkpoint)");
  worker_cmd->add_option("--resume-checkpoint", worker.resume_checkpoint,
                         "A resumed run's checkpoint directory (the head passes it)");

  kforge::pipeline::inspect_options inspect;
  auto* inspect_cmd = app.add_subcommand("inspect", "Print a recording as JSON lines");
  inspect_cmd->add_option("file", inspect.file, "Recording (.kfrec)")->required();
  inspect_cmd->add_option("--payload", inspect.payload, "Only envelopes of this payload type");
  inspect_cmd->add_option("--limit", inspect.limit, "At most this many envelopes (0: all)");
  inspect_cmd->add_flag("--header", inspect.header, "Print the recording header first");

  kforge::pipeline::replay_options replay;
  auto* replay_cmd = app.add_subcommand(
      "replay", "Feed a stage its recorded inputs and diff its outputs against the recorded ones");
  replay_cmd->add_option("file", replay.file, "The stage's input recording")->required();
  replay_cmd->add_option("--stage", replay.stage, "Stage to replay: reward or buffer")->required();
  replay_cmd->add_option("--expect", replay.expect, "Recording of the expected outputs");
  replay_cmd->add_option("--weights", replay.weights, "Buffer only: recording of its weights input");
  replay_cmd->add_option("--manifest", replay.manifest, "The run's manifest (stage settings)");
  replay_cmd->add_option("--show", replay.show, "Differences to print in full");

  kforge::pipeline::report_options report;
  auto* report_cmd = app.add_subcommand(
      "report", "Write one self-contained HTML page about a run: charts, tables, best kernels");
  report_cmd->add_option("run_dir", report.run_dir, "Run directory")->required();
  report_cmd->add_option("--out,-o", report.out, "HTML file to write (default RUN_DIR/report.html)");

  std::string manifest_file;
  auto* manifest_cmd =
      app.add_subcommand("manifest", "Validate a pipeline manifest and print its summary");
  manifest_cmd->add_option("file", manifest_file, "Manifest (default: the embedded one)");
  bool print_default = false;
  manifest_cmd->add_flag("--print-default", print_default, "Print the embedded default manifest");
  std::string manifest_launcher;
  manifest_cmd->add_option("--launcher", manifest_launcher,
                           "slurm: validate it placed on the Slurm allocation the environment "
                           "describes (SLURM_JOB_NODELIST, ...) and print the placement")
      ->check(CLI::IsMember({"slurm"}));

  kforge::pipeline::memory_table_options memory;
  auto* memory_cmd = app.add_subcommand(
      "memory-plan", "Print the memory plan's estimates (as `kforge run --check` makes them) for models "
                     "and ways of training them, as a Markdown table; only config.json is read");
  memory_cmd->add_option("models", memory.models, "Model directories or config.json files")->required();
  memory_cmd->add_option("--micro-batch", memory.micro_batch, "Sequences per micro-batch (default 4)");
  memory_cmd->add_option("--tokens", memory.sequence_tokens, "Tokens per sequence (default 4096)");
  memory_cmd->add_option("--lora-rank", memory.lora_rank, "Rank of the LoRA modes (default 64)");
  memory_cmd->add_option("--shard-ranks", memory.shard_ranks,
                         "Ranks of the sharded-optimiser modes, comma-separated (default 2,8)")
      ->delimiter(',');

  kforge::sandbox::eval_options eval;
  auto* eval_cmd = kforge::sandbox::add_eval_subcommand(app, eval);
  kforge::sandbox::compare_options compare;
  auto* compare_cmd = kforge::sandbox::add_compare_subcommand(app, compare);
  const auto [child_cmd, ref_cmd] = kforge::sandbox::add_sandbox_children(app);
  kforge::tasks::tasks_options tasks;
  auto* tasks_cmd = kforge::tasks::add_tasks_subcommand(app, tasks);
  // Commands built only where their libraries are (LibTorch, the corpus writer): each registers
  // its flags and how it runs, so dispatch below needs no #ifdef.
  struct optional_command {
    CLI::App* cmd;
    std::function<int()> run;
  };
  std::vector<optional_command> optional;
#ifdef KFORGE_HAVE_SAMPLE
  kforge::pipeline::sample_options sample;
  optional.push_back({kforge::pipeline::add_sample_subcommand(app, sample),
                      [&] { return kforge::pipeline::sample_command(sample, std::cout, std::cerr); }});
  kforge::pipeline::optimize_options optimize;
  optional.push_back({kforge::pipeline::add_optimize_subcommand(app, optimize),
                      [&] { return kforge::pipeline::optimize_command(optimize, std::cout, std::cerr); }});
  kforge::pipeline::serve_options serve;
  optional.push_back({kforge::pipeline::add_serve_subcommand(app, serve),
                      [&] { return kforge::pipeline::serve_command(serve, std::cout, std::cerr); }});
#endif
#ifdef KFORGE_HAVE_CORPUS
  kforge::corpus::corpus_options corpus;
  optional.push_back({kforge::corpus::add_corpus_subcommand(app, corpus),
                      [&] { return kforge::corpus::corpus_command(corpus, std::cout, std::cerr); }});
#endif
#if defined(KFORGE_HAVE_PRETRAIN)
  kforge::trainer::pretrain_options pretrain;
  optional.push_back({kforge::trainer::add_pretrain_subcommand(app, pretrain), [&] {
                        pretrain.command = kforge::trainer::pretrain_command_line(argc, argv);
                        return kforge::trainer::pretrain_command(pretrain, std::cout, std::cerr);
                      }});
#endif
#ifdef KFORGE_HAVE_TRAINER_RANK
  auto* rank_cmd = app.add_subcommand(
      "trainer-rank", "Join a running trainer as one of its data-parallel ranks (trainer.remote_ranks)");
  std::string rank_connect;
  int rank_device = -2;
  rank_cmd->add_option("--connect", rank_connect, "Rank 0's trainer.rank_endpoint (tcp://HOST:PORT)");
  rank_cmd->add_option("--device", rank_device, "This rank's CUDA device, or -1 for the CPU (needed with --connect)");
  optional.push_back({rank_cmd, [&] {
                        if (!rank_connect.empty() && rank_device < -1) {
                          std::cerr << "kforge trainer-rank: --connect needs --device N (a CUDA device, or -1 for the CPU)\n";
                          return 2;
                        }
                        if (rank_connect.empty() && !fd3_is_socket()) {
                          std::cerr << "kforge trainer-rank is started by the trainer: fd 3 is not its "
                                       "control socket (on another host: --connect ENDPOINT --device N)\n";
                          return 2;
                        }
                        return kforge::pipeline::trainer_rank_main(rank_connect, std::max(rank_device, -1));
                      }});
#endif
#ifdef KFORGE_HAVE_TOKENIZER
  kforge::model::tokenizer_train_options tokenizer;
  optional.push_back({kforge::model::add_tokenizer_subcommand(app, tokenizer),
                      [&] { return kforge::model::run_tokenizer_subcommand(tokenizer, std::cout, std::cerr); }});
#endif
#ifdef KFORGE_MODEL_WITH_TORCH
  kforge::model::model_subcommand_options model_tools;
  auto* model_cmd = kforge::model::add_model_subcommand(app, model_tools);
  optional.push_back({model_cmd, [&] {
                        return kforge::model::run_model_subcommand(*model_cmd, model_tools, std::cout, std::cerr);
                      }});
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_error_exit(app, e);
  }

  if (*run_cmd) {
    if (no_progress) run.progress = false;
    return kforge::pipeline::run_command(run, std::cout, std::cerr);
  }
  if (*worker_cmd) {
    if (worker_role == "sandbox") {
      sandbox_worker.manifest = worker.manifest;
      return kforge::pipeline::sandbox_worker_command(sandbox_worker, std::cout, std::cerr);
    }
    if (worker.manifest.empty() || worker.process.empty()) {
      std::cerr << "kforge worker: needs --manifest FILE --process NAME (or --role sandbox "
                   "--connect ENDPOINT)\n";
      return 2;
    }
    return kforge::pipeline::worker_command(worker, std::cerr);
  }
  if (*inspect_cmd) return kforge::pipeline::inspect(inspect, std::cout, std::cerr);
  if (*replay_cmd) return kforge::pipeline::replay(replay, std::cout, std::cerr);
  if (*report_cmd) return kforge::pipeline::report_command(report, std::cout, std::cerr);
  if (*manifest_cmd) {
    if (print_default) {
      std::cout << kforge::pipeline::default_manifest_text();
      return 0;
    }
    if (manifest_launcher == "slurm") {
      auto placed = manifest_file.empty()
                        ? kforge::pipeline::place_on_slurm(kforge::pipeline::default_manifest_text(),
                                                           "<default manifest>")
                        : kforge::pipeline::place_file_on_slurm(manifest_file);
      if (!placed) {
        std::cerr << "kforge manifest: " << placed.message() << "\n";
        return 2;
      }
      kforge::pipeline::print_placement(*placed, std::cout);
      std::cout << placed->placed.m.summary();
      return 0;
    }
    auto m = manifest_file.empty() ? kforge::pipeline::default_manifest()
                                   : kforge::pipeline::load_manifest(manifest_file);
    if (!m) {
      std::cerr << "kforge manifest: " << m.message() << "\n";
      return 2;
    }
    std::cout << m->summary();
    return 0;
  }
  if (*memory_cmd) return kforge::pipeline::memory_table_command(memory, std::cout, std::cerr);
  if (*eval_cmd) return kforge::sandbox::eval_command(eval, std::cout, std::cerr);
  if (*compare_cmd) return kforge::sandbox::compare_command(compare, std::cout, std::cerr);
  if (*child_cmd)
    return fd3_is_socket() ? kforge::sandbox::candidate_child_main()
                           : started_by_kforge("sandbox-child", "the sandbox");
  if (*ref_cmd)
    return fd3_is_socket() ? kforge::sandbox::reference_server_main()
                           : started_by_kforge("sandbox-ref", "the sandbox");
  if (*tasks_cmd) {
    if (tasks_cmd->got_subcommand("check-server") && !fd3_is_socket())
      return started_by_kforge("tasks check-server", "kforge tasks validate");
    return kforge::tasks::run_tasks_subcommand(*tasks_cmd, tasks, std::cout, std::cerr);
  }
  for (const auto& c : optional)
    if (*c.cmd) return c.run();
  return 1;
}
