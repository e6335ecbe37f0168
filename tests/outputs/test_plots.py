"""`rllib-llm plot` and `rllib_llm.outputs.plots`: reading Tune and demo runs, smoothing, the PNGs."""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys

import numpy as np
import pytest

from rllib_llm.cli import main
from rllib_llm.outputs import plots
from rllib_llm.outputs.metric_names import (
    ACCURACY,
    APPROX_KL,
    ENTROPY,
    HELD_OUT_ACCURACY,
    ITERATION,
    KL,
    REWARD,
    TIME_TOTAL_S,
)
from rllib_llm.outputs.run_log import RunLog

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_dir(ray_session, tmp_path_factory):
    """A real Tune sweep: RLVR on the embedded task, two trials (lr grid), 3 iterations each,
    evaluating every 2nd iteration."""
    from ray import tune

    from rllib_llm.algorithm.rlvr import RLVR
    from rllib_llm.recipes.embedded import embedded_config

    storage = tmp_path_factory.mktemp("tune")
    config = embedded_config("topr", seed=0, rollout_batch_size=4,
                             num_return_sequences_in_group=2, response_length=4)
    config = config.evaluation(evaluation_interval=2, evaluation_config={"eval_num_problems": 8})
    config = config.training(lr=tune.grid_search([1e-4, 3e-4]))
    tune.Tuner(RLVR, param_space=config, run_config=tune.RunConfig(
        storage_path=str(storage), name="sweep", stop={"training_iteration": 3},
        verbose=0)).fit()
    return storage / "sweep"


@pytest.fixture
def demo_dir(tmp_path):
    """A demo run directory written by the demo's own RunLog, from hand-made results."""
    log = RunLog(tmp_path / "demo")
    for i, reward in enumerate([0.2, 0.4, 0.9], start=1):
        log.add(i, {"training_iteration": i, "time_total_s": 2.0 * i,
                    "env_runners": {"episode_return_mean": reward, "accuracy": reward / 2},
                    "learners": {"default_policy": {"kl_loss": 0.01 * i, "entropy": 1.0}}})
    log.finish({"title": "demo"})
    return tmp_path / "demo"


