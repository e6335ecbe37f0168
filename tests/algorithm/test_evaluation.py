"""Evaluation scores held-out problems under RLlib's evaluation settings: the held-out split or
file (never the training one), the evaluation config's sampling arguments, evaluation_interval,
problems shared out over evaluation_num_env_runners, pass@1 as c/n, and no effect on training."""

from __future__ import annotations

import json
import math

import pytest
import torch
from rllib_llm.envs import arithmetic_problems
from rllib_llm.envs.answer_extraction import extract_answer

from rllib_llm import core
from rllib_llm.algorithm.held_out_evaluation import evaluation_metrics
from rllib_llm.recipes.embedded import embedded_config
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.eval_shard import EvalShard
from rllib_llm.rollout.held_out_sampling import shard_indices

TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)
UNREACHABLE = "1000000"  # an answer the embedded model cannot write in 4 tokens


# --- the arithmetic of pass@k --------------------------------------------------------------------
def test_pass_at_k_is_the_unbiased_binomial_estimator():
    n = 5
    c = torch.arange(n + 1)  # every possible number of correct responses
    for k in range(1, n + 1):
        expected = [1 - math.comb(n - ci, k) / math.comb(n, k) for ci in range(n + 1)]
        torch.testing.assert_close(core.pass_at_k(c, n, k), torch.tensor(expected,
                                                                         dtype=torch.float64))
    assert core.pass_at_k(c, n, 1).tolist() == pytest.approx([ci / n for ci in range(n + 1)])


@pytest.mark.parametrize("correct, n, k, message", [
    ([1], 2, 3, r"k=3 must be in \[1, num_samples=2\]"),
    ([3], 2, 1, r"integers in \[0, 2\], got \[3\]"),
    ([-1], 2, 1, r"integers in \[0, 2\], got \[-1\]"),
])
def test_pass_at_k_rejects_impossible_counts(correct, n, k, message):
    with pytest.raises(ValueError, match=message):
        core.pass_at_k(torch.tensor(correct), n, k)


def test_shards_merge_into_pass_at_1_of_all_responses():
    # 3 problems x 4 responses: 4, 0 and 1 correct; 40 tokens in all.
    shards = [EvalShard([0, 2], [4, 1], 4, 30, 3), EvalShard([1], [0], 4, 10, 3)]
    assert evaluation_metrics(shards) == {
        "pass@1": pytest.approx(5 / 12), "pass@k": pytest.approx(2 / 3), "num_problems": 3,
        "samples_per_problem": 4, "num_samples": 12, "response_length_mean": pytest.approx(40 / 12),
    }
    with pytest.raises(RuntimeError, match=r"scored problems twice: shards cover \[0, 0, 2\]"):
        evaluation_metrics([EvalShard([0, 2], [4, 1], 4, 30, 3), EvalShard([0], [0], 4, 1, 3)])


def test_shards_deal_every_problem_to_exactly_one_runner():
    dealt = [shard_indices(7, s, 3) for s in range(3)]
    assert dealt == [[0, 3, 6], [1, 4], [2, 5]]
    with pytest.raises(ValueError, match=r"shard=3 must be in \[0, num_shards=3\)"):
        shard_indices(7, 3, 3)


# --- settings ------------------------------------------------------------------------------------
def write_jsonl(path, problems) -> str:
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return str(path)


@pytest.mark.parametrize("config, message", [
    (lambda tmp: embedded_config(**TINY).evaluation(evaluation_duration=5),
     r"evaluation_duration=5 \(evaluation_duration_unit='episodes'\) is not used: RLVR evaluates "
     r"a fixed set of held-out problems.*set eval_num_problems"),
    (lambda tmp: embedded_config(**TINY).environment(env_config={"split": "test"})
     .evaluation(evaluation_interval=1),
     r"eval_split='test': evaluation would score the training problems, split 'test' of "
     r"'arithmetic'. Set eval_split to a held-out split"),
    (lambda tmp: embedded_config(**TINY)
     .environment(env_config={"dataset": write_jsonl(tmp / "train.jsonl", [])})
     .evaluation(evaluation_interval=1),
     r"eval_dataset=None: evaluation would score the training problems, the local file "
     r"'.*train.jsonl' \(a file has no splits\). Set eval_dataset to a file of held-out problems"),
    (lambda tmp: embedded_config(**TINY, temperature=0),
     r"temperature=0 is invalid: it must be a number > 0 .*evaluation_config=\{'temperature': 0\}"),
    (lambda tmp: embedded_config(**TINY, eval_num_samples=0),
     r"eval_num_samples=0 is invalid: it must be an integer >= 1"),
    (lambda tmp: embedded_config(**TINY, eval_dataset=""),
     r"eval_dataset='' is invalid: it must be a non-empty string \(or None\)"),
])
def test_bad_evaluation_settings_are_rejected(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path).validate()


