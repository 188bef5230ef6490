"""The shared prefix's keys and values kept on disk per machine, so that a second command with
the same few-shot prefix skips its encode.

A ``zerogap sample`` of a few questions is mostly start-up, and after the imports the largest
part of it is the encode of the prompts' common prefix (the k-shot exemplars: 1,659 tokens for
the gsm8k task's 8-shot prompt, 3-5 s of CPU). The encode is a deterministic function of the
weights, the tokens and how this machine computes them, so its result can be kept: one file per
prefix under ``$ZEROGAP_CACHE/prefix`` (default ``~/.cache/zerogap/prefix``).

A file is used only where a recompute would give the same bits. Its name is a digest of, and
its header repeats, everything the encode depends on:

* the weights' fingerprint (:func:`zerogap.models.weight_fingerprint`, taken at load; the cache
  is used only while every parameter and buffer is still the one fingerprinted, at the same
  address and version, and no module carries a forward hook), the dtype, the model class and a
  digest of its configuration;
* the exact prefix token ids;
* torch's and transformers' versions, zerogap's version and this file :data:`FORMAT`;
* torch's thread count, ATen's CPU capability, the CPU's model name and flags, the environment
  variables that steer MKL's and oneDNN's kernel choice, and the device (a GPU's name and
  compute capability).

The payload carries a SHA-256 digest; a file that is truncated, corrupt, of another format or
for another key is ignored and overwritten by the recompute. A cache that cannot be read or
written costs only that recompute, never an error. Files are written through
:func:`zerogap.io.files.atomic_write` (whole or absent), and the folder is kept under
``$ZEROGAP_PREFIX_CACHE_MB`` mebibytes (default :data:`DEFAULT_LIMIT_MB`; ``0`` turns the cache
off) by removing the files least recently used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from zerogap.errors import ResourceError, UserError

KV = tuple[torch.Tensor, torch.Tensor]

FORMAT = 1  # bump when the prefix encode or this file's layout changes
MAGIC = b"zerogap-prefix-kv\n"
SUFFIX = ".kv"
LIMIT_ENV = "ZEROGAP_PREFIX_CACHE_MB"
DEFAULT_LIMIT_MB = 1024  # W's prefix in float32 is 76 MB: 14 of them
_HEADER_LIMIT = 1 << 16
# Environment variables that change which kernels MKL and oneDNN pick, and so the last bits.
_KERNEL_ENV = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
               "ATEN_CPU_CAPABILITY", "TORCH_BLAS_PREFER_HIPBLASLT")


def limit_bytes() -> int:
    """The folder's bound from ``$ZEROGAP_PREFIX_CACHE_MB`` (0: off); a value that is not a
    whole number of mebibytes is a :class:`UserError` naming the variable."""
    text = os.environ.get(LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT_MB << 20
    try:
        mb = int(text)
    except ValueError:
        mb = -1
    if mb < 0:
        raise UserError(f"{LIMIT_ENV}={text!r}: give a whole number of MiB (0 turns the prefix "
                        f"cache off)")
    return mb << 20


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cpu() -> dict:
    """The CPU's model name and a digest of its flags (the first processor of /proc/cpuinfo):
    two machines sharing a home folder may run different kernels (AMX, AVX512-BF16)."""
    found = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "flags") and name not in found:
                found[name] = value.strip()
            if len(found) == 2:
                break
    return {"machine": platform.machine(), "model": found.get("model name", ""),
            "flags": _digest(found.get("flags", "").encode())[:16]}


def _device(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda {torch.cuda.get_device_name(device)} sm{major}{minor} {torch.version.cuda}"
    return device.type


def _bytes(t: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's memory as bytes (no copy; writable for readinto)."""
    return t.view(torch.uint8).numpy().data.cast("B")


