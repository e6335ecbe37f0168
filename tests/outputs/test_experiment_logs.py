"""Experiment logs of a real Tune run of RLVR (rllib_llm/outputs/experiment_logs.py): Tune's CSV, JSON and
TensorBoard files and MLflow's local SQLite store hold the stable metric names
(rllib_llm/outputs/metric_names.py), each iteration's values equal to Tune's result.json; asking for a
logger whose package is missing says which package and extra to install."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import pytest

from rllib_llm.outputs import metric_names as m
from rllib_llm.outputs.experiment_logs import (
    RENAMED_METRICS,
    TENSORBOARD_TAG_PREFIX,
    experiment_callbacks,
    logged_name,
    mlflow_metrics,
)
from rllib_llm.recipes.embedded import embedded_config

ITERATIONS = 2
# Stable names every iteration of this run has: all but the KL to a reference model (no
# use_kl_loss), the critic's loss (no GAE) and the reverse KL to a teacher (no distillation).
EXPECTED = [name for name in m.METRICS
            if name not in (m.KL, m.VALUE_LOSS, m.DISTILLATION_REVERSE_KL)]
CURVES = (m.REWARD, m.ACCURACY, m.HELD_OUT_ACCURACY)
needs_mlflow = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("mlflow", "sqlalchemy", "alembic")),
    reason="needs the mlflow extra: pip install 'rllib_llm[mlflow]'")


def tiny_config():
    return (embedded_config("topr", seed=0, rollout_batch_size=4, num_return_sequences_in_group=2,
                            response_length=4)
            .evaluation(evaluation_interval=1, evaluation_config={"eval_num_problems": 8}))


def fit(storage: Path, callbacks, iterations: int = ITERATIONS):
    from ray import tune

    from rllib_llm import RLVR

    tuner = tune.Tuner(RLVR, param_space=tiny_config(), run_config=tune.RunConfig(
        storage_path=str(storage), name="run", stop={"training_iteration": iterations},
        callbacks=callbacks, verbose=0))
    results = tuner.fit()
    assert not results.errors
    return results[0]


@pytest.fixture(scope="module")
def run(ray_session, tmp_path_factory):
    """One trial with the MLflow logger on its defaults: (experiment dir, trial dir, results)."""
    storage = tmp_path_factory.mktemp("logs")
    callbacks = experiment_callbacks(mlflow={"tags": {"purpose": "test"}}) if (
        importlib.util.find_spec("mlflow")) else []
    with pytest.MonkeyPatch.context() as env:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID"):
            env.delenv(name, raising=False)
        env.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # this machine has no internet
        result = fit(storage, callbacks)
        # MLflow's set_tracking_uri sets this variable too; the callback puts it back.
        assert "MLFLOW_TRACKING_URI" not in os.environ
    trial_dir = Path(result.path)
    rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]
    assert [row["training_iteration"] for row in rows] == list(range(1, ITERATIONS + 1))
    return storage / "run", trial_dir, [flat(row) for row in rows]


def flat(result: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in result.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of a TensorBoard events file, read with tensorboardX's protobuf
    classes: TFRecords of (length u64, crc u32, Event, crc u32)."""
    from tensorboardX.proto import event_pb2

    data, at, scalars = path.read_bytes(), 0, {}
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_result_json_has_the_stable_metrics(run):
    _, _, rows = run
    for row in rows:
        assert [name for name in EXPECTED if name not in row] == []