def test_evaluation_config_may_decode_greedily_but_not_below_zero():
    greedy = embedded_config(**TINY).evaluation(evaluation_config={"temperature": 0})
    greedy.validate()
    greedy.get_evaluation_config_object().validate()
    negative = embedded_config(**TINY).evaluation(evaluation_config={"temperature": -1})
    with pytest.raises(ValueError, match=r"temperature=-1 is invalid: it must be a number >= 0"):
        negative.get_evaluation_config_object().validate()


@pytest.mark.parametrize("overrides, message", [
    ({"temprature": 0}, r"evaluation_config has an unknown setting 'temprature'\. Did you mean "
                        r"temperature\?"),
    ({"eval_num_problem": 5}, r"evaluation_config has an unknown setting 'eval_num_problem'\. "
                              r"Did you mean eval_num_problems"),
])
def test_an_unknown_name_in_the_evaluation_config_is_refused_with_the_close_one(
        overrides, message):
    # RLlib sets any name on the evaluation config and nothing reads it: sampled at 1.0, 200
    # problems scored. Refused where it is given, and by validate() (a dict set directly).
    with pytest.raises(ValueError, match=message):
        embedded_config(**TINY).evaluation(evaluation_config=overrides)
    cfg = embedded_config(**TINY)
    cfg.evaluation_config = overrides
    with pytest.raises(ValueError, match=message):
        cfg.validate()


def test_the_evaluation_config_takes_ours_their_aliases_and_rllibs_names():
    cfg = embedded_config(**TINY).evaluation(evaluation_config={
        "temperature": 0, "max_new_tokens": 3, "eval_num_samples": 2, "explore": False,
        "num_workers": 0})
    cfg.validate()
    ev = cfg.get_evaluation_config_object()
    assert (ev.temperature, ev.response_length, ev.eval_num_samples) == (0, 3, 2)


@pytest.mark.parametrize("evaluation, message", [
    ({"evaluation_config": {"temperature": -1}},
     r"^RLVRConfig.evaluation_config\['temperature'\]=-1 is invalid: it must be a number >= 0\.$"),
    ({"evaluation_config": {"eval_num_samples": 0}},
     r"^RLVRConfig.evaluation_config\['eval_num_samples'\]=0 is invalid: it must be an integer "
     r">= 1\.$"),
    ({"evaluation_config": {"kl_penalty": "full"}}, r"kl_penalty'\]='full' is invalid: it is not "
                                                    r"implemented"),
    # a rule between settings, in the evaluation config they make
    ({"evaluation_config": {"tis_lower_bound": 3.0}},
     r"^RLVRConfig.evaluation_config makes an invalid evaluation config: .*tis_lower_bound=3.0 "
     r"exceeds tis_upper_bound"),
    ({"evaluation_interval": -1}, r"^RLVRConfig.evaluation_interval=-1 is invalid: it must be an "
                                  r"integer >= 1 \(evaluate every that many iterations\), or 0 "
                                  r"or None"),
    ({"evaluation_interval": 1.5}, r"evaluation_interval=1.5 is invalid"),
])
def test_evaluation_values_are_checked_with_the_config_not_when_it_is_built(evaluation, message):
    cfg = embedded_config(**TINY).evaluation(**evaluation)
    with pytest.raises(ValueError, match=message) as info:
        cfg.validate()
    assert "\n" not in str(info.value)


# --- end to end ----------------------------------------------------------------------------------
pytestmark_ray = pytest.mark.usefixtures("ray_session")  # tests/conftest.py


def greedy_answers(algo, prompt_indices: list[int]) -> list[str]:
    """What the policy answers greedily to training problems `prompt_indices`, in one batch."""
    runner = algo.env_runner_group.local_env_runner
    env, cfg = runner.env, algo.config
    prompts = [env.reset(options={"prompt_index": i})[1]["prompt_ids"] for i in prompt_indices]
    sampling = SamplingParams(temperature=0, max_tokens=cfg.response_length, seed=0)
    responses = runner.engine.generate(prompts, 1, sampling)
    texts = [env.tokenizer.decode(r[0].token_ids, skip_special_tokens=True) for r in responses]
    answers = [extract_answer(text, "auto") for text in texts]
    assert None not in answers, texts  # the embedded model answers with a number
    return answers


