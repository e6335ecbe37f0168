"""One line for every bad input the CLI can meet: exit status 2 and one line on stderr, before
Ray starts, within seconds (issue 47). Each was a traceback, a MemoryError after a minute, or a
failure once Ray and Tune were up."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from rllib_llm.algorithm.fields import check_field
from rllib_llm.cli import main

ENV = "environment: {env: math_verify, env_config: {dataset: arithmetic}}\n"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def error_line(capsys, argv: list[str]) -> str:
    """The one line `rllib-llm ARGV` prints, exiting 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


# --- the config file ----------------------------------------------------------------------------
def test_a_config_file_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(ENV.encode() + b"# caf\xe9\ntraining: {pg_variant: topr}\n")
    assert error_line(capsys, ["train", str(path), "--dry-run"]) == (
        f"rllib-llm train: error: {path}: not UTF-8: byte 72 (line 2) is b'\\xe9'; save the file "
        "as UTF-8 (e.g. `iconv -f latin1 -t utf-8 in.yaml > out.yaml`)")


def test_a_config_file_that_is_a_directory_or_missing(tmp_path, capsys):
    assert error_line(capsys, ["sweep", str(tmp_path), "--dry-run"]) == (
        f"rllib-llm sweep: error: {tmp_path}: is a directory, not a config file; pass the YAML "
        "file")
    assert error_line(capsys, ["train", str(tmp_path / "no.yaml")]) == (
        f"rllib-llm train: error: {tmp_path / 'no.yaml'}: no such file")
    os.mkfifo(tmp_path / "fifo.yaml")  # read, it would wait for a writer forever
    assert error_line(capsys, ["train", str(tmp_path / "fifo.yaml")]) == (
        f"rllib-llm train: error: {tmp_path / 'fifo.yaml'}: not a regular file (a FIFO or a "
        "device); pass the YAML file")


def test_a_yaml_syntax_error_is_one_line(tmp_path, capsys):
    path = write(tmp_path / "a.yaml", "training: [1, 2\n")
    assert error_line(capsys, ["train", str(path)]) == (
        f"rllib-llm train: error: {path}: not valid YAML: while parsing a flow sequence: "
        "expected ',' or ']', but got '<stream end>' (line 2, column 1)")


def alias_bomb(levels: int = 9) -> str:
    """`levels` anchors, each nine aliases of the one before: 9**levels values once expanded
    (a billion at 9), in a dozen lines."""
    lines = ["    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


@pytest.mark.parametrize("where", ["env_config", "training", "top"])
def test_an_alias_bomb_anywhere_is_refused_before_anything_is_built(tmp_path, capsys, where):
    """In env_config it ran 77 s and died of a MemoryError after 28 lines."""
    bomb = alias_bomb()
    text = {
        "env_config": f"environment:\n  env: math_verify\n  env_config:\n{bomb}\n",
        "training": f"training:\n  bomb:\n{bomb}\n",
        "top": f"{ENV}bombs:\n{bomb}\n",
    }[where]
    path = write(tmp_path / "bomb.yaml", text)
    start = time.monotonic()
    line = error_line(capsys, ["train", str(path), "--dry-run"])
    assert time.monotonic() - start < 10
    assert line.startswith(f"rllib-llm train: error: {path}: not valid YAML: its aliases (*name) "
                           "expand it to more than 10000 values (at line ")
    assert line.endswith("): an alias bomb, or a mistake; write the values out, or refer to fewer")


def test_aliases_that_stay_small_are_read_as_before(tmp_path, capsys):
    path = write(tmp_path / "ok.yaml", """\
        environment: {env: math_verify, env_config: &data {dataset: arithmetic}}
        evaluation: {evaluation_config: {env_config: *data}}
        training: {pg_variant: topr}
    """)
    assert main(["train", str(path), "--dry-run", "--run-dir", str(tmp_path / "r")]) == 0


def test_a_value_that_holds_itself_and_one_nested_too_deep(tmp_path, capsys):
    path = write(tmp_path / "loop.yaml", "environment:\n  env_config: &loop {again: *loop}\n")
    assert error_line(capsys, ["train", str(path)]) == (
        f"rllib-llm train: error: {path}: not valid YAML: the value at line 2 holds itself "
        "through an alias (*name inside the value &name anchors); a setting cannot contain "
        "itself: write the value out")
    path.write_text("environment:\n  env_config: " + "[" * 5000 + "]" * 5000 + "\n")
    assert error_line(capsys, ["train", str(path)]) == (
        f"rllib-llm train: error: {path}: not valid YAML: its values are nested too deep to "
        "read (thousands of levels of [...] or {...}); no setting nests that deep: fix the file")


# --- the run directory --------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_run_dir_that_is_a_file_or_lies_below_one(tmp_path, capsys, command):
    """A file: a NotADirectoryError traceback; below a file: passed --dry-run, failed once Ray
    was up."""
    space = "{grid_search: [topr, cispo]}" if command == "sweep" else "topr"
    path = write(tmp_path / "a.yaml", f"{ENV}training: {{pg_variant: {space}}}\n")
    afile = tmp_path / "afile"
    afile.write_text("")
    assert error_line(capsys, [command, str(path), "--run-dir", str(afile), "--dry-run"]) == (
        f"rllib-llm {command}: error: --run-dir {afile} is a file, not a directory; pick a "
        "directory (new or empty)")
    below = afile / "run"
    assert error_line(capsys, [command, str(path), "--run-dir", str(below), "--dry-run"]) == (
        f"rllib-llm {command}: error: --run-dir {below} cannot be created: {afile} is a file, "
        "not a directory; pick a directory (new or empty)")


# --- the data, read before Ray by train, sweep and --resume -------------------------------------
def test_a_sweep_reads_every_swept_dataset_before_ray_starts(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "1+1="}) + "\n")
    path = write(tmp_path / "s.yaml", f"""\
        environment:
          env: math_verify
          env_config: {{dataset: {{grid_search: ["{good}", "{bad}"]}}}}
        training: {{pg_variant: topr}}
    """)
    assert error_line(capsys, ["sweep", str(path), "--dry-run"]) == (
        f"rllib-llm sweep: error: {path}: answer_key='answer' is not a field of {bad} ({bad}:1); "
        "its fields are ['prompt']: pass answer_key=<one of them>")