def write_csv(path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def hand_run(tmp_path):
    """metrics.csv by hand: reward with a NaN, held-out accuracy in 2 of 4 rows, nothing else."""
    run_dir = tmp_path / "hand"
    write_csv(run_dir / "metrics.csv", [
        {"iteration": 1, "wall_s": 10, REWARD: 1, HELD_OUT_ACCURACY: ""},
        {"iteration": 2, "wall_s": 20, REWARD: 2, HELD_OUT_ACCURACY: 0.5},
        {"iteration": 3, "wall_s": 30, REWARD: 4, HELD_OUT_ACCURACY: ""},
        {"iteration": 4, "wall_s": 40, REWARD: "nan", HELD_OUT_ACCURACY: 0.75},
    ])
    return run_dir


def column_of(csv_path, key) -> list[float]:
    with csv_path.open(newline="") as f:
        return [float(row[key]) for row in csv.DictReader(f)]


# ----------------------------------------------------------------------------- reading


def test_a_sweep_is_one_run_per_trial_labelled_by_what_the_trials_vary(sweep_dir):
    trial_dirs = plots.find_run_dirs(sweep_dir)
    runs = plots.load_runs([sweep_dir])
    assert [r.path for r in runs] == trial_dirs and len(runs) == 2
    assert [r.label for r in runs] == ["lr=0.0001", "lr=0.0003"]
    for run in runs:
        np.testing.assert_array_equal(run.columns[ITERATION], [1, 2, 3])
        # The values Tune wrote into progress.csv, read from result.json.
        for key in (REWARD, ACCURACY, ENTROPY, APPROX_KL, TIME_TOTAL_S):
            np.testing.assert_allclose(run.columns[key],
                                       column_of(run.path / "progress.csv", key))
        assert KL not in run.columns  # no use_kl_loss: the KL panel shows approx. KL


def test_held_out_accuracy_is_read_from_result_json_where_progress_csv_has_none(sweep_dir):
    trial = plots.find_run_dirs(sweep_dir)[0]
    # Tune fixes progress.csv's columns at the first row, which did not evaluate.
    assert HELD_OUT_ACCURACY not in (trial / "progress.csv").read_text().splitlines()[0]
    held_out = plots.read_columns(trial)[HELD_OUT_ACCURACY]
    assert np.isnan(held_out[[0, 2]]).all() and 0 <= held_out[1] <= 1


def test_a_trial_directory_alone_is_one_run_labelled_by_its_name(sweep_dir):
    trial = plots.find_run_dirs(sweep_dir)[1]
    (run,) = plots.load_runs([trial])
    assert run.label == trial.name
    np.testing.assert_array_equal(run.columns[REWARD], plots.read_columns(trial)[REWARD])


def test_progress_csv_is_read_when_there_is_no_result_json(sweep_dir, tmp_path):
    trial = plots.find_run_dirs(sweep_dir)[0]
    shutil.copy(trial / "progress.csv", tmp_path / "progress.csv")
    columns = plots.read_columns(tmp_path)
    np.testing.assert_allclose(columns[REWARD], plots.read_columns(trial)[REWARD])
    assert HELD_OUT_ACCURACY not in columns


def test_a_demo_run_is_read_from_metrics_csv_and_while_it_runs_from_metrics_jsonl(demo_dir):
    (run,) = plots.load_runs([demo_dir])
    assert run.label == "demo"
    np.testing.assert_array_equal(run.columns["iteration"], [1, 2, 3])
    np.testing.assert_allclose(run.columns[REWARD], [0.2, 0.4, 0.9])
    np.testing.assert_allclose(run.columns[KL], [0.01, 0.02, 0.03])
    (demo_dir / "metrics.csv").unlink()  # as before RunLog.finish
    np.testing.assert_allclose(plots.read_columns(demo_dir)[REWARD], [0.2, 0.4, 0.9])


def test_empty_cells_and_nan_are_missing_values_not_zeros(tmp_path):
    (run,) = plots.load_runs([hand_run(tmp_path)])
    x, y = run.series("iteration", HELD_OUT_ACCURACY)
    assert x.tolist() == [2, 4] and y.tolist() == [0.5, 0.75]
    x, y = run.series("iteration", REWARD)
    assert x.tolist() == [1, 2, 3] and y.tolist() == [1, 2, 4]


def test_several_directories_are_labelled_by_their_names_parents_where_those_clash(tmp_path):
    for parent in ("a", "b"):
        write_csv(tmp_path / parent / "run" / "metrics.csv", [{"iteration": 1, REWARD: 1}])
    runs = plots.load_runs([tmp_path / "a" / "run", tmp_path / "b" / "run"])
    assert [r.label for r in runs] == ["a/run", "b/run"]


# ----------------------------------------------------------------------------- smoothing


def test_smoothing_by_hand():
    # w = 0.5: m = 0.5, 1.25, 2.625; debiased by 1 - 0.5^t = 0.5, 0.75, 0.875.
    np.testing.assert_allclose(plots.smooth(np.array([1.0, 2.0, 4.0]), 0.5), [1, 5 / 3, 3])
    # A missing value stays missing and leaves the average as it was.
    np.testing.assert_allclose(plots.smooth(np.array([1.0, math.nan, 2.0, 4.0]), 0.5),
                               [1, math.nan, 5 / 3, 3])


def test_smoothing_zero_is_the_raw_values_and_a_constant_stays_constant():
    values = np.random.default_rng(0).normal(size=50)
    np.testing.assert_array_equal(plots.smooth(values, 0.0), values)
    np.testing.assert_allclose(plots.smooth(np.full(20, 0.3), 0.9), 0.3)


def test_smoothing_is_the_normalised_exponentially_weighted_average():
    values, w = np.random.default_rng(1).normal(size=12), 0.8
    for t in range(len(values)):
        weights = w ** np.arange(t, -1, -1)  # w^(t-i), i = 0..t
        assert plots.smooth(values, w)[t] == pytest.approx(weights @ values[:t + 1]
                                                           / weights.sum())


@pytest.mark.parametrize("weight", [1.0, -0.1, 2.0])
def test_smoothing_out_of_range_is_refused(weight):
    with pytest.raises(ValueError, match=r"smoothing=.*must be in \[0, 1\)"):
        plots.smooth(np.ones(3), weight)


# ----------------------------------------------------------------------------- figures


def test_the_figure_draws_raw_then_smoothed_values_skipping_missing_ones(tmp_path):
    (run,) = plots.load_runs([hand_run(tmp_path)])
    panels = plots.panels_for(["reward", "held_out"])
    fig = plots.curves_figure([run], plots.X_AXES[0], panels, smoothing=0.5)
    reward_ax, held_out_ax = fig.axes[:2]
    raw, smoothed = reward_ax.lines
    assert list(raw.get_xdata()) == [1, 2, 3] and list(raw.get_ydata()) == [1, 2, 4]
    np.testing.assert_allclose(smoothed.get_ydata(), [1, 5 / 3, 3])
    assert list(held_out_ax.lines[1].get_xdata()) == [2, 4]
    assert raw.get_alpha() < 1 and smoothed.get_color() == "C0"
    plots.import_pyplot().close(fig)


def test_the_kl_panel_says_which_kl_each_run_shows(sweep_dir, demo_dir):
    sweep_run, _, demo_run = plots.load_runs([sweep_dir, demo_dir])
    kl = plots.panels_for(["kl"])
    iteration = plots.X_AXES[0]
    fig = plots.curves_figure([sweep_run], iteration, kl)
    assert fig.axes[0].get_title() == f"approx. KL, policy vs. sampling policy\n{APPROX_KL}"
    fig = plots.curves_figure([sweep_run, demo_run], iteration, kl)
    ax = fig.axes[0]
    assert ax.get_title() == ("approx. KL, policy vs. sampling policy / KL to the reference "
                              f"model\n{APPROX_KL}, {KL}")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        f"sweep: lr=0.0001: {APPROX_KL}", f"demo: {KL}"]
    plots.import_pyplot().close("all")


