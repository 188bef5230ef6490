"""Shortcut-neuron patching at decode time (Zhu et al., ACL 2025, as summarised in arXiv
2608.07341 §5 and ``docs/baselines.md`` §3): the runtime half; locating the neurons is the
offline pipeline :mod:`zerogap.pipelines.neurons`.

A *neuron* is one coordinate of an MLP's intermediate activation ``act(gate(h)) * up(h)``, the
input of ``down_proj``; only layers ``0 .. L-2`` are ranked (the authors' code skips the last).

Patching: while the evaluated model decodes, the patch source (the base model) runs in lockstep
on the same tokens, and the chosen neurons' activations are overwritten with the source's at
every forward pass. The source's key/value states are kept *in the evaluated model's own cache*,
as extra layers ``L .. 2L-1``, so whatever the engine does to its cache (prefix copies, row
repeats, row eviction) happens to both models alike; in the engine's decode steps the source
reads them with the same shared-prefix attention as the model (the prefix once for all rows),
not as one dense copy per row.

Proposals (docs/baselines.md §3, sources silent): ``K`` defaults to 4000 neurons *scaled* to the
model's size, i.e. the same 1.17 % of ranked neurons as 4000 of LLaMA2-7B's 31 x 11008
(SmolLM2-135M: 522 of 44,544); samples are drawn at the run's temperature from the patched
model (the original decodes greedily).

Supported: Llama-style decoders (``model.model.layers[i].mlp`` with ``gate_proj``, ``up_proj``,
``down_proj`` and attention with ``layer_idx``; also PEFT-wrapped). Anything else raises
``ValueError``. transformers is imported only inside the functions that build caches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from zerogap.decoding.settings import Neuron, ShortcutConfig
from zerogap.engine.attention import ROWS_KWARG, cache_kwarg, prefix_attention
from zerogap.errors import DataError, UserError

REFERENCE_TOP_K = 4000
REFERENCE_NEURONS = 31 * 11008  # ranked neurons of LLaMA2-7B, where K = 4000 was read off

def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a Llama-style model (PEFT wrappers are looked through).

    Raises ``ValueError`` naming the model class when its MLPs are not gate/up/down.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    ok = layers is not None and all(
        all(hasattr(getattr(layer, "mlp", None), p) for p in ("gate_proj", "up_proj", "down_proj"))
        and hasattr(getattr(layer, "self_attn", None), "layer_idx")
        for layer in layers
    )
    if not ok:
        raise ValueError(
            f"shortcut-neuron patching supports Llama-style MLPs (gate_proj/up_proj/down_proj) "
            f"only; {type(base).__name__} has none"
        )
    return layers


def mlp_width(model: nn.Module) -> tuple[int, int]:
    """``(number of layers, d_ff)`` of a Llama-style model."""
    layers = decoder_layers(model)
    return len(layers), layers[0].mlp.down_proj.in_features


def default_top_k(num_layers: int, d_ff: int) -> int:
    """4000 neurons scaled to the ranked count ``(num_layers - 1) * d_ff``, at least 1.

    Examples
    --------
    >>> default_top_k(32, 11008), default_top_k(30, 1536), default_top_k(2, 128)
    (4000, 522, 2)
    """
    ranked = (num_layers - 1) * d_ff
    return max(1, round(REFERENCE_TOP_K * ranked / REFERENCE_NEURONS))


@contextlib.contextmanager
def down_proj_hooks(model: nn.Module, hook: Callable[[int, Tensor], Tensor | None]):
    """Run ``hook(layer, activation)`` on every down_proj input; a returned tensor replaces it."""

    def make(layer: int):
        def pre_hook(_module, args):
            out = hook(layer, args[0])
            return None if out is None else (out, *args[1:])

        return pre_hook

    handles = [
        layer.mlp.down_proj.register_forward_pre_hook(make(i))
        for i, layer in enumerate(decoder_layers(model))
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class NeuronPatch:
    """The engine's patch hook: overwrite chosen neurons with a source model's activations.

    ``with NeuronPatch(source, neurons)(model): model(...)`` runs ``source`` on the same inputs
    before every forward pass of ``model`` and copies the source's activations of ``neurons``
    into ``model``'s, at every position of that pass. The source keeps its keys and values in
    ``model``'s cache as layers ``L .. 2L-1``; a cache filled outside the context is refused.

    Parameters
    ----------
    source : Llama-style model with ``model``'s shapes (usually the pretrained base)
    neurons : sequence of (layer, index)
    """

    # The source reads the engine's row cache through the cascade attention: every forward
    # call's row cache goes on to it (see zerogap.engine.hooks.reads_row_cache).
    reads_rows = True

    def __init__(self, source: nn.Module, neurons: Sequence[Neuron]) -> None:
        self.source = source
        self.neurons = list(neurons)

    @property
    def cache_layers(self) -> int:
        """The source's layers, which it keeps in the row cache beside the model's own."""
        return mlp_width(self.source)[0]

    def __call__(self, model: nn.Module) -> contextlib.AbstractContextManager:
        return self._patched(model)

    @contextlib.contextmanager
    def _patched(self, model: nn.Module) -> Iterator[None]:
        num_layers, d_ff = mlp_width(model)
        if mlp_width(self.source) != (num_layers, d_ff):
            raise UserError("the patch source and the patched model differ in MLP shape")
        for layer, index in self.neurons:
            if not (0 <= layer < num_layers and 0 <= index < d_ff):
                raise DataError(f"neuron ({layer}, {index}) is outside {num_layers} x {d_ff}")
        device = next(model.parameters()).device
        chosen: dict[int, Tensor] = {}
        for layer in sorted({n[0] for n in self.neurons}):
            idx = [i for lay, i in self.neurons if lay == layer]
            chosen[layer] = torch.tensor(sorted(set(idx)), device=device)
        buffer: dict[int, Tensor] = {}

        def capture(layer, a):
            if layer in chosen:
                buffer[layer] = a.index_select(-1, chosen[layer])

        def patch(layer, a):
            if layer in chosen:
                return a.index_copy(a.dim() - 1, chosen[layer], buffer.pop(layer))
            return None

        source_decoder = _inner(self.source)
        # The decoder's cache keyword differs between transformers releases (cache_kwarg).
        cache_name = cache_kwarg(_inner(model))
        source_attn = [layer.self_attn for layer in decoder_layers(self.source)]

        def run_source(_module, args, kwargs):
            if args:
                raise ValueError("NeuronPatch needs the decoder called with keyword arguments")
            cache = kwargs.get(cache_name)
            if cache is None and kwargs.get("use_cache"):
                cache = kwargs[cache_name] = _new_cache(model)
            if cache is not None:
                _extend_cache(cache, num_layers)
            source_decoder(
                input_ids=kwargs.get("input_ids"),
                inputs_embeds=kwargs.get("inputs_embeds"),
                attention_mask=kwargs.get("attention_mask"),
                position_ids=kwargs.get("position_ids"),
                use_cache=kwargs.get("use_cache"),
                **{cache_name: cache},
                **{key: kwargs[key] for key in (ROWS_KWARG,) if key in kwargs},
            )
            return args, kwargs

        for attn in source_attn:
            attn.layer_idx += num_layers
        try:
            with contextlib.ExitStack() as stack:
                # Without the engine's row cache this attention is plain SDPA, as the model's.
                stack.enter_context(prefix_attention(self.source))
                stack.enter_context(down_proj_hooks(self.source, capture))
                stack.enter_context(down_proj_hooks(model, patch))
                handle = _inner(model).register_forward_pre_hook(run_source, with_kwargs=True)
                stack.callback(handle.remove)
                yield
        finally:
            for attn in source_attn:
                attn.layer_idx -= num_layers


def _inner(model: nn.Module) -> nn.Module:
    """The decoder stack (``LlamaModel``) of a causal LM, through PEFT wrappers."""
    decoder_layers(model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model


def _new_cache(model: nn.Module):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def _extend_cache(cache, num_layers: int) -> None:
    """Give ``cache`` layers ``L .. 2L-1`` for the source; refuse one filled without them."""
    from transformers.cache_utils import DynamicLayer

    if len(cache.layers) < 2 * num_layers:
        if cache.get_seq_length() > 0:
            raise ValueError(
                "NeuronPatch: the model's cache was filled outside the patch context, so the "
                "patch source has no keys/values for it; enter the patch before the prefill"
            )
        while len(cache.layers) < 2 * num_layers:
            cache.layers.append(DynamicLayer())


def scaled_top_k(config: ShortcutConfig, model: nn.Module) -> int:
    """``config.top_k``, or 4000 scaled to ``model`` when it is 0."""
    return config.top_k or default_top_k(*mlp_width(model))
