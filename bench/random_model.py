"""Write a model folder of random weights in a named shape, for engine benchmarks where real
weights cannot travel (the GPU machine gets the working tree and 64 MiB beside it; the embedded
model's weights alone are several times that).

A decode step's cost depends on the shape (layers, widths, heads, vocabulary) and the dtype, not
on the weights' values. What random weights change: near-uniform logits seldom draw a stop
string, so rows run to their token limit (the engine benchmark's decode phase forbids EOS for
the same reason), and every token of the vocabulary is a candidate of the engine's draw, which
costs more than on a trained model's peaked logits (a few thousand candidates a row).

Shapes:

* ``embedded``: the configuration of the tokenizer folder given (a converted embedded model's
  folder holds SmolLM2-135M's ``config.json``: 30 layers of width 576);
* ``llama-1b``: Llama-3.2-1B's layers (16 layers of width 2048, MLP 8192, 32 query and 8
  key-value heads, RoPE theta 500,000) over the tokenizer's vocabulary (49,152 tokens for the
  embedded tokenizer: 1.07 B parameters, tied embeddings).

Usage::

    python bench/random_model.py SHAPE TOKENIZER_FOLDER OUT_FOLDER [--device cuda]
        [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                rope_theta=500_000.0, max_position_embeddings=8192, tie_word_embeddings=True,
                rms_norm_eps=1e-5)


def config_for(shape: str, tokenizer_folder: Path, tokenizer) -> LlamaConfig:
    if shape == "embedded":
        return AutoConfig.from_pretrained(tokenizer_folder)
    return LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, **LLAMA_1B)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=("embedded", "llama-1b"))
    parser.add_argument("tokenizer", type=Path, help="folder with the tokenizer (and config)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu", help="where to draw the weights")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = config_for(args.shape, args.tokenizer, tokenizer)
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = LlamaForCausalLM._from_config(config, dtype=getattr(torch, args.dtype))
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.shape}: {n / 1e9:.3f} B parameters in {args.dtype}, written to {args.out}")


if __name__ == "__main__":
    main()