def image_of(path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    return imread(path)[..., :3]  # (H, W, 3) in [0, 1]


def pixels_of_colour(image, colour: str) -> int:
    from matplotlib.colors import to_rgb

    return int((np.abs(image - np.array(to_rgb(colour))).max(axis=-1) < 0.02).sum())


def test_cli_plots_one_run(sweep_dir, tmp_path, capsys):
    trial = plots.find_run_dirs(sweep_dir)[0]
    assert main(["plot", str(trial), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    written = [tmp_path / "curves_by_iteration.png", tmp_path / "curves_by_time.png"]
    assert printed == [str(p) for p in written]  # every panel drawn: nothing to say
    for path in written:
        image = image_of(path)
        assert image.std() > 0.05
        assert pixels_of_colour(image, "C0") > 100 and pixels_of_colour(image, "C1") == 0


def test_cli_plots_runs_side_by_side(sweep_dir, demo_dir, tmp_path, capsys):
    """A sweep's two trials and a demo run: three colours in each figure."""
    assert main(["plot", str(sweep_dir), str(demo_dir), "--out", str(tmp_path),
                 "--smoothing", "0.3"]) == 0
    capsys.readouterr()
    for name in ("curves_by_iteration.png", "curves_by_time.png"):
        image = image_of(tmp_path / name)
        for colour in ("C0", "C1", "C2"):
            assert pixels_of_colour(image, colour) > 100, (name, colour)


def test_cli_writes_into_the_first_run_dir_by_default(demo_dir, capsys):
    assert main(["plot", str(demo_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(demo_dir / "curves_by_time.png")
    assert (demo_dir / "curves_by_iteration.png").is_file()


def test_metrics_no_run_has_are_left_out_and_said_once(tmp_path, capsys):
    assert main(["plot", str(hand_run(tmp_path)), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    for missing in ("accuracy (training samples)", "entropy (nats/token)", "clip fraction",
                    "response length (tokens)", "KL to the reference model or approx. KL"):
        assert out.count(f"no run has {missing}") == 1, missing
    assert "reward" not in out and "held-out" not in out
    result = plots.plot_runs(plots.load_runs([tmp_path / "hand"]), tmp_path / "again")
    assert result.panels == ["reward", "held_out"]


def test_metrics_picks_panels_and_takes_any_result_key(demo_dir, tmp_path, capsys):
    (run,) = plots.load_runs([demo_dir])
    result = plots.plot_runs([run], tmp_path, panels=plots.panels_for(["kl", "time_total_s"]))
    assert result.panels == ["kl", "time_total_s"] and result.notes == []
    assert main(["plot", str(demo_dir), "--out", str(tmp_path), "--metrics", "entropy,kl"]) == 0
    assert main(["plot", str(demo_dir), "--out", str(tmp_path), "--metrics", "rewards"]) == 2
    assert "none of the requested metrics is in any run" in capsys.readouterr().err


def test_a_run_without_a_time_column_is_left_out_of_the_time_plot_only(tmp_path, capsys):
    write_csv(tmp_path / "run" / "metrics.csv", [{"iteration": i, REWARD: i} for i in (1, 2)])
    assert main(["plot", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "left out of the plots by time: run" in out
    assert (tmp_path / "run" / "curves_by_iteration.png").is_file()
    assert not (tmp_path / "run" / "curves_by_time.png").exists()


# ----------------------------------------------------------------------------- errors


def test_a_path_that_does_not_exist_is_an_error(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such file or directory" in capsys.readouterr().err


def test_a_directory_without_a_run_is_an_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a run")
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: no run in it" in err and "progress.csv" in err
    assert "metrics.csv" in err


def test_a_file_is_not_a_run_directory(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text("iteration\n1\n")
    assert main(["plot", str(tmp_path / "metrics.csv")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_smoothing_out_of_range_is_a_cli_error(demo_dir, capsys):
    assert main(["plot", str(demo_dir), "--smoothing", "1"]) == 2
    assert "smoothing=1.0: must be in [0, 1)" in capsys.readouterr().err


def test_without_matplotlib_plot_says_what_to_install(demo_dir, monkeypatch, capsys):
    assert image_of(demo_dir / "reward_curve.png").std() > 0.05  # RunLog's own, with it
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    assert main(["plot", str(demo_dir)]) == 1
    assert "pip install 'rllib_llm[plot]'" in capsys.readouterr().err
    # The demo's RunLog still writes its files, without the reward curve.
    log = RunLog(demo_dir / "again")
    log.add(1, {"env_runners": {"episode_return_mean": 0.5}})
    log.finish({})
    assert "skipping reward_curve.png" in capsys.readouterr().out
    assert json.loads((demo_dir / "again" / "summary.json").read_text()) == {}
    assert not (demo_dir / "again" / "reward_curve.png").exists()


# ----------------------------------------------------------------------------- reward_curve.png


def _log_rows(tmp_path, results):
    """Rows as the demo's RunLog writes them, from nested results."""
    log = RunLog(tmp_path / "demo")
    for i, result in enumerate(results, start=1):
        log.add(i, result)
    return log.rows


def test_reward_curve_draws_a_binary_reward_and_its_accuracy_as_one_series(tmp_path):
    from rllib_llm.outputs.run_log import reward_curve_series

    # A binary reward: the mean reward is the accuracy, iteration by iteration.
    values = [0.25, 0.5, 0.0, 0.75, 1.0, 0.5, 0.25, 0.5, 0.75, 1.0, 0.5, 0.25, 0.75, 1.0, 0.5,
              0.25, 0.5, 0.75, 0.5, 1.0]
    rows = _log_rows(tmp_path, [{"env_runners": {"episode_return_mean": v, "accuracy": v}}
                                for v in values])
    (series,) = reward_curve_series(rows)
    assert series.label == "train reward (= accuracy)"
    assert series.x == list(range(1, 21)) and series.raw == values
    # 20 iterations: a window of 2 (10%); the first value has only itself.
    assert series.smoothed == [0.25] + [(a + b) / 2 for a, b in zip(values, values[1:])]


def test_reward_curve_draws_a_differing_reward_and_accuracy_apart_with_held_out_points(tmp_path):
    from rllib_llm.outputs.run_log import moving_average, reward_curve_series, smoothing_window

    results = [{"env_runners": {"episode_return_mean": 0.1 * i, "accuracy": 0.1 * i - 0.05}}
               for i in range(1, 31)]
    results[9]["evaluation"] = {"pass@1": 0.4}
    results[29]["evaluation"] = {"pass@1": 0.6}
    rows = _log_rows(tmp_path, results)
    reward, accuracy, held_out = reward_curve_series(rows)
    assert (reward.label, accuracy.label, held_out.label) == \
        ("train reward", "train accuracy", "held-out accuracy")
    assert smoothing_window(30) == 3
    assert reward.smoothed[:4] == pytest.approx([0.1, 0.15, 0.2, 0.3])  # (0.2+0.3+0.4)/3 = 0.3
    assert accuracy.smoothed[3] == pytest.approx(0.25)
    assert (held_out.x, held_out.raw, held_out.smoothed) == ([10.0, 30.0], [0.4, 0.6], None)
    # Equal up to 1e-9 is the same series; NaN gaps are skipped by the average.
    assert moving_average([1.0, float("nan"), 3.0, 5.0], 3) == [1.0, 1.0, 2.0, 4.0]
    near = _log_rows(tmp_path, [{"env_runners": {"episode_return_mean": 0.5,
                                                 "accuracy": 0.5 + 1e-12}}])
    assert [s.label for s in reward_curve_series(near)] == ["train reward (= accuracy)"]
    only_reward = _log_rows(tmp_path, [{"env_runners": {"episode_return_mean": 0.5}}])
    assert [s.label for s in reward_curve_series(only_reward)] == ["train reward"]
