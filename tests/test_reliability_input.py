"""Issue 14, the input half: every plain bad input is one line naming the file or option, exit
code 2, before any model loads or any file is written; model folders never run their own code.

Each case here reproduced a traceback, a silent wrong result or code execution on main before
the fix (0bab99a): model folders that carry code or pickles (defect 4), files and folders mixed
up, broken model folders, unusable devices and sizes (7), binary input, paths taken for hub ids
(8), and extreme values (9).
"""

import io
import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest

from zerogap import cli
from zerogap.io.neurons import save_neurons
from zerogap.models import embedded_gguf
from zerogap.tasks.extract import parse_gold

sys.path.insert(0, str(Path(__file__).parent))
import helpers  # noqa: E402  (the tiny Llama folder and its byte tokenizer)
from helpers import refused, sample_args  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

CLEAN = str(Path(__file__).resolve().parents[1] / "examples" / "clean.jsonl")
BINARY = b'{"id": "q0"}\n\x00\x01 caf\xe9\n'  # line 2 is Latin-1, not UTF-8


@pytest.fixture(scope="module")
def adapter_folder(tmp_path_factory, tiny_dir):
    """A real LoRA adapter whose adapter_config.json names the tiny folder as its base."""
    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("adapter")
    adapter = get_peft_model(helpers.tiny_model(), LoraConfig(r=2, target_modules=["q_proj"]))
    adapter.save_pretrained(folder)
    _edit_json(folder / "adapter_config.json", base_model_name_or_path=str(tiny_dir))
    return folder


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """GGUF conversions land in a cache of the test's own; a refused file must leave none."""
    monkeypatch.setenv("ZEROGAP_CACHE", str(tmp_path / "cache"))


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _copy(folder: Path, target: Path) -> Path:
    shutil.copytree(folder, target)
    return target


# -- defect 4: model folders that carry code or pickles ------------------------------------------

EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("the folder's code ran")
from transformers import PretrainedConfig, PreTrainedModel

class EvilConfig(PretrainedConfig):
    model_type = "zerogap-evil"

class EvilModel(PreTrainedModel):
    config_class = EvilConfig
"""


def _evil_folder(root: Path, tiny_dir: Path, model_type: str) -> tuple[Path, Path]:
    """A model folder whose config maps its classes to evil.py, which writes a marker file."""
    folder, marker = _copy(tiny_dir, root / f"evil-{model_type}"), root / "marker"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    _edit_json(folder / "config.json", model_type=model_type, auto_map={
        "AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"})
    return folder, marker


@pytest.mark.parametrize("model_type", ["zerogap-evil", "llama"])
def test_a_folder_with_custom_code_is_refused_and_its_code_never_runs(
        tmp_path, tiny_dir, capsys, monkeypatch, model_type):
    folder, marker = _evil_folder(tmp_path, tiny_dir, model_type)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))  # transformers used to ask
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(folder, run_dir), folder / "config.json",
            "needs custom code", "zerogap does not run")
    assert not marker.exists() and not run_dir.exists()


def test_transformers_itself_is_told_never_to_run_a_folders_code(tmp_path, tiny_dir,
                                                                  monkeypatch):
    # Past zerogap's own check, straight into the loader: "y" on stdin must not matter either.
    import torch

    from zerogap.models import _load_folder

    folder, marker = _evil_folder(tmp_path, tiny_dir, "zerogap-evil")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))
    with pytest.raises(ValueError, match="trust_remote_code"):
        _load_folder(folder, torch.float32)
    assert not marker.exists()


class _Payload:
    """Unpickling this creates a file: what a hostile pytorch_model.bin can do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_pickled_weights_are_refused_naming_the_file(tmp_path, tiny_dir, capsys):
    folder = _copy(tiny_dir, tmp_path / "pickled")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(folder, run_dir), folder / "pytorch_model.bin",
            "pickled weights", "safetensors")
    assert not marker.exists() and not run_dir.exists()


def test_vllm_is_never_asked_to_trust_remote_code():
    from zerogap.engine.vllm import VLLMBackend
    from zerogap.errors import UserError

    with pytest.raises(UserError, match="trust_remote_code: zerogap never runs"):
        VLLMBackend.load("any-folder", trust_remote_code=True)


# -- defects 7 and 8: broken model folders and model specs ---------------------------------------