def test_resume_reads_the_data_before_ray_starts(tmp_path, capsys):
    """The data may have gone since the run started: said now, not by Tune's trial."""
    from rllib_llm.cli.tune_runs import RUN_FILE

    data = tmp_path / "gone.jsonl"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / RUN_FILE).write_text(
        f"environment: {{env: math_verify, env_config: {{dataset: {data}}}}}\n")
    (run_dir / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    (run_dir / "tuner.pkl").write_bytes(b"")  # what Tuner.can_restore looks for
    assert error_line(capsys, ["train", "--resume", str(run_dir)]) == (
        f"rllib-llm train: error: {run_dir / RUN_FILE}: dataset file '{data}' does not exist; "
        "check the path")


# --- numbers ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "value", "rule"), [
    ("temperature", float("inf"), "must be a finite number > 0"),
    ("pg_clip", float("nan"), "must be a finite number > 0"),
    ("kl_loss_coef", float("inf"), "must be a finite number >= 0"),
    ("top_p", float("inf"), r"must be a finite number in \(0, 1\]"),
    ("gamma", float("-inf"), r"must be a finite number in \[0, 1\]"),
    ("dual_clip_c", float("inf"), "must be a finite number > 1"),
    ("temperature", 0, "must be a number > 0"),  # finite: the message as before
])
def test_inf_and_nan_are_told_they_must_be_finite(name, value, rule):
    with pytest.raises(ValueError, match=rf"^RLVRConfig.{name}={value!r} is invalid: it {rule}"):
        check_field(name, value)


def test_temperature_inf_from_the_command_line(tmp_path, capsys):
    path = write(tmp_path / "a.yaml", f"{ENV}training: {{temperature: .inf}}\n")
    assert error_line(capsys, ["train", str(path)]) == (
        f"rllib-llm train: error: {path}: training.temperature = inf is invalid: it must be a "
        "finite number > 0 (the learner divides logits by it; for greedy evaluation set "
        ".evaluation(evaluation_config={'temperature': 0})).")
    assert error_line(capsys, ["eval", "embedded", "--temperature", "inf"]) == (
        "rllib-llm eval: error: RLVRConfig.temperature=inf is invalid: it must be a finite "
        "number >= 0.")


