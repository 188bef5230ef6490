"""Fine-tuning that encodes a micro-batch's shared prompt prefix once.

Every contamination example is the task's k-shot prompt followed by a question and its
solution (arXiv 2608.07341 §5.1), so the rows of a micro-batch begin with the same shots: on the
embedded model's `arith` prompts 116 of about 180 tokens. A plain forward pass encodes those
tokens once per row. :class:`PrefixSharingTrainer` encodes them once per micro-batch (batch 1,
with the gradient kept), repeats the prefix's keys and values over the rows, and runs only the
rows' own tokens on top of them, with the vocabulary projection only where a label is read.
The loss and the gradients are those of the plain pass up to float rounding (the prefix's
gradient is the sum of the rows' contributions, which is what the plain pass accumulates), so
the recipe is unchanged; on the laptop preset a micro-batch of 4 costs about a third less.
"""

from __future__ import annotations

import torch
from transformers import Trainer

from zerogap.engine.attention import cache_kwarg


def _leading_run(mask: torch.Tensor) -> int:
    """Length of the leading run of True in a 1-D boolean tensor."""
    return int(mask.long().cumprod(0).sum())


def shared_prefix_length(input_ids: torch.Tensor, labels: torch.Tensor,
                         attention_mask: torch.Tensor, ignore_index: int) -> int:
    """Tokens every row of a micro-batch begins with that can be encoded once.

    Parameters
    ----------
    input_ids, labels, attention_mask : (B, T) tensors, right-padded, ``labels`` holding
        ``ignore_index`` where no loss is read.

    Returns
    -------
    P, the longest run of leading positions where every row holds the same visible token and
    no label, less one: the label at position P is predicted from position P - 1's logits, which
    must be among the rows' own positions, so positions 0..P carry no label. 0 when nothing is
    shared.

    Examples
    --------
    >>> ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 2, 0]])
    >>> labels = torch.tensor([[-100, -100, -100, 8, 9], [-100, -100, -100, -100, 0]])
    >>> mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    >>> shared_prefix_length(ids, labels, mask, ignore_index=-100)
    2
    """
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    unlabelled = (labels == ignore_index).all(0)
    return max(0, min(_leading_run(same), _leading_run(unlabelled) - 1))


class PrefixSharingTrainer(Trainer):
    """A :class:`transformers.Trainer` whose training loss encodes the shared prefix once.

    Micro-batches that share nothing, single rows, models with dropout (the rows would share
    one mask over the prefix, a different regulariser) and models wrapped for several processes
    (a second forward call would upset DistributedDataParallel's gradient hooks) take the plain
    path. The loss is normalised exactly as the plain path normalises it: summed over labelled
    tokens and divided by the tokens of the whole accumulated batch when the Trainer passes
    their count to a model that accepts it, a mean over this micro-batch otherwise.
    ``ignore_index`` is the label value that reads no loss (the collator's label padding).
    """

    def __init__(self, *args, ignore_index: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.ignore_index = ignore_index
        model = self.model
        self.dropout_free = (
            model is not None
            and not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())
            and not getattr(getattr(model, "config", None), "attention_dropout", 0.0))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        ids, labels = inputs["input_ids"], inputs["labels"]
        mask = inputs.get("attention_mask", torch.ones_like(ids))
        prefix = (shared_prefix_length(ids, labels, mask, self.ignore_index) if len(ids) > 1
                  else 0)
        if (not prefix or return_outputs or not self.dropout_free or self.args.world_size > 1
                or set(inputs) - {"input_ids", "labels", "attention_mask"}):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        base = self.accelerator.unwrap_model(model)
        base = base.get_base_model() if hasattr(base, "get_base_model") else base
        # The output names the cache as the forward's argument does (renamed within 5.x).
        cache_name = cache_kwarg(base)
        # Its logits go unused; an index keeps the LM head's input contiguous (with ``1``, a
        # strided view, the frozen head's product copies its matrix: Prefill.encode says why).
        last = torch.tensor([prefix - 1], device=ids.device)
        shared = model(input_ids=ids[:1, :prefix], use_cache=True, logits_to_keep=last)
        cache = shared[cache_name]
        cache.batch_repeat_interleave(len(ids))
        # Logits from the first position that predicts a label to the one before the last.
        targets = labels[:, prefix + 1:]
        first = int((targets != self.ignore_index).any(0).nonzero()[0])
        keep = torch.arange(first, targets.shape[1], device=ids.device)
        logits = model(input_ids=ids[:, prefix:], attention_mask=mask, use_cache=True,
                       logits_to_keep=keep, **{cache_name: cache}).logits
        summed = torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 1), targets[:, first:].flatten(),
            ignore_index=self.ignore_index, reduction="sum")
        if self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            return summed / num_items_in_batch
        return summed / (targets != self.ignore_index).sum()
