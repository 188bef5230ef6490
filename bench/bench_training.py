"""One fine-tuning micro-batch, plain against prefix-shared, side by side.

``zerogap contaminate`` trains through :class:`zerogap.pipelines.prefix_training.
PrefixSharingTrainer`, which encodes the k-shot prompt that a micro-batch's rows share once
instead of once per row. This script takes a preset's real training examples (M_cl's clean
questions and M_co's leaked ones, in the order of the task), wraps the preset's start model in
its LoRA adapters, and for each micro-batch runs the loss and its backward pass through the
plain :class:`transformers.Trainer` and through the sharing one, alternating which goes first,
so that a shared machine's load falls on both alike. It prints the seconds of each side, their
ratio (the figure to read), the shared prefix's share of the micro-batch's tokens, and the
largest relative difference between the two losses (float rounding only, by construction).

Usage::

    python bench/bench_training.py [--preset laptop] [--batches 8] [--repeat 2]
        [--micro-batch 4] [--gsm8k DIR] [--json]

``--gsm8k`` measures the paper's format instead (8-shot GSM8K prompts, the default
``zerogap contaminate`` config on the preset's model), where the shared shots are a larger part
of each row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time

import torch
from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

from zerogap.pipelines.contamination import plan
from zerogap.pipelines.contamination_config import preset
from zerogap.pipelines.lora_training import IGNORE_INDEX, lora_model, tokenize
from zerogap.pipelines.prefix_training import PrefixSharingTrainer, shared_prefix_length


def micro_batches(config, tokenizer, count: int) -> list[dict]:
    """``count`` micro-batches of the config's examples, clean and leaked taken in turn."""
    built = plan(config)
    collate = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX)
    size = config.micro_batch
    pools = [tokenize(tokenizer, built.clean), tokenize(tokenizer, built.leaked)]
    batches = []
    for i in range(count):
        pool = pools[i % 2]
        start = (i // 2) * size % max(1, len(pool) - size + 1)
        batches.append(collate(pool[start : start + size]))
    return batches


def timed_step(trainer, model, batch) -> tuple[float, float]:
    model.zero_grad()
    started = time.perf_counter()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return time.perf_counter() - started, loss.item()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="laptop")
    parser.add_argument("--gsm8k", help="GSM8K folder: measure the paper's 8-shot format")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--micro-batch", type=int)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    config = preset(args.preset)
    if args.gsm8k:
        config = dataclasses.replace(config, task="gsm8k", task_options={"path": args.gsm8k})
    if args.micro_batch:
        config = dataclasses.replace(config, micro_batch=args.micro_batch)
    loaded, model = lora_model(config, config.model)
    batches = micro_batches(config, loaded.tokenizer, args.batches)
    model.train()
    with tempfile.TemporaryDirectory() as scratch:
        options = TrainingArguments(output_dir=scratch, use_cpu=True, report_to="none")
        sides = {"plain": Trainer(model=model, args=options),
                 "shared": PrefixSharingTrainer(model=model, args=options,
                                                ignore_index=IGNORE_INDEX)}
        seconds = {name: 0.0 for name in sides}
        worst = 0.0
        for turn in range(args.repeat):
            for i, batch in enumerate(batches):
                order = list(sides) if (turn + i) % 2 == 0 else list(reversed(sides))
                losses = {}
                for name in order:
                    spent, losses[name] = timed_step(sides[name], model, batch)
                    seconds[name] += spent
                worst = max(worst, abs(losses["shared"] / losses["plain"] - 1))
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    shared_tokens = sum(
        shared_prefix_length(b["input_ids"], b["labels"], b["attention_mask"], IGNORE_INDEX)
        * (len(b["input_ids"]) - 1) for b in batches)
    result = {
        "format": "gsm8k 8-shot" if args.gsm8k else f"preset {args.preset}",
        "micro_batch": config.micro_batch, "batches": args.batches, "repeat": args.repeat,
        "threads": torch.get_num_threads(),
        "seconds": {name: round(s, 2) for name, s in seconds.items()},
        "plain_over_shared": round(seconds["plain"] / seconds["shared"], 3),
        "tokens_saved": round(shared_tokens / tokens, 3),
        "largest_relative_loss_difference": worst,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['format']}, micro-batch {config.micro_batch}, {args.batches} batches x "
              f"{args.repeat}, {result['threads']} threads")
        print(f"  plain {seconds['plain']:.1f} s, shared {seconds['shared']:.1f} s: plain/shared "
              f"{result['plain_over_shared']:.2f}x; prefix tokens encoded once: "
              f"{result['tokens_saved']:.0%} of the rows' tokens")
        print(f"  largest relative loss difference: {worst:.1e}")
    return result


if __name__ == "__main__":
    main()