# (case, folder copied, files changed, their new content: text, JSON fields to set, or None to
# delete them, and the message; {folder} and {file} stand for the copy and its first file)
EDITED = [
    ("junk-config", "tiny", ["config.json"], "model_type = llama\n",
     "{file}: not valid JSON"),
    ("unknown-architecture", "tiny", ["config.json"], {"model_type": "no-such-architecture"},
     "'no-such-architecture' is not an architecture transformers knows"),
    ("no-tokenizer", "tiny", ["tokenizer.json", "tokenizer_config.json"], None,
     "{folder}: no tokenizer"),
    ("no-weights", "tiny", ["model.safetensors"], None, "{folder}: no weights (model.safetensors)"),
    ("adapter-of-itself", "adapter", ["adapter_config.json"], {"base_model_name_or_path": "."},
     "adapters naming each other or themselves"),
    ("adapter-config-list", "adapter", ["adapter_config.json"], "[1, 2]",
     "{file}: expected a JSON object"),
    ("adapter-without-weights", "adapter", ["adapter_model.safetensors"], None,
     "{folder}: no weights (adapter_model.safetensors)"),
]


def refused_writing_nothing(capsys, tmp_path, spec, message):
    """``zerogap sample --model spec`` is refused with ``message``; no run dir, no cache."""
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(spec, run_dir), message)
    assert not run_dir.exists()
    # No half conversion left in the cache (a file's remembered digest, keyed by its stat,
    # may be: it describes the file, whatever its content).
    assert not (tmp_path / "cache" / "models").exists()


@pytest.mark.parametrize("case, source, names, content, message", EDITED,
                         ids=[case[0] for case in EDITED])
def test_a_broken_model_folder_is_one_line_and_writes_nothing(
        case, source, names, content, message, tmp_path, tiny_dir, adapter_folder, capsys):
    folder = _copy(tiny_dir if source == "tiny" else adapter_folder, tmp_path / case)
    for name in names:
        if content is None:
            (folder / name).unlink()
        elif isinstance(content, dict):
            _edit_json(folder / name, **content)
        else:
            (folder / name).write_text(content)
    refused_writing_nothing(capsys, tmp_path, folder,
                            message.format(folder=folder, file=folder / names[0]))


def test_adapters_naming_each_other_are_one_line(tmp_path, adapter_folder, capsys):
    a, b = _copy(adapter_folder, tmp_path / "a"), _copy(adapter_folder, tmp_path / "b")
    _edit_json(a / "adapter_config.json", base_model_name_or_path=str(b))
    _edit_json(b / "adapter_config.json", base_model_name_or_path="../a")
    refused_writing_nothing(capsys, tmp_path, a, "adapters naming each other or themselves")


@pytest.mark.parametrize("keep", [4096, 0.5], ids=["in-the-metadata", "in-the-tensors"])
def test_a_truncated_gguf_is_one_line_and_leaves_no_cache(tmp_path, capsys, keep):
    data = embedded_gguf().read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])
    refused_writing_nothing(capsys, tmp_path, path,
                            f"model file {path}: not a readable GGUF file, truncated or damaged")


