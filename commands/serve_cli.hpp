#pragma once
// The flags of `kforge serve`, for commands/cli.cpp (header-only: only the kforge executable links
// CLI11).
#include <CLI/CLI.hpp>

#include "commands/serve_command.hpp"

namespace kforge::pipeline {

inline CLI::App* add_serve_subcommand(CLI::App& app, serve_options& o) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve a checkpoint over the OpenAI-compatible HTTP API (token ids and log-probs out)");
  cmd->add_option("--model", o.model, "Checkpoint directory (Hugging Face layout)")->required();
  cmd->add_option("--tokenizer", o.tokenizer, "Directory of the tokenizer files (default: the model's)");
  cmd->add_option("--host", o.host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o.port, "Port (default 8000; 0: any free one, printed)");
  cmd->add_option("--gpu", o.gpu, "CUDA ordinal (default: -1, the CPU)");
  cmd->add_option("--served-model-name", o.served_name, "Model id in /v1/models (default: the directory's name)");
  cmd->add_option("--max-tokens", o.max_tokens, "Most new tokens a request may ask for (default 4096)");
  cmd->add_option("--max-batch-sequences", o.max_batch_sequences,
                  "Most sequences (requests x n) generated together in one batch (default 64)");
  cmd->add_option("--batch-wait-ms", o.batch_wait_ms,
                  "Quiet time after the last request arrived before a batch starts (default 20)");
  cmd->add_option("--adapter", o.adapter,
                  "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) served from the start");
  cmd->add_option("--adapter-name", o.adapter_name,
                  "Name requests select the adapter by (\"model\" or \"lora_path\"; default: the directory's name)");
  return cmd;
}

}  // namespace kforge::pipeline
