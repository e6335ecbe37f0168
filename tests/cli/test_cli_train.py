"""`rllib-llm train` as a user runs it (the console script, in its own process): a run killed with
SIGKILL mid-run and resumed with `--resume` ends at the same iteration with the same results as a
run never killed; checkpoints are kept as configured; a ROLL file trains the embedded default."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rllib_llm.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

# 32 training problems and 16 prompts per iteration: a data epoch ends every 2 iterations, so
# every checkpoint (every 2) falls on an epoch boundary, where a peer's resume ended the run.
SMALL_RUN = """
environment:
  env: math_verify
  env_config: {dataset: arithmetic, dataset_kwargs: {max_operand: 4, test_size: 8}}
training: {pg_variant: topr, adv_estimator: grpo, rollout_batch_size: 16,
           num_return_sequences_in_group: 4, response_length: 6, lr: 2.0e-4,
           use_kl_loss: false}
debugging: {seed: 0, log_level: ERROR}
run: {iterations: 8, checkpoint_every: 2, keep_checkpoints: 2}
"""
COMPARED = ("env_runners/episode_return_mean", "env_runners/accuracy",
            "learners/default_policy/loss", "learners/default_policy/entropy")


def train(*args: str, timeout: float = 300, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    run = subprocess.run([*CLI, "train", *args], capture_output=True, text=True, env=ENV,
                         timeout=timeout, cwd=cwd)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return run


def trial_dir(run_dir: Path) -> Path:
    (trial,) = [p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith("RLVR")]
    return trial


def progress(run_dir: Path) -> list[dict[str, str]]:
    with (trial_dir(run_dir) / "progress.csv").open() as f:
        return list(csv.DictReader(f))


def logged_iterations(run_dir: Path) -> int:
    """The last training iteration in a run's progress.csv so far (0 before it exists)."""
    try:
        return max((int(r["training_iteration"]) for r in progress(run_dir)), default=0)
    except (FileNotFoundError, ValueError):  # not written yet, or no trial directory yet
        return 0


def by_iteration(rows: list[dict[str, str]]) -> dict[int, dict[str, str]]:
    """Rows by training iteration; each iteration must have one row."""
    iterations = [int(r["training_iteration"]) for r in rows]
    assert len(set(iterations)) == len(iterations), f"iterations logged twice: {iterations}"
    return dict(zip(iterations, rows, strict=True))


def assert_one_row_per_iteration(run_dir: Path, n: int) -> None:
    """progress.csv and result.json hold iterations 1..n once each, in order, with
    time_total_s never going back (a resume used to append the iterations after its
    checkpoint again, from the checkpoint's time)."""
    rows = progress(run_dir)
    with (trial_dir(run_dir) / "result.json").open() as f:
        results = [json.loads(line) for line in f]
    for name, iterations, times in (
            ("progress.csv", [int(r["training_iteration"]) for r in rows],
             [float(r["time_total_s"]) for r in rows]),
            ("result.json", [r["training_iteration"] for r in results],
             [r["time_total_s"] for r in results])):
        assert iterations == list(range(1, n + 1)), (name, iterations)
        assert all(a <= b for a, b in zip(times, times[1:])), (name, times)