@pytest.mark.parametrize("spec, message", [
    ("/dev/null", "model /dev/null is neither a file nor a folder"),
    ("", "the model spec is empty"),
    ("{tmp}/empty", "model folder {tmp}/empty is empty"),
    ("{tmp}/weights.txt", "model file {tmp}/weights.txt is not a .gguf file"),
])
def test_a_spec_that_is_no_model_is_one_line(tmp_path, capsys, spec, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights.txt").write_text("hello")
    refused_writing_nothing(capsys, tmp_path, spec.format(tmp=tmp_path),
                            message.format(tmp=tmp_path))


def test_a_mistyped_local_path_is_not_sent_to_the_hub(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    # "runs" exists here, so "runs/modle" is a path with a typo, not a hub id "org/name".
    refused(capsys, sample_args("runs/modle", tmp_path / "run"), "model path runs/modle does "
            "not exist")
    refused(capsys, sample_args("./modle", tmp_path / "run"), "model path ./modle does not exist")


def test_neurons_checks_every_model_before_loading_any(tmp_path, tiny_dir, capsys,
                                                       monkeypatch):
    import zerogap.models

    def load_model(*args, **kwargs):
        pytest.fail("a model was loaded before the third spec was checked")

    monkeypatch.setattr(zerogap.models, "load_model", load_model)
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\n")
    out = tmp_path / "neurons.json"
    refused(capsys, ["neurons", "--base", tiny_dir, "--contaminated", tiny_dir,
                     "--clean", tmp_path / "missing", "--task", "arith", "--split-file",
                     leaked, "--out", out], f"model path {tmp_path / 'missing'} does not exist")
    assert not out.exists()


# -- defect 7: devices, sizes, folders given for files -------------------------------------------

def test_an_unknown_device_is_one_line(tmp_path, tiny_dir, capsys):
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(tiny_dir, run_dir, "--device", "bogus"),
            "--device 'bogus' is not a torch device")
    assert not run_dir.exists()


def test_cuda_without_cuda_is_one_line(tmp_path, tiny_dir, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(tiny_dir, run_dir, "--device", "cuda"),
            "--device cuda: no cuda device is available here")
    assert not run_dir.exists()


@pytest.mark.parametrize("line", [
    '{"id": "q000", "correct": 9223372036854775808, "samples": 9223372036854775809}',
    '{"id": "q000", "correct": 1, "samples": 18446744073709551616}',
])
def test_counts_past_int64_are_refused_naming_the_line(tmp_path, capsys, line):
    path = tmp_path / "big.jsonl"
    path.write_text(line + "\n")
    refused(capsys, ["score", "--clean", path, "--mitigated", f"r={CLEAN}"], f"{path}:1:",
            "at most 2147483647")


def test_a_billion_strata_are_refused_before_any_work(capsys, tmp_path):
    refused(capsys, ["score", "--clean", CLEAN, "--mitigated", f"r={CLEAN}", "--bins",
                     "1000000000"], "--bins must be at most 10000, got 1000000000")
    out = tmp_path / "out"
    refused(capsys, ["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task",
                     "arith", "--bins", "1000000000", "--out", out],
            "--bins must be at most 10000, got 1000000000")
    assert not out.exists()


def test_a_limit_the_split_cannot_fill_half_and_half_is_refused(capsys, tmp_path):
    """``limit`` keeps N/2 leaked and N/2 unleaked questions; a split with fewer of either
    would silently unbalance the comparison, so the study is refused before anything runs."""
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"leaked": ["test-0", "test-1"],
                                 "unleaked": [f"test-{i}" for i in range(2, 12)]}))
    out = tmp_path / "out"
    refused(capsys, ["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task",
                     "arith", "--split-file", split, "--limit", "8", "--out", out],
            "limit 8 needs 4 leaked and 4 unleaked questions", "has 2 and 10")
    assert not out.exists()
    # --limit takes 1 as everywhere; with a split file it would keep no unleaked question
    refused(capsys, ["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task",
                     "arith", "--split-file", split, "--limit", "1", "--out", out],
            "limit 1 with a split file keeps no unleaked question; give at least 2")
    assert not out.exists()
    refused(capsys, ["demo", "--out", out, "--questions", "1000"],
            "--questions 1000: zerogap demo's split holds at most 160 questions")
    assert not out.exists()
    # the worker count too, before the demo trains anything
    refused(capsys, ["demo", "--out", out, "--workers", "0"],
            "--workers must be at least 1, got 0")
    assert not out.exists()


