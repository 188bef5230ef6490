"""A study's jobs on a Ray cluster (``zerogap evaluate --executor ray``): a local cluster on
127.0.0.1 with 2 CPUs, one for the module, runs the reduced study's models with three
strategies (identity, TED over identity's samples, RailCap). With the batch size and the thread
count fixed, every run holds the samples the local executor stores, question by question, and
the report is the same but for the executor line: uninterrupted, with a worker process killed
in the middle of a job (the job resumes on another worker), and after a Ctrl-C on the driver
(the jobs stop at their next event; the same command resumes the study).
"""

import _thread
import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import helpers
from zerogap import cli
from zerogap.store import DB_NAME, LOCK_NAME, RunStore

pytestmark = pytest.mark.slow

M, QUESTIONS = 6, 10
ROWS = M * QUESTIONS  # samples a complete sampling run holds


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster on this machine for the module: 2 CPUs, every process on the loopback
    address (Ray otherwise binds the host's address on Linux; the variable is read when Ray
    is imported), workers that import the tests' toy task."""
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")
    path = os.pathsep.join([str(helpers.HERE), str(helpers.SRC)])
    ray.init(num_cpus=2, address="local", include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1", runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved


def _argv(models: dict, out: Path, *extra: str) -> list[str]:
    """The study's command: both executors run it, two jobs at a time, on one torch thread
    each (the module's), with a fixed batch (one question's samples)."""
    return ["evaluate", "--clean", str(models["clean"]), "--contaminated",
            str(models["contaminated"]), "--base", str(models["clean"]), "--task", "toy-arith",
            "--split-file", str(models["split"]), "--strategies", "identity,ted,railcap",
            "-m", str(M), "--max-new-tokens", "24", "--resamples", "200",
            "--calibration-size", "2", "--batch-size", str(M),
            "--workers", "2", "--quiet", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def local_study(study_models, tmp_path_factory) -> Path:
    """The study on local threads: what every Ray run must store."""
    out = tmp_path_factory.mktemp("local") / "study"
    assert cli.main(_argv(study_models, out)) == 0
    assert json.loads((out / "study.json").read_text())["executor"] == "local"
    return out


def _runs(out: Path) -> dict[str, str]:
    entry = json.loads((out / "study.json").read_text())["settings"][0]
    return {**entry["runs"], **entry["control_runs"]}


def _stored(run_dir: Path) -> tuple[list, dict]:
    """A run's samples, question by question, and its greedy decodes."""
    with RunStore(run_dir, create=False) as store:
        greedy = {q: (g.text, list(g.token_ids)) for q, g in store.greedy().items()}
    return helpers.stored_samples(run_dir), greedy


def _same_study(ours: Path, local: Path) -> None:
    """Every run of ``ours`` holds the local study's samples; its tables, findings and report
    are the local one's, but for the executor line, the times and the memory line (each run's
    own budget and peak; both folders are named ``study``: the report's title)."""
    assert _runs(ours) == _runs(local)
    for run in _runs(local).values():
        assert _stored(ours / run) == _stored(local / run), run
    for table in sorted((local / "tables").glob("*.json")):
        assert (ours / "tables" / table.name).read_text() == table.read_text(), table.name

    def lines(out: Path) -> list[str]:  # the commands to reproduce name the folder
        return [line.replace(str(out), "OUT") for line in
                (out / "report.md").read_text().splitlines()
                if not line.startswith(("time:", "- jobs run by", "- memory budget"))]

    assert lines(ours) == lines(local)
    assert "- jobs run by the ray executor, 2 at a time" in (ours / "report.md").read_text()
    record = json.loads((ours / "study.json").read_text())
    assert (record["executor"], record["workers"]) == ("ray", 2)


def _writers(out: Path) -> dict[Path, int]:
    """Each run directory's last writer: the pid its writer lock records."""
    return {lock.parent: int(lock.read_text()) for lock in (out / "runs").glob(f"*/{LOCK_NAME}")
            if lock.read_text().strip()}


def test_a_study_on_ray_stores_the_samples_local_threads_store(cluster, study_models,
                                                               local_study, tmp_path):
    out = tmp_path / "ray" / "study"
    assert cli.main(_argv(study_models, out, "--executor", "ray")) == 0
    _same_study(out, local_study)
    # the runs were written by the cluster's worker processes, not by this one
    writers = _writers(out)
    assert writers and os.getpid() not in writers.values()
    assert set(_writers(local_study).values()) == {os.getpid()}
    assert not list(out.glob(".zerogap-probe-*"))  # the storage probe leaves nothing


def _sampled(run_dir: Path) -> list[tuple]:
    """The samples a run holds now, with their row ids (read-only)."""
    con = sqlite3.connect(f"file:{run_dir / DB_NAME}?mode=ro", uri=True)
    try:
        return con.execute("SELECT rowid, question_id, sample, text FROM samples "
                           "ORDER BY rowid").fetchall()
    finally:
        con.close()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].startswith("Z")  # dead, not yet reaped
    except (FileNotFoundError, ProcessLookupError):  # reaped before or while we read
        return True


def _kill_a_worker_mid_job(out: Path, running: threading.Thread) -> tuple[Path, int, list]:
    """SIGKILL a Ray worker process while its job's run holds some but not all of its
    samples; the run, the pid and the samples it held once the process was gone."""
    deadline = time.monotonic() + 300
    while running.is_alive() and time.monotonic() < deadline:
        for run_dir, pid in _writers(out).items() if (out / "runs").is_dir() else ():
            if pid == os.getpid() or _gone(pid) or not 0 < helpers.count_stored(run_dir) < ROWS:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended on its own since we looked
                continue
            while not _gone(pid):
                time.sleep(0.01)
            held = _sampled(run_dir)
            if len(held) < ROWS:  # it died before the job's last question
                return run_dir, pid, held
        time.sleep(0.01)
    pytest.fail("no job was caught in the middle of its run")


def test_a_worker_killed_mid_job_costs_only_its_unstored_questions(cluster, study_models,
                                                                   local_study, tmp_path):
    out = tmp_path / "killed" / "study"
    codes = []
    running = threading.Thread(target=lambda: codes.append(
        cli.main(_argv(study_models, out, "--executor", "ray"))))
    running.start()
    try:
        run_dir, pid, held = _kill_a_worker_mid_job(out, running)
    finally:
        running.join(600)
    assert codes == [0]
    _same_study(out, local_study)
    # the samples stored before the kill stayed as they were, and another process (Ray's
    # retry of the task) stored the rest
    assert _sampled(run_dir)[: len(held)] == held and len(_sampled(run_dir)) == ROWS
    assert _writers(out)[run_dir] not in (pid, os.getpid())


def test_ctrl_c_stops_the_jobs_at_their_next_question_and_the_study_resumes(
        ctrl_c, cluster, study_models, local_study, tmp_path, capsys):
    out = tmp_path / "interrupted" / "study"

    def interrupt_mid_run() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = list((out / "runs").glob("*")) if (out / "runs").is_dir() else []
            if any(0 < helpers.count_stored(run) < ROWS for run in runs):
                _thread.interrupt_main()  # a Ctrl-C, handed to the driver's main thread
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=interrupt_mid_run)
    watcher.start()
    try:
        code = cli.main(_argv(study_models, out, "--executor", "ray"))
    finally:
        watcher.join(300)
    assert code == 130 and "interrupted" in capsys.readouterr().err
    assert not (out / "study.json").exists()
    runs = [run for run in (out / "runs").glob("*") if not run.name.startswith("greedy-")]
    held = {run: helpers.count_stored(run) for run in runs}
    time.sleep(1)  # the jobs ended at their next question: nothing writes any more
    assert {run: helpers.count_stored(run) for run in runs} == held
    whole = [run for run, count in held.items() if count == ROWS]
    assert len(whole) < len([r for r in _runs(local_study).values() if "greedy" not in r])
    assert cli.main(_argv(study_models, out, "--executor", "ray")) == 0
    _same_study(out, local_study)


def test_a_node_that_cannot_read_a_folder_is_refused_before_anything_runs(cluster, tmp_path):
    """The storage probe runs on every node: a folder a node cannot read (here, one that does
    not exist on any) is named in one line, and the study folder is left as it was."""
    from zerogap.errors import UserError
    from zerogap.study.ray_executor import RayCluster

    executor = RayCluster.connect(None, None)  # the module's cluster, joined
    assert executor.width == 2
    out = tmp_path / "new" / "study"
    with pytest.raises(UserError, match=r"node 127\.0\.0\.1 cannot read .*nowhere; the study "
                                        r"folder and the model folders must be on storage"):
        executor.check_storage(out, [tmp_path / "nowhere"])
    assert not out.parent.exists()
    executor.check_storage(out, [tmp_path])  # every node reads both
    assert not out.parent.exists()
    executor.close()
    assert cluster.is_initialized()  # a cluster the executor joined stays up