def kill_mid_run(config: Path, run_dir: Path) -> Path:
    """`rllib-llm train config` into run_dir, SIGKILLed once it has a checkpoint and has logged
    iteration 5."""
    # Its own session, so SIGKILL takes the CLI and every Ray process it started, mid-iteration.
    proc = subprocess.Popen([*CLI, "train", str(config), "--run-dir", str(run_dir)], env=ENV,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    # A checkpoint, and the row of iteration 5 or later in progress.csv (Tune's driver logs
    # results in bursts on a loaded machine): the resumed run runs again the iterations after
    # its checkpoint, and those logged before the kill must not be logged twice.
    while not (list(run_dir.glob("RLVR*/checkpoint_*")) and logged_iterations(run_dir) >= 5):
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return run_dir


def resumable(run_dir: Path) -> bool:
    """Whether the experiment state the kill left is readable (`train.check_experiment_state`,
    the check `--resume` makes)."""
    from rllib_llm.cli.train import UnresumableRunError, check_experiment_state

    try:
        check_experiment_state(run_dir)
    except UnresumableRunError:
        return False
    return True


def assert_resume_refused(run_dir: Path) -> None:
    """`--resume run_dir` exits 2 at once with one line saying the state is unreadable."""
    refused = subprocess.run([*CLI, "train", "--resume", str(run_dir)], capture_output=True,
                             text=True, env=ENV, timeout=120, cwd=ROOT)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "cannot be resumed" in line and "checkpoint_" in line, line


def test_a_killed_run_resumes_from_its_last_checkpoint_and_ends_like_an_unbroken_one(tmp_path):
    N = 16
    # 16 iterations, so that the run is still going when the row of iteration 5 is logged.
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_RUN.replace("iterations: 8", f"iterations: {N}"))
    straight = tmp_path / "straight"
    train(str(config), "--run-dir", str(straight))

    killed = kill_mid_run(config, tmp_path / "killed")
    if not resumable(killed):
        # Killed while Tune wrote its experiment state (in place, not atomically; it happened in
        # one full `make test` of several on 2026-11-28): resume says so in one line, and the
        # test kills a second run.
        assert_resume_refused(killed)
        killed = kill_mid_run(config, tmp_path / "killed_again")
    before = by_iteration(progress(killed))
    assert max(before) < N, "the run finished before it was killed"

    resumed = train("--resume", str(killed))
    assert "resuming" in resumed.stdout and f"done after {N} iterations" in resumed.stdout
    # Tune deleting a checkpoint its restored list still held, already gone: a traceback.
    assert "Error handling checkpoint" not in resumed.stderr
    assert "FileNotFoundError" not in resumed.stdout + resumed.stderr
    assert_one_row_per_iteration(killed, N)
    rows = progress(killed)
    restart = next(r for r in rows if r["iterations_since_restore"] == "1"
                   and r["training_iteration"] != "1")
    start = int(restart["training_iteration"]) - 1
    assert start in range(2, N, 2), f"resumed from iteration {start}, not from a checkpoint"
    after, reference = by_iteration(rows), by_iteration(progress(straight))
    # progress.csv's columns stayed put over the restore (Tune's own CSV logger shifted them)
    assert after[start + 1]["num_env_steps_sampled_lifetime"] == \
        reference[start + 1]["num_env_steps_sampled_lifetime"]
    for iteration in range(start + 1, N + 1):  # what the resumed run computed is the unbroken run's
        for key in COMPARED:
            assert after[iteration][key] == reference[iteration][key], (iteration, key)

    # The experiment state as a kill during Tune's write leaves it: cut short.
    (state,) = straight.glob("experiment_state-*.json")
    state.write_text(state.read_text()[:100])
    assert_resume_refused(straight)


def write_problems(path: Path, first: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                            for i in range(first, first + 16)))