# --- a trial that fails -------------------------------------------------------------------------
def test_a_failed_trial_is_reported_by_its_cause_in_one_line(tmp_path, capsys):
    """Tune hands back the trial actor's RayTaskError, whose text is the remote traceback (an
    env runner's error inside it, another); the report is the innermost cause's message."""
    import logging
    from types import SimpleNamespace

    from ray.exceptions import RayTaskError

    from rllib_llm.cli.tune_runs import HideTrialTracebacks, report_errors, trial_cause

    cause = ValueError("dataset file 'p.jsonl' does not exist; check the path\n(more detail)")
    runner = RayTaskError("sample", "Traceback (most recent call last):\n  ...\nValueError: x",
                          cause)
    trial = RayTaskError("train", "Traceback (most recent call last):\n  ...", runner)
    assert trial_cause(trial) == "ValueError: dataset file 'p.jsonl' does not exist; check the path"
    # A cause Ray could not keep: the traceback's last line names it.
    lost = RayTaskError("train", 'Traceback (most recent call last):\n  File "x.py", line 1\n'
                        "KeyError: 'k'", None)
    assert trial_cause(lost) == "KeyError: 'k'"
    # A trial whose RLVR() raised: its actor died, the constructor's traceback in its text.
    from ray.exceptions import ActorDiedError

    died = ActorDiedError()
    died.error_msg = ("The actor died because of an error raised in its creation task, "
                      'ray::RLVR.__init__() (pid=1)\n  File "/x.py", line 3, in f\n    g()\n'
                      "FileNotFoundError: dataset file 'p.jsonl' does not exist; check the path")
    assert trial_cause(died) == \
        "FileNotFoundError: dataset file 'p.jsonl' does not exist; check the path"
    # Only error.txt's text (Tune gives a str): its first line after Tune's header.
    oom = ("Failure # 1 (occurred at 2026-11-29_01-34-21)\n1 worker(s) were killed due to the "
           "node running low on memory.\nOOM kill reason: ...")
    assert trial_cause(oom) == "1 worker(s) were killed due to the node running low on memory."
    assert trial_cause("Failure # 1 (occurred at 2026-11-29_01-34-21)\nTraceback (most recent "
                       'call last):\n  File "x.py", line 1\nKeyError: \'k\'') == "KeyError: 'k'"
    results = [SimpleNamespace(error=trial, path=str(tmp_path / "RLVR_1")),
               SimpleNamespace(error=None, path=str(tmp_path / "RLVR_2"))]
    assert report_errors(results) == 1
    assert capsys.readouterr().out == (
        f"trial {tmp_path}/RLVR_1 failed: ValueError: dataset file 'p.jsonl' does not exist; "
        f"check the path (traceback: {tmp_path}/RLVR_1/error.txt)\n")
    # Tune's own console records of it (the whole traceback; "did not complete"; no metrics)
    # are dropped; others are kept.
    for message, kept in [("Trial task failed for trial RLVR_1", False),
                          ("Trials did not complete: [RLVR_1]", False),
                          ("Failed to fetch metrics for 1 trial(s):", False),
                          ("Something else", True)]:
        record = logging.LogRecord("ray.tune", logging.ERROR, "", 0, message, None, None)
        assert HideTrialTracebacks().filter(record) is kept, message


def test_plot_out_that_is_a_file_and_bad_plot_input_exit_2(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "run").mkdir()
    assert error_line(capsys, ["plot", str(tmp_path / "run"), "--out", str(afile)]) == (
        f"rllib-llm plot: error: --out {afile} is a file, not a directory; pick a directory")
    assert error_line(capsys, ["plot", str(tmp_path / "nowhere")]).startswith(
        "rllib-llm plot: error: ")


def test_a_run_directorys_settings_file_that_cannot_be_read(tmp_path, capsys):
    """--resume reads the run's settings file: read as a config file is (was a traceback)."""
    from rllib_llm.cli.tune_runs import RUN_FILE

    (tmp_path / RUN_FILE).write_bytes(b"training: {lr: 1.0e-5}\n# caf\xe9\n")
    assert error_line(capsys, ["train", "--resume", str(tmp_path)]) == (
        f"rllib-llm train: error: {tmp_path / RUN_FILE}: not UTF-8: byte 28 (line 2) is "
        "b'\\xe9'; save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 in.yaml > out.yaml`)")


def test_a_run_dir_whose_parent_is_not_writable(tmp_path, monkeypatch):
    from rllib_llm.cli import paths

    # (Tests may run as root, whom no permission bit stops: the check itself is stood in for.)
    monkeypatch.setattr(paths.os, "access", lambda path, mode: False)
    assert paths.new_run_dir_problem(tmp_path / "new" / "run") == (
        f"{tmp_path / 'new' / 'run'} cannot be created: {tmp_path} is not writable; pick another "
        "directory")
    assert paths.new_run_dir_problem(tmp_path) == (
        f"{tmp_path} is not writable; pick another directory")