@pytestmark_ray
def test_the_eval_file_is_scored_not_the_training_file(tmp_path):
    # Training file: 8 problems, none answerable. Eval file: its first 5 prompts, 3 answered with
    # what the policy answers greedily and 2 unanswerable. Greedy with 2 samples each: c = 6 of
    # n = 10 responses are correct, so pass@1 = 0.6, and pass@k = 3/5 of problems.
    prompts = [p["prompt"] for p in arithmetic_problems("test")[:8]]
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": p, "answer": UNREACHABLE}
                                                    for p in prompts])
    eval_file = tmp_path / "eval.jsonl"
    algo = (embedded_config(**TINY, eval_dataset=str(eval_file), eval_num_samples=2)
            .environment(env_config={"dataset": train})
            .evaluation(evaluation_config={"temperature": 0})
            .build_algo())
    answers = greedy_answers(algo, list(range(5)))
    write_jsonl(eval_file, [{"prompt": p, "answer": a} for p, a in
                            zip(prompts[:5], [*answers[:3], UNREACHABLE, UNREACHABLE])])
    result = algo.evaluate_accuracy()
    assert result == {"pass@1": pytest.approx(0.6), "pass@k": pytest.approx(0.6),
                      "num_problems": 5, "samples_per_problem": 2, "num_samples": 10,
                      "response_length_mean": result["response_length_mean"]}
    algo.stop()


@pytestmark_ray
def test_evaluation_config_temperature_is_honoured():
    algo = (embedded_config(**TINY)
            .evaluation(evaluation_config={"temperature": 0, "eval_num_samples": 3,
                                           "eval_num_problems": 12})
            .build_algo())
    assert algo.config.temperature == 1.0  # training samples at its own temperature
    # Greedy: the seed changes nothing, and a problem's 3 responses agree (pass@k = pass@1).
    greedy = [algo.evaluate_accuracy(seed=seed) for seed in (1, 2)]
    assert greedy[0] == greedy[1] == algo.evaluate()
    assert greedy[0]["pass@k"] == greedy[0]["pass@1"]
    # Temperature 1 (this call's override): the seed matters, and responses of a problem differ.
    sampled = [algo.evaluate_accuracy(temperature=1.0, seed=seed) for seed in (1, 2)]
    assert sampled[0] != sampled[1]
    assert sampled[0]["pass@k"] > sampled[0]["pass@1"]
    assert sampled[0] == algo.evaluate_accuracy(temperature=1.0, seed=1)  # seeded: repeatable
    with pytest.raises(ValueError, match=r"temperature=-1 is invalid: it must be a number >= 0"):
        algo.evaluate_accuracy(temperature=-1)
    algo.stop()


@pytestmark_ray
def test_evaluation_interval_and_runners_share_out_the_problems():
    algo = (embedded_config(**TINY)
            .evaluation(evaluation_interval=2, evaluation_num_env_runners=2,
                        evaluation_config={"eval_num_problems": 7})
            .build_algo())
    results = [algo.train() for _ in range(4)]
    assert ["evaluation" in r for r in results] == [False, True, False, True]
    last = results[3]["evaluation"]
    assert (last["num_problems"], last["num_samples"]) == (7, 7)
    # The evaluation runners received the learner's weights of iteration 4 before scoring.
    learner = algo.learner_group.local_learner.module["default_policy"].model.state_dict()
    held = algo.eval_env_runner_group.foreach_env_runner(
        lambda r: (r.engine.weight_version, r.module.model.state_dict()["lm_head.weight"]),
        local_env_runner=False)
    assert [version for version, _ in held] == [4, 4]
    assert all(torch.equal(weight, learner["lm_head.weight"]) for _, weight in held)
    # Each runner scored its share: none twice, none missed.
    shards = algo.score_held_out(algo.evaluation_config)
    assert sorted(s.prompt_indices for s in shards) == [[0, 2, 4, 6], [1, 3, 5]]
    # Seeded per shard: the same weights score the same.
    assert evaluation_metrics(shards)["pass@1"] == last["pass@1"]
    algo.stop()


def sampled_after_one_iteration(evaluate: bool) -> list[tuple[list[int], str]]:
    algo = embedded_config(**TINY, seed=3).build_algo()
    algo.train()
    if evaluate:
        algo.evaluate_accuracy(num_problems=4, temperature=1.0)
    episodes = algo.env_runner_group.local_env_runner.sample()
    algo.stop()
    return [(e.get_actions().tolist(), e.get_infos(0)["group_id"]) for e in episodes]


@pytestmark_ray
def test_evaluation_does_not_advance_the_training_sampler():
    assert sampled_after_one_iteration(evaluate=True) == sampled_after_one_iteration(evaluate=False)
