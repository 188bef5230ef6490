"""The import rules of docs/contributing.md, checked on the package as it is.

Dynamic checks import modules in a fresh interpreter and look at ``sys.modules``; static ones
read every source file's imports and calls with :mod:`ast`.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "zerogap"

# Reading, scoring and reporting: never torch (nor anything that pulls it in).
CORE = ("zerogap.analysis", "zerogap.analysis.score", "zerogap.analysis.sensitivity",
        "zerogap.analysis.report", "zerogap.analysis.folder", "zerogap.analysis.findings",
        "zerogap.analysis.design", "zerogap.analysis.tables", "zerogap.study.spec",
        "zerogap.uncertainty.solve_prior", "zerogap.uncertainty.calibration", "zerogap.readout",
        "zerogap.io", "zerogap.io.counts", "zerogap.io.files", "zerogap.io.jsonlines",
        "zerogap.io.lmeval", "zerogap.metrics", "zerogap.uncertainty.student_t",
        "zerogap.uncertainty", "zerogap.uncertainty.intervals", "zerogap.uncertainty.paired",
        "zerogap.uncertainty.floor", "zerogap.uncertainty.verdicts", "zerogap.config",
        "zerogap.registry", "zerogap.errors",
        "zerogap.provenance", "zerogap.store", "zerogap.cli", "zerogap.cli.score",
        "zerogap.cli.lmeval", "zerogap.engine.base", "zerogap.api")
MODEL_LIBRARIES = ("torch", "transformers", "vllm", "rapidfuzz", "peft")
DECODING_CORES = ("zerogap.decoding.railcap", "zerogap.decoding.blocking", "zerogap.decoding.ted")


def _loaded_after_import(modules):
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {list(modules)!r}]; "
            "print(' '.join(sorted(m for m in sys.modules if '.' not in m)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(SRC)}, check=True)
    return set(result.stdout.split())


def test_the_core_loads_no_model_library():
    loaded = _loaded_after_import(CORE)
    assert loaded.isdisjoint(MODEL_LIBRARIES), loaded & set(MODEL_LIBRARIES)


def test_decoding_cores_load_neither_transformers_nor_vllm():
    loaded = _loaded_after_import(DECODING_CORES)
    assert "transformers" not in loaded and "vllm" not in loaded


def _sources():
    return sorted(PACKAGE.rglob("*.py"))


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_static_rules(path):
    module = _module(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = _imports(tree)
    if module.startswith("zerogap.engine"):
        # The engine runs prompts; it knows neither strategies nor tasks nor runs.
        banned = {"zerogap.strategies", "zerogap.tasks", "zerogap.runs"}
        assert not [i for i in imports for b in banned if i == b or i.startswith(b + ".")]
    if module.startswith("zerogap.io"):
        # The ground floor: file formats only (a log reader is handed its grader).
        allowed = ("zerogap.errors", "zerogap.config", "zerogap.io")
        found = [i for i in imports if i.startswith("zerogap")
                 and not any(i == a or i.startswith(a + ".") for a in allowed)]
        assert not found, f"{module} imports {found}"
    if module.startswith("zerogap.analysis"):
        # The reading side reads what the study wrote: no sampling, no study runner.
        banned = {"torch", "zerogap.engine", "zerogap.runs",
                  "zerogap.study", "zerogap.models", "zerogap.strategies"}
        found = [i for i in imports for b in banned if i == b or i.startswith(b + ".")]
        assert not found, f"{module} imports {found}"
    if not module.startswith("zerogap.cli") and module != "zerogap.__main__":
        # Only the command line prints; everything else returns values or raises.
        prints = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id == "print"]
        assert not prints, f"{module} prints on lines {prints}"
        # No module outside the command line imports from it (no cycle back into cli).
        assert not any(i == "zerogap.cli" or i.startswith("zerogap.cli.") for i in imports)
    # Progress is reported as events; zerogap.progress alone draws bars, for the front ends.
    if module != "zerogap.progress":
        assert not [i for i in imports if i.split(".")[0] == "tqdm"], f"{module} draws bars"
    if not module.startswith("zerogap.cli") and module not in ("zerogap.progress",
                                                                "zerogap.harness"):
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not names & {"Bars", "progress_bars"}, f"{module} draws progress"


# A fresh interpreter in which torch (and what needs it) cannot be imported at all.
_WITHOUT_TORCH = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers', 'vllm'):
            raise ImportError(f'{name} is not installed here')
sys.meta_path.insert(0, Refuse())
from zerogap import cli
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv", [["strategy", "list"], ["strategy", "show", "railcap"],
                                  ["strategy", "list", "--markdown"]])
def test_strategy_commands_run_without_torch(argv):
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *argv], capture_output=True,
                            text=True, env={"PYTHONPATH": str(SRC)})
    assert result.returncode == 0, result.stderr
    assert "railcap" in result.stdout


def test_strategies_and_their_specs_load_no_torch():
    loaded = _loaded_after_import(["zerogap.strategies", "zerogap.decoding.specs",
                                   "zerogap.decoding.settings",
                                   "zerogap.engine.vllm", "zerogap.io.neurons"])
    assert loaded.isdisjoint({"torch", "transformers", "vllm"}), loaded