def test_progress_csv_has_the_stable_metrics_with_result_json_values(run):
    _, trial_dir, rows = run
    with (trial_dir / "progress.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [name for name in EXPECTED if name not in table[0]] == []
    for line, row in zip(table, rows, strict=True):
        for name in CURVES:
            assert float(line[name]) == row[name]


def test_tensorboard_has_the_stable_metrics_under_logged_names(run):
    _, trial_dir, rows = run
    (events,) = trial_dir.glob("events.out.tfevents.*")
    scalars = tensorboard_scalars(events)
    # Tune writes neither the step itself nor the total time as scalars.
    written = [n for n in EXPECTED if n not in (m.ITERATION, m.TIME_TOTAL_S)]
    missing = [n for n in written if TENSORBOARD_TAG_PREFIX + logged_name(n) not in scalars]
    assert missing == []
    assert TENSORBOARD_TAG_PREFIX + "evaluation/pass_1" in scalars
    for name in CURVES:
        history = scalars[TENSORBOARD_TAG_PREFIX + logged_name(name)]
        expected = [(row[m.ITERATION], row[name]) for row in rows]
        assert [step for step, _ in history] == [step for step, _ in expected]
        # TensorBoard keeps float32.
        for (_, got), (_, want) in zip(history, expected, strict=True):
            assert got == pytest.approx(want, rel=1e-6)


@needs_mlflow
def test_mlflow_store_in_the_run_dir_has_one_run_with_params_and_metric_histories(run):
    from mlflow.tracking import MlflowClient

    run_dir, trial_dir, rows = run
    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("run")  # named after the Tune experiment
    assert experiment.artifact_location == (run_dir / "mlartifacts").as_uri()
    (mlflow_run,) = client.search_runs([experiment.experiment_id])
    assert mlflow_run.info.status == "FINISHED"
    assert trial_dir.name.startswith(mlflow_run.info.run_name + "_")  # the trial's name
    assert mlflow_run.data.tags["purpose"] == "test"
    params = mlflow_run.data.params
    assert params["pg_variant"] == "topr"
    assert params["rollout_batch_size"] == "4"
    assert params["evaluation_interval"] == "1"
    # Every stable metric, under its logged name; no config/... among the metrics.
    metrics = mlflow_run.data.metrics
    assert [n for n in EXPECTED if logged_name(n) not in metrics] == []
    assert not [n for n in metrics if n.startswith("config/")]
    for name in CURVES:
        history = client.get_metric_history(mlflow_run.info.run_id, logged_name(name))
        assert [(h.step, h.value) for h in history] == [
            (row[m.ITERATION], row[name]) for row in rows]


@needs_mlflow
def test_mlflow_store_from_the_environment_is_used_and_left_set(run, tmp_path, monkeypatch):
    """A second experiment in this process (after `run`'s), its store named by
    MLFLOW_TRACKING_URI: it logs there, not in its run directory, and the variable stays."""
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "shared")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    result = fit(tmp_path, experiment_callbacks(mlflow=True), iterations=1)
    assert os.environ["MLFLOW_TRACKING_URI"] == store
    assert not (tmp_path / "run" / "mlflow.db").exists()
    client = MlflowClient(store)
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("shared").experiment_id])
    assert mlflow_run.data.metrics[logged_name(m.HELD_OUT_ACCURACY)] == result.metrics[
        "evaluation"]["pass@1"]


def test_logged_names_rename_only_characters_tensorboard_refuses():
    assert logged_name("evaluation/pass@1") == "evaluation/pass_1"
    assert logged_name("env_runners/episode_return_mean") == "env_runners/episode_return_mean"
    assert logged_name("a b:c.d-e") == "a_b_c.d-e"
    assert dict(RENAMED_METRICS) == {m.HELD_OUT_ACCURACY: "evaluation/pass_1",
                                     m.HELD_OUT_PASS_AT_K: "evaluation/pass_k"}


def test_mlflow_metrics_flatten_rename_and_leave_out_config_and_refused_names():
    result = {"training_iteration": 3, "done": False, "trial_id": "abc",
              "evaluation": {"pass@1": 0.5, "pass@k": float("nan")},
              "config": {"lr": 1e-3}, "x" * 251: 1.0, "a": {"": 2.0}}
    with pytest.warns(UserWarning, match="MLflow refuses the metric name") as caught:
        metrics = mlflow_metrics(result)
    assert len(caught) == 2  # the long name and "a/" (a path that normalises to "a")
    assert set(metrics) == {"training_iteration", "evaluation/pass_1", "evaluation/pass_k"}
    assert metrics["evaluation/pass_1"] == 0.5 and math.isnan(metrics["evaluation/pass_k"])


