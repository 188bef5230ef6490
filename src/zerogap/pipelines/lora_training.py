"""LoRA training of one contamination stage (arXiv 2608.07341 §5.1): what
:func:`zerogap.pipelines.contamination.build` runs once for M_cl and once per M_co.

Loss is on the completion only (the solution and an end-of-sequence token); the prompt tokens,
tokenised exactly as the sampling engine tokenises them, are context. Training runs through
transformers' ``Trainer`` with PEFT (:class:`zerogap.pipelines.prefix_training.
PrefixSharingTrainer`), so ``accelerate launch`` and ``torchrun`` distribute the same call over
several GPUs; a stage checkpoints into its work folder and resumes from its last checkpoint, and
a first Ctrl-C saves a checkpoint at the end of the running step and stops.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerogap.engine.threads import Governor, governed
from zerogap.errors import UserError
from zerogap.io.files import write_text
from zerogap.models import quiet_peft
from zerogap.progress import Progress, ProgressCallback

if TYPE_CHECKING:
    from zerogap.pipelines.contamination_config import ContaminationConfig, Example

IGNORE_INDEX = -100  # the label value transformers' losses skip


def json_text(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def write_json(path: Path, data: dict) -> None:
    """Write atomically, from the main process only (every rank computes the same data)."""
    if main_process():
        write_text(path, json_text(data))


def tokenize(tokenizer, examples: Sequence[Example]) -> list[dict[str, list[int]]]:
    """Input ids and labels per example; labels are ``IGNORE_INDEX`` over the prompt.

    The prompt is tokenised on its own, as the sampling engine tokenises prompts, so training
    sees the token boundary that generation starts from; the completion ends with EOS.
    """
    out = []
    for ex in examples:
        prompt = tokenizer(ex.prompt)["input_ids"]
        completion = tokenizer(ex.completion, add_special_tokens=False)["input_ids"]
        completion = completion + [tokenizer.eos_token_id]
        out.append({"input_ids": prompt + completion,
                    "labels": [IGNORE_INDEX] * len(prompt) + completion})
    return out


@dataclass(frozen=True)
class EpochPlan:
    """A stage's data laid out epoch by epoch, where epochs differ (a fresh solution of every
    train item each epoch) or the stage is watched epoch by epoch.

    ``epochs[e]`` is epoch e's examples; they are trained in that order of epochs, each epoch
    shuffled with a seed of its own, so an epoch ends at a known optimizer step (exactly where
    its size is a multiple of the global batch). ``keep_every`` N > 0 keeps the adapter after
    every N-th epoch beside the stage's result, as ``TARGET-x{E}`` (E epochs seen);
    ``plateau`` > 0 stops after the first epoch (from the second) whose mean training loss
    fell by less than that fraction of the epoch before's.
    """

    epochs: Sequence[Sequence[Example]]
    keep_every: int = 0
    plateau: float = 0.0

    def laid_out(self, seed: int) -> list[Example]:
        out: list[Example] = []
        for e, examples in enumerate(self.epochs):
            block = list(examples)
            random.Random(f"epoch-plan/{seed}/{e}").shuffle(block)
            out += block
        return out

    def ends(self, global_batch: int) -> list[int]:
        """The optimizer step at which each epoch ends."""
        ends, seen = [], 0
        for examples in self.epochs:
            seen += len(examples)
            ends.append(math.ceil(seen / global_batch))
        return ends


def _use_bf16(dtype: str) -> bool:
    """``auto``: bf16 where the training device multiplies it natively (a CUDA GPU that
    supports it; a CPU with AMX-BF16 or AVX512-BF16), as the paper trains in bf16 (§5.1)."""
    import torch

    from zerogap.models import auto_dtype

    if dtype == "auto":
        return auto_dtype("cuda" if torch.cuda.is_available() else "cpu") == "bfloat16"
    return dtype == "bfloat16"


def main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _trainer_callbacks(progress: ProgressCallback | None, label: str, threads: Governor):
    """Progress (``label``: steps of the run, the last loss; from the main process only),
    graceful first Ctrl-C and torch's thread count timed step by step (``threads``), as
    Trainer callbacks."""
    from transformers import TrainerCallback

    report = progress if progress is not None and main_process() else None

    class Steps(TrainerCallback):
        def __init__(self):
            self.loss = ""

        def _report(self, state) -> None:
            if report is not None:
                report(Progress(label, state.global_step, state.max_steps, "step", self.loss))

        def on_train_begin(self, args, state, control, **kwargs):
            self._report(state)

        def on_step_end(self, args, state, control, **kwargs):
            self._report(state)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.loss = f"loss {logs['loss']:.4f}"

    class StopOnInterrupt(TrainerCallback):
        """First SIGINT: checkpoint after the running step and stop; a second one kills."""

        def __init__(self):
            self.interrupted = False
            self.previous = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.previous = signal.signal(signal.SIGINT, self._handle)

        def _handle(self, signum, frame):
            self.interrupted = True
            signal.signal(signal.SIGINT, self.previous)

        def on_step_end(self, args, state, control, **kwargs):
            if self.interrupted:
                control.should_save = True
                control.should_training_stop = True

        def release(self) -> None:
            """Give SIGINT back to its previous handler if this one still holds it; called
            however training ends (an exception skips the trainer's on_train_end), so a
            process that goes on after a failed fine-tune still gets KeyboardInterrupt."""
            if self.previous is not None and signal.getsignal(signal.SIGINT) == self._handle:
                signal.signal(signal.SIGINT, self.previous)

    class Threads(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            threads.step(1)

    return Steps(), StopOnInterrupt(), Threads()


def _epoch_callback(epochs: EpochPlan, ends: list[int], save) -> Any:
    """A Trainer callback that, at each epoch's last step, keeps the adapter (``save(E)``)
    every ``keep_every`` epochs and stops at a loss plateau; its ``stopped`` is the epoch it
    stopped after, or None."""
    from transformers import TrainerCallback

    class Epochs(TrainerCallback):
        def __init__(self):
            self.stopped: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step not in ends:
                return
            epoch = ends.index(state.global_step) + 1
            if epochs.keep_every and epoch % epochs.keep_every == 0:
                save(epoch)
            if epochs.plateau and epoch >= 2:
                def mean_loss(start: int, stop: int) -> float:
                    losses = [e["loss"] for e in state.log_history
                              if "loss" in e and start < e["step"] <= stop]
                    return sum(losses) / max(1, len(losses))
                before = ends[epoch - 3] if epoch >= 3 else 0
                previous = mean_loss(before, ends[epoch - 2])
                current = mean_loss(ends[epoch - 2], ends[epoch - 1])
                if previous - current < epochs.plateau * previous:
                    self.stopped = epoch
                    control.should_training_stop = True

    return Epochs()


def _save_adapter(model, tokenizer, target: Path, adapter_base: str, *, merge: bool) -> None:
    """Write the model (its adapter, or merged weights with ``merge``) to ``target``
    atomically, the adapter naming ``adapter_base`` as its base."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (model.merge_and_unload() if merge else model).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not merge:
        # Set after saving: PEFT would otherwise try to read the base's config at save time.
        adapter_config = json.loads((tmp / "adapter_config.json").read_text())
        adapter_config["base_model_name_or_path"] = adapter_base
        write_json(tmp / "adapter_config.json", adapter_config)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _last_checkpoint(work: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(work)) if work.is_dir() else None


def lora_model(config: ContaminationConfig, start_spec: str):
    """``start_spec`` loaded (CPU, the stage's precision) and wrapped in ``config``'s LoRA
    adapters: ``(LoadedModel, PeftModel)``. Target modules the model lacks are refused in one
    line (:class:`UserError`); :func:`build` calls this before it writes anything."""
    import torch
    from peft import LoraConfig, get_peft_model

    from zerogap.models import load_model

    loaded = load_model(start_spec, device="cpu",
                        dtype="bfloat16" if _use_bf16(config.dtype) else "float32")
    modules = config.target_modules
    targets = modules if modules == "all-linear" else [m.strip() for m in modules.split(",")]
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=targets,
                      task_type="CAUSAL_LM")
    # PEFT refuses only a list none of whose names match; one missing name of several would
    # silently train fewer layers than asked. A name matches a module named it or ending ".name".
    names = [name for name, _ in loaded.model.named_modules()]
    missing = [t for t in ([] if modules == "all-linear" else targets)
               if not any(name == t or name.endswith("." + t) for name in names)]
    if missing:
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in loaded.model.named_modules()
                         if isinstance(module, torch.nn.Linear)})
        raise UserError(f"--target-modules {modules}: {start_spec} has no module "
                        f"{', '.join(missing)}; its linear layers: {', '.join(linear)}")
    torch.manual_seed(config.seed)  # the LoRA A matrices' initialisation
    with quiet_peft():
        return loaded, get_peft_model(loaded.model, lora)