@dataclass(frozen=True)
class PrefixCache:
    """The prefix files of one loaded model.

    Parameters
    ----------
    fingerprint : str
        The weights' fingerprint as loaded.
    weights : tuple
        The weights' state when they were fingerprinted (``weights_state``):
        the files are used only while the model still has it.
    folder : Path
        Where the files live.
    limit : int
        Most bytes the folder's files take together (> 0).
    """

    fingerprint: str
    weights: tuple
    folder: Path
    limit: int

    @classmethod
    def open(cls, fingerprint: str, weights: tuple | None) -> PrefixCache | None:
        """The cache for weights fingerprinted as ``fingerprint`` in state ``weights``, under
        the per-machine cache root; None when it is turned off or the state is unknown."""
        from zerogap.models import cache_dir

        limit = limit_bytes()
        if limit == 0 or weights is None:
            return None
        return cls(fingerprint, weights, cache_dir() / "prefix", limit)

    def holds(self, weights: tuple | None) -> bool:
        """Whether the fingerprint still describes a model whose state is ``weights``: the same
        tensors at the same versions, and no forward hooks (which the fingerprint misses)."""
        return weights is not None and weights == self.weights and not weights[1]

    def key(self, model, tokens: Sequence[int]) -> dict:
        """Everything the prefix encode's bits depend on (see the module note)."""
        import transformers

        import zerogap

        device = next(model.parameters()).device
        return {
            "format": FORMAT, "zerogap": zerogap.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "fingerprint": self.fingerprint,
            "dtype": str(model.dtype), "model": type(model).__name__,
            "config": _digest(model.config.to_json_string().encode()),
            "attention": str(getattr(model.config, "_attn_implementation", None)),
            "tokens": _digest(json.dumps(list(tokens)).encode()), "length": len(tokens),
            "threads": torch.get_num_threads(), "aten": torch.backends.cpu.get_cpu_capability(),
            "cpu": _cpu(), "kernel_env": {k: os.environ.get(k) for k in _KERNEL_ENV},
            "device": _device(device),
        }

    def _path(self, key: dict) -> Path:
        name = _digest(json.dumps(key, sort_keys=True).encode())[:32]
        return self.folder / f"{name}{SUFFIX}"

    def load(self, model, tokens: Sequence[int]) -> tuple[list[KV] | None, Path]:
        """``(keys and values per layer, the file)``, or ``(None, the file)`` when it is
        missing or cannot be used (unreadable, truncated, corrupt, another key)."""
        key = self.key(model, tokens)
        path = self._path(key)
        try:
            kv = _read(path, key)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError):
            return None, path
        with contextlib.suppress(OSError):  # least recently used goes first; see _evict
            os.utime(path)
        device = next(model.parameters()).device
        return [(k.to(device), v.to(device)) for k, v in kv], path

    def save(self, model, tokens: Sequence[int], kv: Sequence[KV]) -> Path | None:
        """Write ``kv`` for ``tokens``; the file, or None when it was not written (larger than
        the bound, or the folder refused it: only the next command's recompute is lost)."""
        key = self.key(model, tokens)
        path = self._path(key)
        host = [(k.detach().to("cpu").contiguous(), v.detach().to("cpu").contiguous())
                for k, v in kv]
        payload = sum(t.numel() * t.element_size() for pair in host for t in pair)
        if payload > self.limit:
            return None
        digest = hashlib.sha256()
        for pair in host:
            for t in pair:
                digest.update(_bytes(t))
        header = json.dumps({"key": key, "dtype": str(host[0][0].dtype).removeprefix("torch."),
                             "shapes": [list(k.shape) for k, _ in host],
                             "sha256": digest.hexdigest()}, sort_keys=True).encode() + b"\n"
        from zerogap.io.files import atomic_write

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_write(path, binary=True) as f:
                f.write(MAGIC)
                f.write(header)
                for pair in host:
                    for t in pair:
                        f.write(_bytes(t))
            self._evict(keep=path)
        except (OSError, ResourceError, UserError):
            return None
        return path

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used files until the folder is within the bound."""
        files = []
        for file in self.folder.glob(f"*{SUFFIX}"):
            with contextlib.suppress(OSError):  # another process may have removed it
                st = file.stat()
                files.append((file == keep, st.st_mtime_ns, st.st_size, file))
        total = sum(size for _, _, size, _ in files)
        for _, _, size, file in sorted(files):  # oldest first, the new file last
            if total <= self.limit:
                break
            if file != keep:
                with contextlib.suppress(OSError):
                    file.unlink()
                total -= size


def _read(path: Path, key: dict) -> list[KV]:
    """The layers' keys and values stored in ``path`` for ``key``; raises ``ValueError`` (or
    ``OSError``) when the file is not a whole, uncorrupted one for that key.

    Each tensor is read into memory torch allocated itself (aligned as a fresh encode's
    result, contiguous as it is), not mapped from the file.
    """
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a prefix file")
        header = json.loads(f.readline(_HEADER_LIMIT))
        if header["key"] != key:
            raise ValueError("another key")
        dtype = getattr(torch, header["dtype"])
        if not isinstance(dtype, torch.dtype):
            raise ValueError("bad dtype")
        shapes = [tuple(int(n) for n in s) for s in header["shapes"]]
        expected = sum(2 * torch.Size(s).numel() * dtype.itemsize for s in shapes)
        if os.fstat(f.fileno()).st_size != f.tell() + expected:
            raise ValueError("truncated or overlong")
        digest = hashlib.sha256()
        out: list[KV] = []
        for shape in shapes:
            pair = []
            for _ in range(2):
                t = torch.empty(shape, dtype=dtype)
                view = _bytes(t)
                if f.readinto(view) != len(view):
                    raise ValueError("truncated")
                digest.update(view)
                pair.append(t)
            out.append((pair[0], pair[1]))
    if digest.hexdigest() != header["sha256"]:
        raise ValueError("corrupt payload")
    return out


def weights_state(model) -> tuple | None:
    """What an encode's result depends on besides its tokens: each parameter's and buffer's
    address, version counter and dtype, and the forward hooks registered on the modules.
    None when some tensor has no version counter (made under ``torch.inference_mode``, where
    an in-place change leaves no trace), so nothing can be reused safely."""
    weights = (*model.parameters(), *model.buffers())
    if any(t.is_inference() for t in weights):
        return None
    tensors = tuple((t.data_ptr(), t._version, t.dtype) for t in weights)
    hooks = tuple((id(m), tuple(m._forward_hooks), tuple(m._forward_pre_hooks))
                  for m in model.modules() if m._forward_hooks or m._forward_pre_hooks)
    return tensors, hooks