def test_unknown_mlflow_option_is_named_with_the_valid_ones():
    pytest.importorskip("mlflow")
    with pytest.raises(ValueError, match=r"\['experiment'\] are not MLflowLoggerCallback "
                                         r"options.*'experiment_name'"):
        experiment_callbacks(mlflow={"experiment": "x"})


def test_logger_setting_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="experiment_callbacks\\(mlflow='yes'\\)"):
        experiment_callbacks(mlflow="yes")


def test_no_logger_asked_for_gives_no_callbacks():
    assert experiment_callbacks() == []
    assert experiment_callbacks(mlflow=False, wandb=None) == []


@pytest.mark.parametrize(("setting", "module", "extra"), [
    ({"wandb": True}, "wandb", "wandb"),
    ({"mlflow": True}, "mlflow", "mlflow"),
    ({"mlflow": True}, "sqlalchemy", "mlflow"),  # the local SQLite store's
])
def test_missing_package_names_the_package_and_the_extra(monkeypatch, setting, module, extra):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setitem(sys.modules, module, None)  # find_spec and import now fail
    with pytest.raises(ModuleNotFoundError,
                       match=rf"needs the package\(s\) .*{module}.*pip install 'rllib_llm\[{extra}\]'"):
        experiment_callbacks(**setting)


def test_mlflow_server_needs_no_sqlalchemy(monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    (callback,) = experiment_callbacks(mlflow={"tracking_uri": "http://localhost:5000"})
    assert callback.tracking_uri == "http://localhost:5000"


def wandb_records(path: Path):
    """The protobuf Records of an offline W&B run file (run-*.wandb): a 7-byte header, then
    LevelDB-log blocks of 32 KiB whose chunks (crc u32, length u16, type u8: 1 full, 2 first,
    3 middle, 4 last) carry the records."""
    from wandb.proto import wandb_internal_pb2

    data, at, record, block = path.read_bytes(), 7, b"", 32768
    while at + 7 <= len(data):
        if block - at % block < 7:  # too little room left in the block: zero padding
            at += block - at % block
            continue
        _, length, kind = struct.unpack("<IHB", data[at:at + 7])
        record = data[at + 7:at + 7 + length] if kind in (1, 2) else record + data[
            at + 7:at + 7 + length]
        at += 7 + length
        if kind in (1, 4):
            yield wandb_internal_pb2.Record.FromString(record)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                    reason="wandb is not installed (pip install 'rllib_llm[wandb]')")
