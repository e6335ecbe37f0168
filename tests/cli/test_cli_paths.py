"""Relative paths on the command line: every subcommand reads them from the directory it was
started in (cli/paths.py), as docs/CLI.md writes them (`rllib-llm eval runs/topr`). A relative
run directory used to reach pyarrow as a URI with no scheme ("URI has empty scheme", a 35-line
traceback) while the same directory given absolute worked. The runs themselves are in
test_cli_eval.py (eval, export of a relative run directory) and test_cli_train.py (train a
relative file into a relative run directory, then eval it, as docs/CLI.md writes them)."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import pytest

from rllib_llm.cli import build_parser, main
from rllib_llm.cli.paths import absolute_path, path_or_name
from rllib_llm.outputs.metric_names import REWARD

# Each subcommand's path arguments, given relative: (argv, {attribute: path it names}).
RELATIVE = [
    (["train", "a.yaml", "--run-dir", "runs/x"], {"config": "a.yaml", "run_dir": "runs/x"}),
    (["train", "--resume", "runs/x"], {"resume": "runs/x"}),
    (["eval", "runs/x", "--dataset", "data/p.jsonl"],
     {"model": "runs/x", "dataset": "data/p.jsonl"}),
    (["export", "runs/x", "out"], {"run_dir": "runs/x", "out": "out"}),
    (["plot", "runs/x", "runs/y", "--out", "pngs"], {"run_dirs": ["runs/x", "runs/y"],
                                                     "out": "pngs"}),
    (["sweep", "s.yaml", "--run-dir", "../runs/s"], {"config": "s.yaml", "run_dir": "../runs/s"}),
]


@pytest.mark.parametrize(("argv", "paths"), RELATIVE, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else "")
def test_every_path_argument_is_made_absolute_from_the_working_directory(
        argv, paths, tmp_path, monkeypatch):
    work = tmp_path / "work"
    for name in ("runs/x", "runs/y", "data"):
        (work / name).mkdir(parents=True, exist_ok=True)
    (work / "data" / "p.jsonl").write_text("")
    monkeypatch.chdir(work)
    args = build_parser().parse_args(argv)
    for attribute, given in paths.items():
        value = getattr(args, attribute)
        expected = [(work / g).resolve() for g in given] if isinstance(given, list) else \
            (work / given).resolve()
        if isinstance(value, list):
            assert [Path(v) for v in value] == expected
        else:
            assert Path(value) == expected


def test_a_name_that_is_no_local_path_stays_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert path_or_name("embedded") == "embedded"
    assert path_or_name("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    (tmp_path / "embedded").mkdir()  # a local directory of that name is what it names here
    assert path_or_name("embedded") == str(tmp_path / "embedded")
    assert absolute_path("~/x") == Path.home() / "x"


def write_config(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def test_train_and_sweep_dry_runs_read_a_relative_file_and_check_a_relative_run_dir(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env = "environment: {env: math_verify, env_config: {dataset: arithmetic}}\n"
    write_config(tmp_path / "a.yaml", env + "training: {pg_variant: topr}\n")
    write_config(tmp_path / "s.yaml",
                 env + "training: {pg_variant: {grid_search: [topr, cispo]}}\n")
    assert main(["train", "a.yaml", "--run-dir", "runs/a", "--dry-run"]) == 0
    assert main(["sweep", "s.yaml", "--run-dir", "runs/s", "--dry-run"]) == 0
    capsys.readouterr()
    # The run directory is checked where it would be written: named as such.
    (tmp_path / "runs").write_text("")
    assert main(["train", "a.yaml", "--run-dir", "runs/a", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"rllib-llm train: error: --run-dir {tmp_path}/runs/a cannot be created: "
        f"{tmp_path}/runs is a file, not a directory; pick a directory (new or empty)\n")


def test_resume_reads_a_relative_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "x").mkdir(parents=True)
    assert main(["train", "--resume", "runs/x"]) == 2
    assert capsys.readouterr().err == (
        f"rllib-llm train: error: {tmp_path}/runs/x is not a run directory of `rllib-llm "
        "train` (rllib_llm_run.yaml is missing)\n")


def test_plot_of_a_relative_run_directory_writes_beside_it(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "runs" / "demo"
    run_dir.mkdir(parents=True)
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["iteration", "wall_s", REWARD])
        writer.writeheader()
        writer.writerows({"iteration": i, "wall_s": 10 * i, REWARD: i} for i in (1, 2))
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "runs/demo"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        str(run_dir / "curves_by_iteration.png"), str(run_dir / "curves_by_time.png")]
