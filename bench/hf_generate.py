#!/usr/bin/env python3
"""The anchor of generate_bench: Hugging Face transformers' generate() on the same checkpoint
directory and the same workload (P prompts of T random token ids, N samples each, exactly K new
tokens, temperature 1, no top-k / top-p), sdpa attention, in the given dtype and device.

Prints one line "HF_GENERATE {json}" with the per-repetition seconds and tokens/s, the peak memory
the CUDA caching allocator held for tensors during the timed runs, and the versions used.
Exits non-zero (with the reason on stderr) when something is off, e.g. an output of the wrong shape.
"""
import argparse
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=512)
    p.add_argument("--warmup-tokens", type=int, default=16)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    dtype = getattr(torch, a.dtype)
    # transformers 4.56 renamed torch_dtype to dtype; older versions ignore an unknown `dtype`.
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}
    model = AutoModelForCausalLM.from_pretrained(a.model, attn_implementation="sdpa", **dtype_kw)
    model = model.to(a.device).eval()
    if next(model.parameters()).dtype != dtype:
        sys.exit(f"hf_generate: the model loaded as {next(model.parameters()).dtype}, not {dtype}")

    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.prompt_len), generator=g).to(a.device)
    mask = torch.ones_like(ids)
    cuda = a.device.startswith("cuda")

    def run(new_tokens):
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_p=1.0, top_k=0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             num_return_sequences=a.samples, pad_token_id=0)
        want = (a.batch * a.samples, a.prompt_len + new_tokens)
        if tuple(out.shape) != want:
            sys.exit(f"hf_generate: output shape {tuple(out.shape)}, expected {want}")

    torch.manual_seed(a.seed)
    with torch.inference_mode():
        run(min(a.warmup_tokens, a.new_tokens))
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        seconds = []
        for _ in range(a.reps):
            t = time.perf_counter()
            run(a.new_tokens)
            if cuda:
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t)
    tokens = a.batch * a.samples * a.new_tokens
    print("HF_GENERATE " + json.dumps({
        "seconds": seconds,
        "tokens_per_s": [tokens / s for s in seconds],
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else 0,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attn_implementation": getattr(model.config, "_attn_implementation", "sdpa"),
    }), flush=True)


if __name__ == "__main__":
    main()
