#!/usr/bin/env python3
"""Checks a LoRA adapter that kforge wrote (PEFT layout: adapter_config.json +
adapter_model.safetensors) against Hugging Face's stack: the logits kforge computed for the model
with the adapter (`kforge model logits --adapter`) must be those of the transformers model with the
adapter applied, within the tolerance of the dtype they were computed in.

The adapter is applied with PEFT where it is importable, else merged by hand as PEFT's layout
defines it: for every adapted module M, W'(M) = W(M) + scale * lora_B(M) @ lora_A(M), with
scale = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).

  check_peft_adapter.py --model DIR --adapter DIR --kforge-logits FILE [--dtype bfloat16] [--device cuda]
      transformers (+ PEFT) against kforge: prints the largest difference, exit 1 on a mismatch or
      on an adapter that moves the logits by less than the tolerance (the check would prove nothing)
  check_peft_adapter.py --model DIR --adapter DIR --write-merged OUT
      the manual merge alone (needs torch, not transformers): OUT/model.safetensors plus the
      model's config, a plain checkpoint that computes what the model with the adapter computes
  check_peft_adapter.py --kforge-logits FILE --reference-logits FILE [--base-logits FILE]
      the comparison alone, on logits written elsewhere (e.g. kforge's, of a merged checkpoint)
"""
import argparse
import json
import math
import pathlib
import re
import shutil
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32}
# The largest difference allowed, as a fraction of the reference's largest |logit|: fp32 differs
# only in the order of sums, bf16 and fp16 in the rounding of every layer's outputs (kforge's bf16
# logits of a random 28-layer Qwen2 of 1.5B's shapes are 3.7 % of the largest |logit| off its own
# fp32 ones, and transformers' bf16 rounds on its own; fp16 keeps 3 more bits).
TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-1, "float16": 2e-2}
# A PEFT adapter tensor: "base_model.model.<module>.lora_A.weight" ("lora_A.<name>.weight" in memory).
ADAPTER_TENSOR = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<part>[AB])(?:\.[^.]+)?\.weight$")


def read_safetensors(path):
    """The tensors of a .safetensors file, by name (the format: an 8-byte little-endian header length,
    a JSON header of dtype, shape and byte offsets, then the data)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[entry["dtype"]])
        out[name] = t.reshape(entry["shape"])
    return out


def write_safetensors(path, tensors):
    """Writes `tensors` (name -> tensor) in the format read_safetensors reads, one tensor at a time."""
    names = sorted(tensors)
    codes = {v: k for k, v in DTYPES.items()}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in names:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            f.write(tensors[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def read_checkpoint(model_dir):
    """Every tensor of a checkpoint directory: model.safetensors, or the shards its index names."""
    d = pathlib.Path(model_dir)
    index = d / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(d / f))
    return out


def read_adapter(adapter_dir):
    """adapter_config.json (refusing what a plain W + scale B A merge does not compute) and the
    adapter's tensors."""
    d = pathlib.Path(adapter_dir)
    config = json.loads((d / "adapter_config.json").read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{d}: peft_type {config.get('peft_type')!r}, not LORA")
    for key, plain in (("bias", "none"), ("use_dora", False), ("fan_in_fan_out", False)):
        if config.get(key, plain) not in (plain, None):
            raise ValueError(f"{d}: {key} = {config[key]!r}: the manual merge computes only {key} = {plain!r}")
    for key in ("rank_pattern", "alpha_pattern", "layers_to_transform", "modules_to_save"):
        if config.get(key):
            raise ValueError(f"{d}: {key} is set: the manual merge reads one r and lora_alpha for all modules")
    return config, read_safetensors(d / "adapter_model.safetensors")


def lora_scale(config):
    r, alpha = config["r"], config["lora_alpha"]
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def lora_deltas(config, tensors):
    """scale * B @ A (fp32) by the name of the weight it is added to ("model.layers.0.self_attn.q_proj.weight")."""
    parts = {}
    for name, t in tensors.items():
        m = ADAPTER_TENSOR.match(name)
        if not m:
            raise ValueError(f"adapter tensor {name!r} is not a LoRA A or B of the PEFT layout")
        parts.setdefault(m["module"], {})[m["part"]] = t
    scale = lora_scale(config)
    deltas = {}
    for module, ab in parts.items():
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter module {module!r} lacks lora_{'A' if 'A' not in ab else 'B'}")
        deltas[module + ".weight"] = scale * (ab["B"].double() @ ab["A"].double()).float()
    return deltas


def merge_into(weights, deltas):
    """Adds each delta to its weight in place (in fp32, rounded back to the weight's dtype)."""
    for name, delta in deltas.items():
        if name not in weights:
            raise ValueError(f"the adapter adapts {name!r}, which the model does not have")
        w = weights[name]
        if tuple(w.shape) != tuple(delta.shape):
            raise ValueError(f"{name}: weight {tuple(w.shape)}, adapter's B @ A {tuple(delta.shape)}")
        with torch.no_grad():
            w.copy_((w.float() + delta.to(w.device)).to(w.dtype))


def write_merged(model_dir, adapter_dir, out_dir):
    weights = read_checkpoint(model_dir)
    merge_into(weights, lora_deltas(*read_adapter(adapter_dir)))
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", weights)
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (pathlib.Path(model_dir) / f).exists():
            shutil.copy(pathlib.Path(model_dir) / f, out / f)
    print(f"merged {adapter_dir} into {model_dir}: {out / 'model.safetensors'}")


def transformers_logits(args, tokens):
    """Logits [T, V] (fp32, CPU) of the transformers model without and with the adapter, and how the
    adapter was applied."""
    import transformers
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, args.dtype)
    # Eager attention: the computation kforge's model reproduces. Cast after loading, which every
    # transformers version does alike.
    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="eager")
    model = model.to(device=args.device, dtype=dtype).eval()
    ids = torch.tensor([tokens], device=args.device)

    def logits():
        with torch.no_grad():
            return model(input_ids=ids).logits[0].float().cpu()

    base = logits()
    try:
        import peft
    except ImportError:
        peft = None
    if peft is not None and not args.manual_merge:
        model = peft.PeftModel.from_pretrained(model, args.adapter).eval()
        how = f"PEFT {peft.__version__}"
    else:
        merge_into(dict(model.named_parameters()), lora_deltas(*read_adapter(args.adapter)))
        how = "manual merge"
    return base, logits(), f"{how} (transformers {transformers.__version__})"


