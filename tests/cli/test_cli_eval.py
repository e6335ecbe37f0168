"""`rllib-llm eval`: RLVR's held-out evaluation of a run's policy, of its export, or of a model;
the same policy scores the same whichever way it is named, and a run's settings are the
defaults."""

from __future__ import annotations

import json

import pytest
import torch

from rllib_llm import RLVRConfig
from rllib_llm.cli import build_parser, main
from rllib_llm.cli.eval import build_evaluator, eval_config
from rllib_llm.models import load_model
from rllib_llm.outputs.checkpoints import export_policy, find_checkpoint, load_policy
from rllib_llm.recipes.embedded import embedded_config

pytestmark = pytest.mark.usefixtures("ray_session")  # tests/conftest.py

# lr 1e-3 moves the tiny policy away from the embedded checkpoint within two iterations.
TINY = dict(seed=0, rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4,
            lr=1e-3)
SETTINGS = ["--num-problems", "16", "--samples", "4", "--response-length", "4", "--seed", "5"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory (RLVR_x/checkpoint_000002 after two iterations) and its export."""
    root = tmp_path_factory.mktemp("run")
    algo = embedded_config("topr", **TINY).build_algo()
    try:
        algo.train()
        algo.train()
        algo.save_to_path(str(root / "RLVR_x" / "checkpoint_000002"))
    finally:
        algo.stop()
    out = root.parent / "export"
    export_policy(find_checkpoint(root), out)
    return root, out


def eval_json(capsys, *argv: str) -> dict:
    assert main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_export_scores_like_its_checkpoint(run, capsys):
    root, out = run
    of_run = eval_json(capsys, str(root), *SETTINGS)
    assert eval_json(capsys, str(out), *SETTINGS) == of_run
    assert (of_run["num_problems"], of_run["samples_per_problem"], of_run["num_samples"]) == \
        (16, 4, 64)
    assert of_run["pass@k"] >= of_run["pass@1"]
    # (pass@1 is c/n: a multiple of 1/64 here.)
    assert (of_run["pass@1"] * 64) == pytest.approx(round(of_run["pass@1"] * 64))


def test_eval_samples_with_the_checkpoints_policy(run):
    root, _ = run
    checkpoint = find_checkpoint(root)
    args = build_parser().parse_args(["eval", str(root)])
    algo = build_evaluator(eval_config(args, checkpoint), checkpoint)
    try:
        sampler = algo.env_runner_group.local_env_runner.module.model.state_dict()
    finally:
        algo.stop()
    trained = load_policy(checkpoint).model.state_dict()
    base = load_model("embedded").state_dict()
    assert all(torch.equal(sampler[k], trained[k]) for k in trained)
    assert not all(torch.equal(trained[k], base[k]) for k in base)


def test_a_relative_run_directory_is_evaluated_and_exported(run, capsys, monkeypatch):
    """As docs/CLI.md writes it (`rllib-llm eval runs/topr`): a relative run directory used to
    fail in pyarrow ("URI has empty scheme", 35 lines) where the absolute one worked."""
    root, _ = run
    monkeypatch.chdir(root.parent)
    assert main(["eval", root.name, "--num-problems", "2", "--samples", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == \
        f"model     {root / 'RLVR_x' / 'checkpoint_000002'}"
    assert main(["export", root.name, "relative_export"]) == 0
    assert (root.parent / "relative_export" / "config.json").is_file()


def test_eval_of_embedded_is_evaluate_accuracy(capsys):
    of_cli = eval_json(capsys, "embedded", "--num-problems", "12", "--temperature", "0.7",
                       "--seed", "3")
    algo = RLVRConfig().environment("math_verify").build_algo()
    try:
        of_algo = algo.evaluate_accuracy(num_problems=12, temperature=0.7, seed=3)
    finally:
        algo.stop()
    assert of_cli == of_algo


def test_a_run_is_evaluated_with_its_own_settings_unless_told(run, capsys):
    root, out = run
    assert main(["eval", str(root), "--num-problems", "4", "--samples", "2"]) == 0
    report = capsys.readouterr().out.splitlines()
    assert report[0] == f"model     {root / 'RLVR_x' / 'checkpoint_000002'}"
    # The run's response_length (4) and seed (0); RLVRConfig's for a model directory (16, 0).
    assert report[1] == ("problems  4 of arithmetic (split 'test'), 2 sample(s) each, "
                         "temperature 1.0, response_length 4, seed 0")
    assert report[2].startswith("pass@1    0.") or report[2] == "pass@1    1.0000"
    assert report[3].startswith("pass@2    ")
    # An export samples as its generation_config.json says: max_new_tokens is the run's
    # response_length (4), not RLVRConfig's default (16); the option given still wins.
    assert main(["eval", str(out), "--num-problems", "4", "--temperature", "0"]) == 0
    assert "1 sample(s) each, temperature 0.0, response_length 4, seed 0" in \
        capsys.readouterr().out


def test_eval_of_a_tune_run_repeats_its_last_held_out_evaluation(tmp_path, capsys, monkeypatch):
    """A run as `rllib-llm train` writes it (a Tune experiment, a checkpoint per iteration,
    held-out evaluation every iteration): eval with no options scores the last checkpoint
    under the run's settings, which reproduces the evaluation the run logged at that iteration
    (RLlib evaluates after the iteration's update; both use the run's seed)."""
    from ray import tune

    # Tune's older console output, as `rllib-llm train` selects it (cli/tune_runs.py): with
    # verbose=0 it prints nothing, so stdout holds only eval's JSON. (The newer one prints its
    # configuration table even then; which one a process gets must not depend on test order.)
    monkeypatch.setenv("RAY_AIR_NEW_OUTPUT", "0")
    config = embedded_config("topr", **TINY).evaluation(
        evaluation_interval=1, evaluation_config={"eval_num_problems": 6, "eval_num_samples": 2})
    tuner = tune.Tuner(config.algo_class, param_space=config, run_config=tune.RunConfig(
        storage_path=str(tmp_path), name="run", stop={"training_iteration": 2}, verbose=0,
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1)))
    assert not tuner.fit().errors
    trial = next((tmp_path / "run").glob("RLVR_*"))
    logged = json.loads((trial / "result.json").read_text().splitlines()[-1])
    assert logged["training_iteration"] == 2
    of_cli = eval_json(capsys, str(tmp_path / "run"))
    assert of_cli == {k: logged["evaluation"][k] for k in of_cli}
    assert (of_cli["num_problems"], of_cli["samples_per_problem"]) == (6, 2)


def test_an_exports_generation_config_sets_the_sampling_unless_an_option_does(run, tmp_path):
    import shutil

    _, out = run
    export = tmp_path / "export"
    shutil.copytree(out, export)
    generation = json.loads((export / "generation_config.json").read_text())
    assert (generation["max_new_tokens"], generation["temperature"], generation["do_sample"]) == \
        (4, 1.0, True)  # the run's sampler (TINY)

    def evaluation(*argv: str):
        args = build_parser().parse_args(["eval", str(export), *argv])
        ev = eval_config(args, None).get_evaluation_config_object()
        return ev.response_length, ev.temperature, ev.top_p

    assert evaluation() == (4, 1.0, 1.0)
    generation.update(max_new_tokens=3, temperature=0.7, top_p=0.9)
    (export / "generation_config.json").write_text(json.dumps(generation))
    assert evaluation() == (3, 0.7, 0.9)
    assert evaluation("--response-length", "5", "--temperature", "0.5") == (5, 0.5, 0.9)
    generation.update(do_sample=False)  # greedy
    (export / "generation_config.json").write_text(json.dumps(generation))
    assert evaluation() == (3, 0.0, 0.9)
    # A model directory that is no export of ours keeps RLVRConfig's defaults.
    (export / "rllib_llm_export.json").unlink()
    assert evaluation() == (16, 1.0, 1.0)


def test_held_out_problems_that_are_the_training_ones_are_refused_before_loading(run, capsys):
    """Refused by the built algorithm before, after ~15 s of loading and as a 28-line
    traceback; now as one error line, before anything is built."""
    root, _ = run
    expected = ("rllib-llm eval: error: RLVRConfig.eval_split='train': evaluation would score the "
                "training problems, split 'train' of 'arithmetic'. Set eval_split to a held-out "
                "split (e.g. 'test') or eval_dataset to a held-out data set.\n")
    for model in (str(root), "embedded"):
        assert main(["eval", model, "--split", "train"]) == 2
        assert capsys.readouterr().err == expected


def test_eval_names_what_is_wrong_with_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    assert main(["eval", str(tmp_path / "notes")]) == 2
    assert capsys.readouterr().err.startswith(
        "rllib-llm eval: error: no RLlib checkpoint under")
    assert main(["eval", str(tmp_path / "missing" / "model")]) == 2
    assert "model path" in capsys.readouterr().err
    assert main(["eval", "embedded", "--samples", "0"]) == 2
    assert capsys.readouterr().err == ("rllib-llm eval: error: RLVRConfig.eval_num_samples=0 is "
                                       "invalid: it must be an integer >= 1.\n")