def test_checkpoints_are_kept_by_recency_or_by_a_metric(tmp_path):
    """Also relative paths as docs/CLI.md writes them (`rllib-llm train a.yaml --run-dir runs/a`,
    a relative dataset in the file, then `rllib-llm eval runs/a`): Tune ran the trial in its
    trial directory, where data/p.jsonl did not exist (the checks before Ray had passed it), and
    eval of a relative run directory failed in pyarrow (tests/cli/test_cli_paths.py parses
    each subcommand's paths)."""
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_RUN)
    write_problems(tmp_path / "data" / "p.jsonl", 0)
    write_problems(tmp_path / "data" / "test.jsonl", 100)
    (tmp_path / "relative.yaml").write_text(
        SMALL_RUN.replace("dataset: arithmetic, dataset_kwargs: {max_operand: 4, test_size: 8}",
                          "dataset: data/p.jsonl")
        + "evaluation: {evaluation_config: {eval_dataset: data/test.jsonl}}\n")
    run = train("relative.yaml", "--run-dir", "runs/recent", "--set", "run.iterations=5",
                "--set", "run.checkpoint_every=1", cwd=tmp_path)
    recent = tmp_path / "runs" / "recent"
    assert f"run directory: {recent} " in run.stdout
    kept = sorted(p.name for p in trial_dir(recent).glob("checkpoint_*"))
    assert kept == ["checkpoint_000003", "checkpoint_000004"]  # iterations 4 and 5
    evaluated = subprocess.run([*CLI, "eval", "runs/recent", "--num-problems", "2", "--json"],
                               cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, (evaluated.stdout + evaluated.stderr)[-3000:]
    assert json.loads(evaluated.stdout.splitlines()[-1])["num_problems"] == 2

    # Also FSDP2 learners from a file (issue 49): two learner actors (half a CPU each, beside the
    # trial's process on 2 cores), whose checkpoints hold their shards; Tune deletes the ones it
    # does not keep, shards and all.
    best = tmp_path / "best"
    train(str(config), "--run-dir", str(best), "--set", "run.iterations=5",
          "--set", "run.checkpoint_every=1", "--set", "run.keep_checkpoints=1",
          "--set", "run.checkpoint_score=env_runners/accuracy",
          "--set", "training.learner_strategy=fsdp2", "--set", "learners.num_learners=2",
          "--set", "learners.num_cpus_per_learner=0.5")
    results = [json.loads(line) for line in (trial_dir(best) / "result.json").open()]
    assert results[-1]["learners"]["default_policy"]["num_optimizer_steps"] > 0
    accuracy = [r["env_runners"]["accuracy"] for r in results]
    best_index = max(range(5), key=lambda i: (accuracy[i], i))  # ties: the later one
    kept = {p.name for p in trial_dir(best).glob("checkpoint_*")}
    assert f"checkpoint_{best_index:06d}" in kept and "checkpoint_000004" in kept  # and latest
    assert len(kept) == (1 if best_index == 4 else 2)
    for name in kept:
        assert list((trial_dir(best) / name).rglob("fsdp2_shards/*")), name


def test_the_roll_topr_file_trains_the_embedded_default_and_says_what_it_mapped(tmp_path):
    run = train(str(ROOT / "examples" / "roll_topr.yaml"), "--run-dir", str(tmp_path / "r"),
                "--set", "run.iterations=2")
    assert "ROLL config: mapped" in run.stdout and "not mapped: none" in run.stdout
    assert "override for the embedded model: response_length: 4096 -> 6" in run.stdout
    assert "done after 2 iterations" in run.stdout
    assert run.stdout.rstrip().endswith(f"next: rllib-llm plot {tmp_path / 'r'} | rllib-llm "
                                        f"export {tmp_path / 'r'} OUT | rllib-llm eval "
                                        f"{tmp_path / 'r'}")
    # the progress bar (stderr), with the stable metrics
    assert "train: 100%" in run.stderr and "reward=" in run.stderr and "tok/s=" in run.stderr
    params = json.loads((trial_dir(tmp_path / "r") / "params.json").read_text())
    assert (params["rl_loss_coef"], params["positive_loss_coef"], params["dual_clip_c"]) == \
        (0.0, 1.0, 1.4)


def test_a_run_that_fails_before_its_first_iteration_suggests_nothing_to_go_on_with(tmp_path):
    """A run with nothing to plot, export or evaluate ended with "next: rllib-llm plot | export
    | eval" all the same. Here the env cannot be built: every prompt is longer than the embedded
    model's context (and the error says so, not to raise prompt_length past it). The data is
    checked before Ray starts, so the run ends there: one line, exit 2, no trial."""
    problems = tmp_path / "long.jsonl"
    problems.write_text("".join(json.dumps({"prompt": "1" * 200 + f"+{i}=", "answer": "0"}) +
                                "\n" for i in range(4)))
    config = tmp_path / "long.yaml"
    config.write_text(SMALL_RUN.replace("{dataset: arithmetic, dataset_kwargs: {max_operand: 4, "
                                        "test_size: 8}}", f"{{dataset: {problems}}}"))
    run = subprocess.run([*CLI, "train", str(config), "--run-dir", str(tmp_path / "r")],
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert run.returncode == 2, (run.stdout + run.stderr)[-4000:]
    error = [line for line in (run.stdout + run.stderr).splitlines() if "error:" in line]
    assert len(error) == 1 and "this model cannot take these prompts" in error[0]
    assert "next:" not in run.stdout and "Traceback" not in run.stdout + run.stderr


def test_a_dry_run_prints_the_settings_and_writes_nothing(tmp_path):
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_RUN)
    run = subprocess.run([*CLI, "train", str(config), "--dry-run", "--set", "lr=1e-4",
                          "--run-dir", str(tmp_path / "d")], capture_output=True, text=True,
                         env=ENV, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "lr: 0.0001" in run.stdout
    assert not (tmp_path / "d").exists()  # a dry run writes nothing
