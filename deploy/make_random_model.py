#!/usr/bin/env python3
"""Writes a randomly initialised Qwen2 checkpoint (transformers' own save_pretrained) with a given
tokenizer copied in, for runs of the whole loop on the GPU host before a trained policy exists.

Its kernels are noise: a run with it checks the machinery (sampler on the GPU, real sandbox
verdicts, GRPO steps, weight publishing), never learning. Default shapes are Qwen2.5-0.5B's with the
vocabulary cut to the tokenizer's.
"""
import argparse
import json
import pathlib
import shutil

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--tokenizer", required=True, help="directory with tokenizer.json and tokenizer_config.json")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--heads", type=int, default=14)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=4864)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--like", help="a config.json (e.g. deploy/shapes/qwen2.5-1.5b/config.json) whose layers, "
                   "hidden, heads, KV heads, MLP and tied embeddings replace the flags above; the "
                   "vocabulary stays the tokenizer's")
    a = p.parse_args()
    tied = True
    if a.like:
        like = json.loads(pathlib.Path(a.like).read_text())
        a.layers, a.hidden = like["num_hidden_layers"], like["hidden_size"]
        a.heads, a.kv_heads = like["num_attention_heads"], like["num_key_value_heads"]
        a.intermediate, tied = like["intermediate_size"], like.get("tie_word_embeddings", False)

    tok_dir = pathlib.Path(a.tokenizer)
    vocab = json.loads((tok_dir / "tokenizer.json").read_text())
    size = len(vocab["model"]["vocab"]) + len(vocab.get("added_tokens", []))
    torch.manual_seed(a.seed)
    cfg = Qwen2Config(vocab_size=size, hidden_size=a.hidden, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      intermediate_size=a.intermediate, max_position_embeddings=32768,
                      rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=tied,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (tok_dir / f).exists():
            shutil.copy(tok_dir / f, out / f)
    n = sum(p.numel() for p in model.parameters())
    print(f"random Qwen2: {n / 1e6:.1f} M parameters, vocab {size}, written to {out}")


if __name__ == "__main__":
    main()
