"""Contamination sweeps: one study setting per contamination strength of a ``zerogap contaminate``
folder (paper arXiv 2608.07341 §5.3.1, Table 3), with the variants the folder lacks trained first
by :func:`zerogap.pipelines.contamination.build`, the command's own code path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from zerogap.errors import DataError, UserError
from zerogap.io.jsonlines import read_json_object
from zerogap.progress import ProgressCallback
from zerogap.study.spec import SettingSpec, SweepSpec


def sweep_config(sweep: SweepSpec):
    """What ``zerogap contaminate --sweep`` builds in ``sweep.models``: the folder's recorded
    :class:`~zerogap.pipelines.contamination_config.ContaminationConfig` with the sweep's strengths.
    Loads no model; a :class:`~zerogap.errors.ZerogapError` for a folder without a manifest."""
    from zerogap.pipelines.contamination_config import ContaminationConfig

    path = Path(sweep.models) / "manifest.json"
    if not path.is_file():
        raise UserError(f"sweep: {sweep.models} holds no manifest.json; build the models first "
                        f"with zerogap contaminate --out {sweep.models}")
    try:
        config = ContaminationConfig.from_dict(read_json_object(path)["config"])
    except (KeyError, TypeError) as err:
        raise DataError(f"{path}: not a contamination manifest ({err})") from None
    if sweep.epochs or sweep.copies:
        config = replace(config, sweep_epochs=sweep.epochs, sweep_copies=sweep.copies)
    return config


def sweep_settings(sweep: SweepSpec) -> tuple[SettingSpec, ...]:
    """One setting ``e{E}-c{C}`` per variant: the folder's M_cl, that M_co, its split and task."""
    config = sweep_config(sweep)
    models = Path(sweep.models)
    return tuple(
        SettingSpec(name=f"e{epochs}-c{copies}", clean=str(models / "clean"),
                    contaminated=str(models / config.contaminated_dir(epochs, copies)),
                    task=config.task, base=config.model, task_options=config.task_options,
                    task_split=config.split, split_file=str(models / "split.json"),
                    limit=sweep.limit)
        for epochs, copies in config.variants()
    )


def missing_variants(sweep: SweepSpec) -> list[str]:
    """Folder names of the sweep's M_co variants not yet built in ``sweep.models``."""
    config = sweep_config(sweep)
    names = [config.contaminated_dir(e, c) for e, c in config.variants()]
    return [name for name in names if not (Path(sweep.models) / name).is_dir()]


def build_sweep(sweep: SweepSpec, *, progress: ProgressCallback | None = None) -> None:
    """Train the variants ``sweep.models`` lacks (resumable; nothing to do when all exist)."""
    from zerogap.pipelines.contamination import build

    if missing_variants(sweep):
        build(sweep_config(sweep), Path(sweep.models), progress=progress)
