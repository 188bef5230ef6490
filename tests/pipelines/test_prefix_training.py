"""Encoding a micro-batch's shared prompt prefix once changes neither the loss nor the gradients.

The criterion holds by construction: the rows' own tokens attend to the same prefix keys either
way, and the prefix's gradient is the sum of the rows' contributions. So the two paths agree up
to float rounding, whatever the weights; the tiny Llama stands in for any decoder.
"""

import pytest
import torch

from helpers import ToyArith, byte_tokenizer, tiny_model
from zerogap.pipelines.contamination_config import Example
from zerogap.pipelines.lora_training import IGNORE_INDEX, tokenize
from zerogap.pipelines.prefix_training import PrefixSharingTrainer, shared_prefix_length


def lora_tiny(dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(tiny_model(), LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                    target_modules="all-linear"))
    # LoRA's B starts at zero, which would leave the A matrices without a gradient to compare.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return model.train()


def micro_batch(tokenizer, examples):
    from transformers import DataCollatorForSeq2Seq

    collate = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX)
    return collate(tokenize(tokenizer, examples))


def toy_examples():
    task = ToyArith()
    answers = [" 5\n\n", " 17 and a longer tail\n\n", " 8\n\n", " 30\n\n"]
    return [Example(task.prompt(q), a) for q, a in zip(task.questions()[:4], answers, strict=True)]


def loss_and_grads(trainer, model, batch, num_items):
    model.zero_grad()
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=num_items)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def forward_widths(model) -> list[tuple[int, int]]:
    """Record the (rows, tokens) of every forward call of ``model``'s base model."""
    widths = []
    model.get_base_model().register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    return widths


@pytest.mark.parametrize("num_items", [None, 61])
def test_shared_prefix_gives_the_plain_loss_and_gradients(tmp_path, num_items):
    from transformers import Trainer, TrainingArguments

    tokenizer = byte_tokenizer()
    model = lora_tiny()
    batch = micro_batch(tokenizer, toy_examples())
    prefix = shared_prefix_length(batch["input_ids"], batch["labels"], batch["attention_mask"],
                                  IGNORE_INDEX)
    assert prefix == len("Q: 1+1=?\nA: 2\n\nQ: 3+4=?\nA: 7\n\nQ: ")  # the shots; then the digits
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none",
                             per_device_train_batch_size=4, gradient_accumulation_steps=2)
    plain = Trainer(model=model, args=args)
    sharing = PrefixSharingTrainer(model=model, args=args, ignore_index=IGNORE_INDEX)
    widths = forward_widths(model)
    plain_loss, plain_grads = loss_and_grads(plain, model, batch, num_items)
    assert widths == [tuple(batch["input_ids"].shape)]
    widths.clear()
    shared_loss, shared_grads = loss_and_grads(sharing, model, batch, num_items)
    rows, tokens = batch["input_ids"].shape
    assert widths == [(1, prefix), (rows, tokens - prefix)]
    assert shared_loss == pytest.approx(plain_loss, rel=1e-5)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-4, atol=1e-6)


def test_models_with_dropout_take_the_plain_path(tmp_path):
    from transformers import TrainingArguments

    model = lora_tiny(dropout=0.1)
    batch = micro_batch(byte_tokenizer(), toy_examples())
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    sharing = PrefixSharingTrainer(model=model, args=args, ignore_index=IGNORE_INDEX)
    widths = forward_widths(model)
    sharing.compute_loss(model, dict(batch))
    assert widths == [tuple(batch["input_ids"].shape)]


@pytest.mark.parametrize(("ids", "labels", "mask", "expected"), [
    # Identical rows: the prefix stops one short of the first label.
    ([[1, 2, 3, 4], [1, 2, 3, 4]], [[-100, -100, 3, 4], [-100, -100, 3, 4]], [[1] * 4] * 2, 1),
    # Rows differing at the first token share nothing.
    ([[1, 2, 3, 4], [9, 2, 3, 4]], [[-100, -100, 3, 4]] * 2, [[1] * 4] * 2, 0),
    # Left padding hides the first positions of one row: nothing is shared.
    ([[0, 1, 2, 3], [1, 1, 2, 3]], [[-100, -100, -100, 3]] * 2, [[0, 1, 1, 1], [1] * 4], 0),
    # A label on the very first position leaves no room for a prefix.
    ([[1, 2], [1, 2]], [[1, 2], [-100, 2]], [[1, 1]] * 2, 0),
])
def test_shared_prefix_length(ids, labels, mask, expected):
    as_tensor = torch.tensor
    assert shared_prefix_length(as_tensor(ids), as_tensor(labels), as_tensor(mask),
                                ignore_index=-100) == expected