def _dir_cases(tmp_path):
    """(argv, the file option) for each place a folder is given where a file is expected."""
    folder = tmp_path / "folder"
    folder.mkdir(exist_ok=True)
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("test-0\n")
    return [
        (["task", "show", "arith", "--index", "0", "--task-option", "k=1", "--task-option",
          f"exemplars={folder}"], folder),
        (["task", "grade", "arith", "--index", "0", "--response-file", folder], folder),
        (["neurons", "--base", "embedded", "--contaminated", "embedded", "--clean",
          "embedded", "--task", "arith", "--split-file", folder, "--out", tmp_path / "n.json"],
         folder),
        (sample_args("embedded", tmp_path / "run", "--strategy", "shortcut", "--set",
                     f"neurons={folder}", "--set", "base=embedded"), folder),
        (["score", "--clean", CLEAN, "--mitigated", f"r={CLEAN}", "--json", folder], folder),
        (["evaluate", folder], folder),
        (["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task", "arith",
          "--split-file", folder, "--out", tmp_path / "out"], folder),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_folder_where_a_file_is_expected_is_named(tmp_path, capsys, case):
    argv, folder = _dir_cases(tmp_path)[case]
    refused(capsys, argv, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "leaked.txt"]


@pytest.mark.parametrize("reader", ["neuron list", "split file"])
def test_a_json_integer_past_pythons_digit_limit_is_one_line(tmp_path, capsys, reader):
    path = tmp_path / "big.json"
    path.write_text('{"neurons": ' + "7" * 5000 + "}")
    argv = (sample_args("embedded", tmp_path / "run", "--strategy", "shortcut", "--set",
                        f"neurons={path}", "--set", "base=embedded")
            if reader == "neuron list" else
            ["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task", "arith",
             "--split-file", path, "--out", tmp_path / "out"])
    refused(capsys, argv, path, "Exceeds the limit (4300 digits)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]


# -- defect 8: binary input names the file and the line ------------------------------------------

def _binary_cases(tmp_path, path):
    leaked_ok = tmp_path / "ok.txt"
    leaked_ok.write_text("test-0\n")
    return [
        ["score", "--clean", path, "--mitigated", f"r={CLEAN}"],
        ["task", "show", "jsonl", "--task-option", f"path={path}", "--index", "0"],
        ["task", "show", "arith", "--index", "0", "--task-option", "k=1", "--task-option",
         f"exemplars={path}"],
        ["task", "grade", "arith", "--index", "0", "--response-file", path],
        ["neurons", "--base", "embedded", "--contaminated", "embedded", "--clean",
         "embedded", "--task", "arith", "--split-file", path, "--out", tmp_path / "n.json"],
        sample_args("embedded", tmp_path / "run", "--strategy", "shortcut", "--set",
                    f"neurons={path}", "--set", "base=embedded"),
        ["evaluate", path],
    ]


@pytest.mark.parametrize("case", range(7))
def test_binary_input_names_the_file_and_line(tmp_path, capsys, case):
    path = tmp_path / "input.jsonl"
    path.write_bytes(BINARY)
    refused(capsys, _binary_cases(tmp_path, path)[case], f"{path}:2: not UTF-8 text (byte 0xe9)")
    assert not (tmp_path / "run").exists() and not (tmp_path / "n.json").exists()


def test_text_quoted_from_a_file_cannot_break_the_one_line(tmp_path, capsys):
    # Found by the fuzz test: a field name holding a newline or a terminal escape, echoed in
    # the error, made it two lines (or cleared the screen).
    path = tmp_path / "counts.jsonl"
    path.write_text(json.dumps({"id": "q0", "correct": 1, "samples": 2, "x\ny\x1b[2J": 0}))
    refused(capsys, ["score", "--clean", path, "--mitigated", f"r={path}"],
            r"unknown field(s) x\ny\x1b[2J")


# -- defect 9: extreme values --------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e-45", "0.001", "11"])
def test_temperatures_outside_the_documented_range_are_refused(tmp_path, tiny_dir, capsys,
                                                                value):
    run_dir = tmp_path / "run"
    refused(capsys, sample_args(tiny_dir, run_dir, "-T", value),
            "-T must be ")
    assert not run_dir.exists()


def test_a_legal_but_unlikely_temperature_is_warned_about(tmp_path, capsys):
    # The model path does not exist: the warning comes with the settings, before any load.
    assert cli.main(sample_args(str(tmp_path / "none"), str(tmp_path / "run"), "-T", "5")) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "warning: -T 5 is far above the paper's 0.7" in err[0], err
    assert "does not exist" in err[1]


def test_a_study_refuses_a_temperature_the_runs_would_refuse(tmp_path, capsys):
    refused(capsys, ["evaluate", "--clean", "embedded", "--contaminated", "embedded", "--task",
                     "arith", "-T", "20", "--out", tmp_path / "out"],
            "-T must be at most 10.0, got 20.0")
    assert not (tmp_path / "out").exists()


def test_an_empty_neuron_list_is_refused_for_the_shortcut_strategy(tmp_path, capsys):
    neurons = tmp_path / "none.json"
    save_neurons(neurons, [], {})
    run_dir = tmp_path / "run"
    refused(capsys, sample_args("embedded", run_dir, "--strategy", "shortcut", "--set",
                                f"neurons={neurons}", "--set", "base=embedded"),
            f"{neurons}: the neuron list is empty")
    assert not run_dir.exists()


def test_a_gold_answer_in_exponent_notation_is_refused_not_read_as_one(tmp_path, capsys):
    assert parse_gold("#### 1000") == "1000" and parse_gold("#### 1,000.50") == "1000.5"
    for answer in ("#### 1e400", "#### 2E-3", "The answer is 5e+2."):
        with pytest.raises(ValueError, match="exponent notation"):
            parse_gold(answer)
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"question": "How many?", "answer": "#### 7"}) + "\n"
                    + json.dumps({"question": "How big?", "answer": "#### 1e400"}) + "\n")
    refused(capsys, ["task", "show", "jsonl", "--task-option", f"path={path}", "--index", "0"],
            f"{path}:2: gold answer '#### 1e400' is in exponent notation")