def compare(kforge, reference, base, dtype, tolerance=None):
    """Returns (ok, lines): kforge's logits against the reference's, and how far the adapter moved
    the reference from the base model's (a check of an adapter that moves nothing proves nothing)."""
    if kforge.shape != reference.shape:
        return False, [f"shapes differ: kforge {tuple(kforge.shape)}, reference {tuple(reference.shape)}"]
    scale = max(1.0, reference.abs().max().item())
    allowed = (tolerance if tolerance is not None else TOLERANCE[dtype]) * scale
    diff = (kforge - reference).abs().max().item()
    lines = [f"max |kforge - reference| = {diff:.3g} (allowed {allowed:.3g}: {dtype}, largest |logit| {scale:.3g})"]
    ok = diff <= allowed
    if base is not None:
        moved = (reference - base).abs().max().item()
        lines.append(f"the adapter moves the logits by up to {moved:.3g}")
        if moved <= 2 * allowed:
            lines.append("the adapter barely changes the model: this check proves nothing (B near zero?)")
            ok = False
    agree = (kforge.argmax(-1) == reference.argmax(-1)).float().mean().item()
    lines.append(f"arg max agrees at {agree:.0%} of positions")
    return ok, lines


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="checkpoint directory the adapter belongs to")
    p.add_argument("--adapter", help="PEFT adapter directory")
    p.add_argument("--kforge-logits", help="`kforge model logits --adapter` output")
    p.add_argument("--kforge-base-logits", help="`kforge model logits` without the adapter: reported too")
    p.add_argument("--reference-logits", help="compare with these logits instead of transformers'")
    p.add_argument("--base-logits", help="with --reference-logits: the base model's, to show the adapter's effect")
    p.add_argument("--write-merged", metavar="OUT", help="only write the manually merged checkpoint to OUT")
    p.add_argument("--dtype", default="float32", choices=sorted(TOLERANCE), help="as kforge's --dtype")
    p.add_argument("--device", default="cpu")
    p.add_argument("--tolerance", type=float, help="allowed difference as a fraction of the largest |logit|")
    p.add_argument("--manual-merge", action="store_true", help="merge by hand even where PEFT is importable")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if args.write_merged:
        if not (args.model and args.adapter):
            sys.exit("--write-merged needs --model and --adapter")
        write_merged(args.model, args.adapter, args.write_merged)
        return 0
    if not args.kforge_logits:
        sys.exit("needs --kforge-logits (or --write-merged)")
    kforge = read_safetensors(args.kforge_logits)
    if args.reference_logits:
        reference = read_safetensors(args.reference_logits)["logits"]
        base = read_safetensors(args.base_logits)["logits"] if args.base_logits else None
        how = args.reference_logits
    else:
        if not (args.model and args.adapter):
            sys.exit("needs --model and --adapter (or --reference-logits)")
        base, reference, how = transformers_logits(args, kforge["tokens"].tolist())
        how = f"transformers with the adapter by {how}"
        if args.kforge_base_logits:
            _, lines = compare(read_safetensors(args.kforge_base_logits)["logits"], base, None, args.dtype, args.tolerance)
            print("base model: " + lines[0])
    ok, lines = compare(kforge["logits"], reference, base, args.dtype, args.tolerance)
    print(f"kforge against {how}, {kforge['logits'].shape[0]} tokens:")
    for line in lines:
        print("  " + line)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