def check_batch(config: ContaminationConfig) -> int:
    """Gradient accumulation steps; the batch sizes must divide over the processes."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if config.global_batch % (config.micro_batch * world):
        raise UserError(f"global_batch {config.global_batch} is not a multiple of micro_batch "
                         f"{config.micro_batch} x {world} processes")
    return config.global_batch // (config.micro_batch * world)


def train_stage(config: ContaminationConfig, start_spec: str,
                examples: Sequence[Example] | EpochPlan, epochs: int, work: Path, target: Path,
                adapter_base: str, *, progress: ProgressCallback | None,
                prepared: tuple | None = None) -> dict[str, Any]:
    """LoRA-train ``start_spec`` on ``examples`` for ``epochs`` epochs, or on an
    :class:`EpochPlan` (its own epochs; ``epochs`` is then their count); write the result to
    ``target``.

    ``adapter_base`` is what the saved adapter names as its base (how ``models.py`` finds it).
    ``prepared`` is :func:`lora_model`'s result for ``start_spec`` when already made.
    Returns the stage's manifest record: hyperparameters, start fingerprint, per-step loss.
    Raises ``KeyboardInterrupt`` after an interrupted run has saved its checkpoint.
    """
    import torch
    from transformers import DataCollatorForSeq2Seq, TrainingArguments

    from zerogap.pipelines.prefix_training import PrefixSharingTrainer

    bf16 = _use_bf16(config.dtype)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accumulation = check_batch(config)
    loaded, model = prepared or lora_model(config, start_spec)
    tokenizer = loaded.tokenizer
    plan = examples if isinstance(examples, EpochPlan) else None
    data = examples.laid_out(config.seed) if isinstance(examples, EpochPlan) else list(examples)
    args = TrainingArguments(
        output_dir=str(work), per_device_train_batch_size=config.micro_batch,
        gradient_accumulation_steps=accumulation, num_train_epochs=1 if plan else epochs,
        train_sampling_strategy="sequential" if plan else "random",
        learning_rate=config.learning_rate, lr_scheduler_type=config.scheduler,
        warmup_steps=config.warmup_ratio, bf16=bf16, logging_steps=1,
        save_strategy="steps", save_steps=config.save_steps, save_total_limit=1,
        report_to="none", disable_tqdm=True, seed=config.seed, data_seed=config.seed,
        dataloader_pin_memory=torch.cuda.is_available(),
        # Without a GPU, accelerate only joins torchrun's processes when told to use the CPU.
        use_cpu=not torch.cuda.is_available(),
    )
    collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX)
    trainer = PrefixSharingTrainer(model=model, args=args,
                                   train_dataset=tokenize(tokenizer, data),
                                   data_collator=collator, ignore_index=IGNORE_INDEX)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # it prints every log line; the bar shows the loss
    resume = _last_checkpoint(work)
    started = time.monotonic()
    with governed("train", device="cuda" if torch.cuda.is_available() else "cpu") as threads:
        bar, stopper, timer = _trainer_callbacks(progress, f"training {target.name}", threads)
        callbacks = [bar, stopper, timer]
        if plan is not None:
            def keep(epoch: int) -> None:
                if main_process():
                    # an adapter even with merge: merging would end the training
                    _save_adapter(model, tokenizer, target.with_name(f"{target.name}-x{epoch}"),
                                  adapter_base, merge=False)
            watch = _epoch_callback(plan, plan.ends(config.global_batch), keep)
            callbacks.append(watch)
        for callback in callbacks:
            trainer.add_callback(callback)
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            stopper.release()
    if stopper.interrupted:
        raise KeyboardInterrupt
    losses = [{"step": e["step"], "loss": e["loss"], "learning_rate": e.get("learning_rate")}
              for e in trainer.state.log_history if "loss" in e]
    if main_process():  # under DDP every rank holds the same weights; one writes them
        _save_adapter(model, tokenizer, target, adapter_base, merge=config.merge)
        shutil.rmtree(work, ignore_errors=True)  # checkpoints (optimizer state) are spent
        with contextlib.suppress(OSError):
            work.parent.rmdir()  # .work, once no stage has checkpoints left
    barrier()
    return {
        "dir": target.name,
        "start": {"spec": start_spec, "fingerprint": loaded.fingerprint},
        "examples": len(data) if plan is None else len(plan.epochs[0]),
        "epochs": epochs,
        "stopped_after_epoch": None if plan is None else watch.stopped,
        "epoch_ends": None if plan is None else plan.ends(config.global_batch),
        "optimizer_steps": trainer.state.global_step,
        "gradient_accumulation": accumulation,
        "processes": world,
        "precision": "bf16" if bf16 else "fp32",
        "resumed_from": None if resume is None else Path(resume).name,
        "seconds_this_run": round(time.monotonic() - started, 1),
        "loss": losses,
    }