def test_wandb_offline_run_logs_config_and_the_stable_metrics(ray_session, tmp_path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    wandb_dir = tmp_path / "wandb_files"
    wandb_dir.mkdir()
    # mode as an option, with no WANDB_MODE and no API key: Ray's key check is skipped too.
    result = fit(tmp_path, experiment_callbacks(wandb={"mode": "offline",
                                                       "dir": str(wandb_dir)}))
    (run_file,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    # W&B's service process writes the file behind the run: its last history record can land
    # a moment after Tune returns (seen once in a full suite: 1 of 2 rows), so read until every
    # iteration is there, for a bounded time.
    deadline = time.monotonic() + 30
    while True:
        records = list(wandb_records(run_file))
        history = [{"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                    for item in r.history.item} for r in records if r.HasField("history")]
        if len(history) >= ITERATIONS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    config = {item.key: json.loads(item.value_json)
              for r in records if r.HasField("config") for item in r.config.update}
    assert config["pg_variant"] == "topr"
    rows = [flat(json.loads(line))
            for line in (Path(result.path) / "result.json").read_text().splitlines()]
    assert len(history) == len(rows) == ITERATIONS
    for logged, row in zip(history, rows, strict=True):
        assert [n for n in EXPECTED if n not in logged] == []  # W&B keeps the result keys
        for name in CURVES:
            assert logged[name] == row[name]


def _log(callbacks, trial, iterations, *, end=True):
    for cb in callbacks:
        for it in iterations:
            cb.log_trial_result(it, trial, {m.ITERATION: it, m.TIME_TOTAL_S: 10.0 * it,
                                            "env_runners": {"accuracy": it / 10}})
        if end:
            cb.log_trial_end(trial)


def _logged(trial) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(iteration, time_total_s) of each row of progress.csv and of result.json."""
    with Path(trial.local_path, "progress.csv").open(newline="") as f:
        csv_rows = [(int(r[m.ITERATION]), float(r[m.TIME_TOTAL_S])) for r in csv.DictReader(f)]
    with Path(trial.local_path, "result.json").open() as f:
        json_rows = [(r[m.ITERATION], r[m.TIME_TOTAL_S]) for r in map(json.loads, f)]
    return csv_rows, json_rows


def test_a_restored_trial_logs_each_iteration_once(ray_session, tmp_path):
    # Tune's loggers appended the iterations a restored trial ran again (after its checkpoint)
    # a second time, with time_total_s going back: here they replace the first ones.
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    from rllib_llm.cli.progress_csv import ProgressCSV, ResultJSON

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp",
                             trial_dir_name="trial")
    trial = Trial("__fake", config={}, storage=storage, stub=True)
    _log([ProgressCSV(), ResultJSON()], trial, [1, 2, 3, 4, 5])
    # Killed while writing iteration 6's rows: lines cut short.
    for name in ("progress.csv", "result.json"):
        with Path(trial.local_path, name).open("a") as f:
            f.write("6,60.0" if name == "progress.csv" else '{"training_iteration": 6, "ti')
    # `--resume` in a new process, from the checkpoint of iteration 3.
    _log([ProgressCSV(), ResultJSON()], trial, [4, 5, 6, 7])
    expected = [(i, 10.0 * i) for i in range(1, 8)]
    assert _logged(trial) == (expected, expected)
    # Tune retrying a failed trial in the same process, from the checkpoint of iteration 5.
    callbacks = [ProgressCSV(), ResultJSON()]
    _log(callbacks, trial, [8, 9], end=False)
    _log(callbacks, trial, [6, 7, 8])
    expected = [(i, 10.0 * i) for i in range(1, 9)]
    assert _logged(trial) == (expected, expected)


def test_a_listed_checkpoint_deleted_before_a_resume_is_forgotten_not_deleted_again(tmp_path):
    # After a kill, Tune's restored list of checkpoints may hold one a later checkpoint already
    # deleted; registering the next checkpoint deleted it again and raised FileNotFoundError.
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    from rllib_llm.cli.checkpoint_list import forget_deleted_checkpoints

    def listed_manager():
        manager = _CheckpointManager(CheckpointConfig(num_to_keep=2))
        for i in (1, 2):
            path = tmp_path / f"checkpoint_00000{i}"
            path.mkdir(exist_ok=True)
            manager.register_checkpoint(_TrainingResult(Checkpoint(str(path)),
                                                        {m.ITERATION: 5 * i}))
        return manager

    def third():
        (tmp_path / "checkpoint_000003").mkdir(exist_ok=True)
        return _TrainingResult(Checkpoint(str(tmp_path / "checkpoint_000003")),
                               {m.ITERATION: 15})

    manager = listed_manager()
    (tmp_path / "checkpoint_000001").rmdir()  # deleted before the kill, still listed
    with pytest.raises(FileNotFoundError):  # what Tune does on its own
        manager.register_checkpoint(third())

    manager = listed_manager()
    (tmp_path / "checkpoint_000001").rmdir()
    assert forget_deleted_checkpoints(manager) == [str(tmp_path / "checkpoint_000001")]
    manager.register_checkpoint(third())  # keeps 2 and 3, deletes nothing
    assert [r.checkpoint.path for r in manager.best_checkpoint_results] == \
        [str(tmp_path / "checkpoint_000002"), str(tmp_path / "checkpoint_000003")]
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["checkpoint_000002", "checkpoint_000003"]
