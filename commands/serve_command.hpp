#pragma once
// `kforge serve`: a kforge checkpoint behind the OpenAI-compatible HTTP API that vLLM and SGLang
// offer, so the sampler's openai backend (and any OpenAI client) can use it, and so that backend is
// tested against a real server on every machine. Endpoints:
//   GET  /health                     200 while serving
//   GET  /v1/models                  the served model, with the version of its weights and the
//                                    batching counts (generations run, requests answered)
//   POST /v1/completions             token ids or text in; token ids and their log-probs out
//                                    (vLLM's options: logprobs, return_tokens_as_token_ids,
//                                    return_token_ids)
//   POST /v1/chat/completions        one user message in, the reply's text out
//   POST /update_weights_from_disk   {"model_path": safetensors file or a directory holding
//                                    model.safetensors, "weight_version": optional}: SGLang's name
//   POST /load_lora_adapter          {"lora_name", "lora_path": a PEFT adapter directory,
//        /v1/load_lora_adapter        "weight_version": optional}: SGLang's path and vLLM's. The
//                                    adapter is applied unmerged (model/lora.hpp); the server holds
//                                    one at a time, so a new one replaces the old. The served
//                                    version goes up as with a weight update. 200 {"success": true,
//                                    "message", "version"}; 400 with "success": false and the error
//   POST /unload_lora_adapter        {"lora_name"}: the base model again (version up); 404 when
//        /v1/unload_lora_adapter      no adapter of that name is loaded
// Models and adapters: /v1/models lists the base (--served-model-name) and the loaded adapter
// (--adapter/--adapter-name at start, or the last load), with "parent": the base's name. A
// generation request selects by "model" (vLLM: the base's or the adapter's name) or "lora_path"
// (SGLang: the adapter's name; it wins over "model"). Naming neither gets what is served: the
// adapter while one is loaded. Naming the base while an adapter is loaded gets the base model: the
// adapter is switched off for that generation (model::lora_disabled), so batches are also keyed
// by base or adapter. An unknown name, or an adapter that is not (or no longer) loaded, is a 404
// with code model_not_found.
// Bad requests get the OpenAI error body {"error": {"message", "type", "code"}} and a 4xx status.
// Requests that wait for the model together are batched (commands/serve_batcher.hpp): those with
// equal n, temperature, top_p and max_tokens run as one generation of up to --max-batch-sequences
// sequences, each request with its own seed, so each gets exactly the samples it would get alone.
// A weight update or an adapter load waits for the generation running and the next one waits for it.
// The TU is torch-free: it drives the engine through engine_policy (stages/engine_sampler.hpp).

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kforge::pipeline {

struct serve_options {
  std::string model;      ///< checkpoint directory
  std::string tokenizer;  ///< directory of the tokenizer files; empty: the model directory
  std::string host = "127.0.0.1";
  int port = 8000;  ///< 0: any free port (the one bound is printed)
  int gpu = -1;     ///< CUDA ordinal, -1: the CPU
  std::string served_name;  ///< the model id in /v1/models; empty: the directory's name
  int max_tokens = 4096;    ///< the most new tokens one request may ask for
  /// Sequences (requests x n) one generation decodes at most: the engine sampler's default batch,
  /// 8 groups of 8.
  int max_batch_sequences = 64;
  /// How long the server waits for a burst of requests to finish arriving before it generates
  /// (quiet time after the last arrival; the wait is 10 times this at most). The openai sampler
  /// tokenizes each prompt before it sends it, so a burst's requests can be milliseconds apart;
  /// a batch split in two costs a whole generation, this wait a few milliseconds.
  int batch_wait_ms = 20;
  /// A PEFT LoRA adapter directory loaded at start (unmerged); empty: none.
  std::string adapter;
  /// Its name, as requests and /unload_lora_adapter give it; empty: the directory's name.
  std::string adapter_name;
};

/// Serves until SIGINT or SIGTERM. Prints "kforge serve: listening on http://HOST:PORT" once bound.
int serve_command(const serve_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline
