"""`rllib-llm train` / `sweep` config files: sections, --set, ROLL files, --help, and an error for
each way a file can be wrong, naming the file, the setting and the rule (no Ray, no training)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rllib_llm.algorithm.fields import FIELDS
from rllib_llm.cli import build_parser, main
from rllib_llm.cli.config_file import ConfigFileError, read_run_file
from rllib_llm.cli.run_settings import RUN_FIELDS, TUNE_FIELDS
from rllib_llm.recipes.embedded import (
    DEMO_ITERATIONS,
    DEMO_TRAINING,
    EMBEDDED_ROLL_OVERRIDES,
    demo_config,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path: Path, sets=(), **kw) -> str:
    with pytest.raises(ConfigFileError) as info:
        read_run_file(path, list(sets), **kw).check()
    return str(info.value)


def test_the_example_train_file_is_the_demo_config():
    run_file = read_run_file(EXAMPLES / "embedded_topr.yaml")
    ours, demo = run_file.to_config(), demo_config("topr", seed=0)
    for name in [*DEMO_TRAINING, "pg_variant", "env", "env_config", "seed"]:
        assert getattr(ours, name) == getattr(demo, name), name
    assert run_file.run["iterations"] == DEMO_ITERATIONS


def test_sections_reach_the_builder_methods_and_set_overrides_them(tmp_path):
    path = write(tmp_path, """
        environment: {env: math_verify, env_config: {dataset: arithmetic}}
        training: {pg_variant: cispo, lr: 1e-5, rollout_batch_size: 4}
        env_runners: {num_env_runners: 1}
        evaluation: {evaluation_interval: 5, evaluation_config: {eval_num_problems: 20}}
        run: {iterations: 7}
    """)
    sets = ["pg_variant=topr", "training.rollout_batch_size=2", "run.checkpoint_every=3",
            "evaluation.evaluation_config.temperature=0", "lr=2e-5"]
    run_file = read_run_file(path, sets)
    config = run_file.to_config()
    assert (config.pg_variant, config.rollout_batch_size, config.num_env_runners) == ("topr", 2, 1)
    assert config.lr == 2e-5 and isinstance(config.lr, float)  # 1e-5 is a number, not a string
    assert config.evaluation_config == {"eval_num_problems": 20, "temperature": 0}
    assert run_file.run == {**run_file.run, "iterations": 7, "checkpoint_every": 3}
    run_file.check()


@pytest.mark.parametrize(("text", "sets", "expected"), [
    ("training: {pg_varient: topr}", [], "training.pg_varient is not a setting of training. "
                                         "Did you mean pg_variant"),
    ("training: {pg_clip: -1}", [], "training.pg_clip = -1 is invalid: it must be a number > 0"),
    ("training: {pg_variant: nope}", [], "training.pg_variant = 'nope' is invalid: it must be one "
                                         "of"),
    ("trainng: {pg_variant: topr}\nrun: {iterations: 3}", [],
     "'trainng' at the top level next to the section(s) 'run'"),
    ("run: {iterations: 0}", [], "run.iterations = 0 is invalid: it must be an integer >= 1"),
    ("run: {checkpoint_score: accuracy}", [], "run.checkpoint_score = 'accuracy' is invalid"),
    ("run: {keep_checkpoints: 2, checkpoint_every: -1}", [], "run.checkpoint_every = -1"),
    ("env_runners: {num_env_runnerz: 1}", [], "env_runners.num_env_runnerz is not a setting of "
                                              "env_runners. Did you mean num_env_runners"),
    ("env_runners: {num_env_runners: -1}", [], "RLVRConfig.num_env_runners=-1 is invalid: it "
                                               "must be an integer >= 0"),
    ("training: {learning_rat: 0.1}", [], "training.learning_rat is not a setting of training. "
                                          "Did you mean lr"),
    ("training: {pg_variant: topr}", ["learning_rat=0.1"], "Did you mean lr"),
    ("training: 3", [], "section 'training' must be a mapping"),
    ("training: {pg_variant: {grid_search: [topr, cispo]}}", [], "is a search space"),
    ("tune: {metric: evaluation/pass@1}\ntraining: {}", [], "belongs in a sweep file"),
    ("training: {pg_variant: topr}", ["pg_variant"], "expected key=value"),
    ("training: {pg_variant: topr}", ["nonsense.x=1"], "must start with a section"),
    ("training: {pg_variant: topr}", ["training=1"], "name a setting inside the section"),
    # a rule between settings (RLVRConfig.validate), still naming the file
    ("training: {rollout_batch_size: 3, num_return_sequences_in_group: 2, mini_batch_size: 4}",
     [], "run.yaml: "),
])
def test_each_mistake_gets_an_error_naming_the_file_the_setting_and_the_rule(
        tmp_path, text, sets, expected):
    path = write(tmp_path, text)
    message = error_of(path, sets)
    assert expected in message
    if not sets:
        assert str(path) in message


@pytest.mark.parametrize(("sets", "expected"), [
    (["evaluation.evaluation_config.eval_num_problem=5"],
     "RLVRConfig.evaluation_config has an unknown setting 'eval_num_problem'. Did you mean "
     "eval_num_problems"),
    (["evaluation.evaluation_config.temperature=-1"],
     "RLVRConfig.evaluation_config['temperature']=-1 is invalid: it must be a number >= 0."),
    (["evaluation.evaluation_config.eval_num_samples=0"],
     "RLVRConfig.evaluation_config['eval_num_samples']=0 is invalid: it must be an integer >= 1."),
    (["evaluation.evaluation_interval=-1"], "RLVRConfig.evaluation_interval=-1 is invalid"),
])
def test_evaluation_settings_fail_the_dry_run(tmp_path, capsys, sets, expected):
    path = write(tmp_path, """
        environment: {env: math_verify, env_config: {dataset: arithmetic}}
        evaluation: {evaluation_interval: 5}
    """)
    argv = ["train", str(path), "--dry-run", "--run-dir", str(tmp_path / "run")]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_files_that_are_not_config_files(tmp_path):
    assert "no such file" in error_of(tmp_path / "missing.yaml")
    assert "not valid YAML" in error_of(write(tmp_path, "training: [1, 2"))
    assert "must be a YAML mapping" in error_of(write(tmp_path, "- 1\n- 2"))
    message = error_of(write(tmp_path, "nonsense: 1\nmore: 2"))
    assert "neither an rllib_llm file" in message and "'nonsense'" in message


@pytest.mark.parametrize(("text", "expected"), [
    # ROLL's off-policy guide flattened: its global block and actor_train both say pg_variant
    ("pg_variant: topr\nppo_epochs: 1\npg_variant: cispo\n",
     "key 'pg_variant' is given twice in one mapping (lines 1 and 3); keep one"),
    ("training: {lr: 1e-5}\nrun: {iterations: 3}\ntraining: {lr: 2e-5}\n",
     "key 'training' is given twice in one mapping (lines 1 and 3)"),
    ("training:\n  lr: 1e-5\n  ppo_epochs: 2\n  lr: 2e-5\n",
     "key 'lr' is given twice in one mapping (lines 2 and 4)"),
    ("evaluation: {evaluation_config: {temperature: 0, temperature: 1}}\n",
     "key 'temperature' is given twice in one mapping (lines 1 and 1)"),
])
def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path, text, expected):
    message = error_of(write(tmp_path, text))
    assert expected in message and "\n" not in message


def test_a_run_directorys_settings_are_read_with_the_same_loader(tmp_path):
    from rllib_llm.cli.tune_runs import RUN_FILE
    from rllib_llm.cli.tune_runs import read_run_file as read_run_dir

    (tmp_path / RUN_FILE).write_text("training: {lr: 1e-5}\ntraining: {lr: 2e-5}\n")
    with pytest.raises(ValueError, match="key 'training' is given twice"):
        read_run_dir(tmp_path)
    (tmp_path / RUN_FILE).write_text("training: {lr: 1e-5}\n")
    assert read_run_dir(tmp_path) == {"training": {"lr": 1e-5}}


def test_a_roll_file_is_mapped_reported_and_sized_for_the_embedded_model():
    run_file = read_run_file(EXAMPLES / "roll_topr.yaml")
    assert "ROLL config: mapped" in run_file.roll_report
    assert "not mapped: none" in run_file.roll_report
    training = run_file.sections["training"]
    assert (training["rl_loss_coef"], training["positive_loss_coef"]) == (0.0, 1.0)
    assert training["rollout_batch_size"] == 512  # the file's, kept
    for name, value in EMBEDDED_ROLL_OVERRIDES.items():
        assert training[name] == value
        assert any(note.startswith(f"override for the embedded model: {name}:")
                   for note in run_file.notes)
    run_file.check()


def test_roll_fields_that_map_nowhere_are_listed_and_strict_refuses_them(tmp_path):
    path = write(tmp_path, """
        pretrain: embedded
        pg_variant: topr
        adv_estimator: grpo
        num_return_sequences_in_group: 4
        max_steps: 12
        save_steps: 4
        eval_steps: 6
        seed: 3
        actor_train: {model_args: {dtype: bf16}}
        use_reward_scaling: true
        not_a_roll_field: 1
    """)
    run_file = read_run_file(path)
    report = run_file.roll_report
    for name in ("actor_train", "use_reward_scaling", "not_a_roll_field"):
        assert f"  {name}: " in report
    assert "not mapped (3)" in report
    # The CLI runs ROLL's run management itself (the report would call it the caller's).
    assert run_file.run["iterations"] == 12 and run_file.run["checkpoint_every"] == 4
    assert run_file.sections["evaluation"] == {"evaluation_interval": 6}
    assert run_file.sections["debugging"] == {"seed": 3}
    assert not any(n.startswith("override for the embedded model") for n in run_file.notes)
    message = error_of(path, strict=True)
    assert "fields not mapped" in message and "not_a_roll_field" in message


def test_a_roll_placeholder_value_fails_naming_the_field(tmp_path):
    path = write(tmp_path, "rl_loss_coef: 0.0\npositive_loss_coef: x_1\n")
    assert "positive_loss_coef='x_1'" in error_of(path)


@pytest.mark.parametrize(("text", "sets", "expected"), [
    ("training: {pg_variant: topr}", ["num_epochs=2", "ppo_epochs=3"],
     "--set num_epochs=2 and --set ppo_epochs=3 both set ppo_epochs (num_epochs is RLlib's name "
     "for ppo_epochs); keep one."),
    ("training: {pg_variant: topr}", ["ppo_epochs=3", "training.num_epochs=2"],
     "--set ppo_epochs=3 and --set training.num_epochs=2 both set ppo_epochs"),
    ("training: {num_epochs: 2, ppo_epochs: 3}", [],
     "training.num_epochs and training.ppo_epochs both set ppo_epochs (num_epochs is RLlib's name "
     "for ppo_epochs); keep one."),
    ("training: {max_new_tokens: 9, response_length: 6}", [],
     "training.max_new_tokens and training.response_length both set response_length"),
])
def test_an_alias_and_its_field_given_together_are_an_error_naming_both(
        tmp_path, text, sets, expected):
    assert expected in error_of(write(tmp_path, text), sets)


def test_a_set_replaces_the_files_value_under_either_name_and_the_field_name_is_shown(
        tmp_path, capsys):
    path = write(tmp_path, """
        environment: {env: math_verify, env_config: {dataset: arithmetic}}
        training: {ppo_epochs: 3, max_new_tokens: 5}
    """)
    run_file = read_run_file(path, ["num_epochs=2"])
    assert run_file.sections["training"] == {"ppo_epochs": 2, "response_length": 5}
    assert run_file.to_config().ppo_epochs == 2
    assert "num_epochs -> ppo_epochs: 2" in run_file.notes
    assert "max_new_tokens -> response_length: 5" in run_file.notes
    assert main(["train", str(path), "--set", "num_epochs=2", "--dry-run",
                 "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "num_epochs -> ppo_epochs: 2" in out and "  ppo_epochs: 2" in out
    assert "  num_epochs:" not in out


def test_a_roll_files_fields_given_by_set_are_read_before_its_rules_and_derivations(tmp_path):
    text = (EXAMPLES / "roll_topr.yaml").read_text().replace(
        "positive_loss_coef: 1.0", "positive_loss_coef: x_1")
    path = write(tmp_path, text)
    assert "positive_loss_coef='x_1' is invalid" in error_of(path)
    run_file = read_run_file(path, ["positive_loss_coef=1.0", "training.pg_clip=0.3"])
    training = run_file.sections["training"]
    assert training["positive_loss_coef"] == 1.0 and training["pg_clip"] == 0.3
    assert training["dual_clip_c"] == pytest.approx(1.6)  # ROLL's 1 + 2 pg_clip, not 1.4
    assert "dual_clip_loss=True, pg_clip=0.3 -> dual_clip_c=1.6" in run_file.roll_report
    run_file.check()
    # what --set gives wins over the embedded model's sizes, and is said
    run_file = read_run_file(EXAMPLES / "roll_ppo.yaml", ["response_length=5"])
    assert run_file.sections["training"]["response_length"] == 5
    assert "no override for the embedded model: response_length: 5, given by --set " \
           "response_length" in run_file.notes
    assert "--set max_new_tokens=4 and --set response_length=5 both set response_length" in \
        error_of(EXAMPLES / "roll_ppo.yaml", ["max_new_tokens=4", "response_length=5"])


def test_a_roll_files_learning_rate_is_reported_under_its_name(tmp_path):
    path = write(tmp_path, """
        pg_variant: topr
        adv_estimator: reinforce
        num_return_sequences_in_group: 8
        learning_rate: 1.0e-6
    """)
    run_file = read_run_file(path)
    assert "  learning_rate=1e-06 -> lr=1e-06" in run_file.roll_report
    assert any(note.startswith("override for the embedded model: learning_rate: 1e-06 -> lr: ")
               for note in run_file.notes)
    assert not any("(not in the file)" in note and " lr:" in note for note in run_file.notes)


def test_help_lists_every_setting_with_its_doc_from_the_tables(capsys):
    texts = [build_parser().format_help()]
    for command in ("train", "sweep"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        texts.append(capsys.readouterr().out)
    for text in texts:
        flat = " ".join(text.split())
        for f in (*FIELDS, *RUN_FIELDS):
            assert f"{f.name} (default {f.default!r})" in flat, f.name
            assert " ".join(f.doc.split()) in flat, f.name
    assert all(f.name in " ".join(texts[2].split()) for f in TUNE_FIELDS)


def test_train_cli_errors_exit_2_with_the_message(tmp_path, capsys):
    path = write(tmp_path, "training: {pg_clip: 0}")
    assert main(["train", str(path)]) == 2
    assert "training.pg_clip = 0 is invalid" in capsys.readouterr().err
    assert main(["train"]) == 2
    assert main(["train", str(path), "--resume", str(tmp_path)]) == 2
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_train_refuses_a_used_run_dir(tmp_path, capsys):
    path = write(tmp_path, "training: {pg_variant: topr}")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    assert main(["train", str(path), "--run-dir", str(tmp_path / "used")]) == 2
    assert "--resume" in capsys.readouterr().err


def test_a_sweep_needs_a_search_space_and_checks_every_grid_value(tmp_path, capsys):
    path = write(tmp_path, "training: {pg_variant: topr}")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "nothing to sweep" in capsys.readouterr().err
    path = write(tmp_path, "training: {pg_variant: {grid_search: [topr, nope]}}")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "training.pg_variant = 'nope' is invalid" in capsys.readouterr().err
    # A grid with no value would start no trial; a range needs its two ends.
    path = write(tmp_path, "training: {pg_variant: {grid_search: []}}")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "training.pg_variant: {grid_search: ...} takes a list of values, every one tried, " \
        "got []" in capsys.readouterr().err
    path = write(tmp_path, "training: {lr: {uniform: [1.0e-5]}}")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "training.lr: {uniform: ...} takes [low, high]" in capsys.readouterr().err
    path = write(tmp_path, "training: {pg_variant: {grid_search: [topr]}}\ntune: {mode: best}")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "tune.mode = 'best' is invalid" in capsys.readouterr().err
    assert main(["sweep", str(EXAMPLES / "sweep_demo_recipe.yaml"), "--dry-run",
                 "--run-dir", str(tmp_path / "s")]) == 0


def test_the_settings_reference_is_generated_from_the_same_tables():
    from rllib_llm.cli.settings_reference import reference_block

    reference = (EXAMPLES.parent / "docs" / "SETTINGS.md").read_text()
    assert reference_block() in reference, \
        "run: python -m rllib_llm.cli.settings_reference --write docs/SETTINGS.md"


@pytest.mark.parametrize(("sections", "expected"), [
    ("{training: {pg_variant: topr}}", {"CPU": 1.0}),  # the main process, where the local learner and the sampler run
    # one value alone does not lower it: the main process asks for the larger of the two
    ("{resources: {num_cpus_for_main_process: 0.5}}", {"CPU": 1.0}),
    ("{resources: {num_cpus_for_main_process: 0.5}, learners: {num_cpus_per_learner: 0.5}}",
     {"CPU": 0.5}),
    ("{learners: {num_gpus_per_learner: 0.5}, env_runners: {num_env_runners: 2}}",
     {"CPU": 3.0, "GPU": 0.5}),
])
def test_what_a_trial_asks_ray_for(tmp_path, sections, expected):
    from rllib_llm.cli.tune_runs import describe_resources, trial_resources

    path = write(tmp_path, sections)
    asks = trial_resources(read_run_file(path).to_config())
    assert asks == expected
    if "GPU" not in expected:
        assert describe_resources(asks, {"CPU": 2.0, "GPU": 0.0}).endswith(
            f"up to {int(2 // expected['CPU'])} trial(s) at once")


def test_a_sweep_dry_run_says_what_each_trial_asks_for(tmp_path, capsys):
    assert main(["sweep", str(EXAMPLES / "sweep_demo_recipe.yaml"), "--dry-run",
                 "--run-dir", str(tmp_path / "s")]) == 0
    assert "each trial asks for 1 CPU" in capsys.readouterr().out


def test_train_with_a_bad_data_file_exits_2_with_one_line_before_ray_starts(tmp_path):
    """As a user runs it (the console script): the data file is read before Ray and Tune, whose
    trial used to end a minute later in some 120 lines of tables and tracebacks."""
    records = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    del records[10]["answer"]
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    path = write(tmp_path, f"""
        environment: {{env: math_verify, env_config: {{dataset: {data}}}}}
        training: {{pg_variant: topr}}
    """)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "rllib_llm.cli", "train", str(path),
                          "--run-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, (run.stdout + run.stderr)[-3000:]
    assert run.stderr.splitlines() == [
        f"rllib-llm train: error: {path}: answer_key='answer' is not a field of {data} "
        f"({data}:11); its fields are ['prompt']: pass answer_key=<one of them>"], run.stderr
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - start < 120  # the imports; Tune's trial took 43-68 s
