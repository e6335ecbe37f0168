"""Reward models and LLM judges (reward_model_name_or_path): the scorer on real Hugging Face
models (a judge's score computed by hand from the tiny causal LM's logits; batches score what
rows alone do), the reward workers as Ray actors with the resources asked for, the combined
reward on sampled episodes, a worker killed mid-batch restarted and its share scored, and the
errors: a worker dead for good (one line), a non-finite score, settings that would do nothing,
a judge whose tokenizer lacks one-token answers, a GPU the cluster lacks."""

from __future__ import annotations

import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
import torch

from rllib_llm.algorithm.config import RLVRConfig
from rllib_llm.algorithm.reward_workers import (
    MODEL_SCORE_MEAN,
    REWARD_MEAN,
    REWARD_MODEL_RESULTS,
    TIME_S,
    VERIFIER_SCORE_MEAN,
    RewardWorkers,
)
from rllib_llm.models import EMBEDDED_DIR, load_model, load_tokenizer
from rllib_llm.models.reward_model import RewardScorer
from rllib_llm.recipes.embedded import embedded_config

SHAPE = dict(rollout_batch_size=4, num_return_sequences_in_group=2, response_length=4)
PROMPTS = ["12+7=", "3-1=", "45+45=", "9+9="]
RESPONSES = ["19", "5", "90", "1818"]


def make_classifier(path, *, nan: bool = False) -> str:
    """A 2-label classifier of the embedded architecture (body from `embedded`, head seeded)."""
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(0)
    model = LlamaForSequenceClassification.from_pretrained(EMBEDDED_DIR, num_labels=2,
                                                           pad_token_id=0)
    if nan:
        with torch.no_grad():
            model.score.weight.fill_(math.nan)
    model.save_pretrained(path)
    load_tokenizer("embedded").save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> str:
    return make_classifier(tmp_path_factory.mktemp("classifier"))


def test_a_judges_score_is_p_yes_over_p_yes_plus_no_of_its_next_token():
    # The embedded causal LM as a judge of "{prompt}{response}" with answer tokens "1" / "0":
    # by hand, the full softmax of its logits after the text, renormalised over the two tokens.
    judge = RewardScorer("embedded", "judge", judge_template="{prompt}{response} ",
                         judge_tokens=("1", "0"))
    model, tokenizer = load_model("embedded"), load_tokenizer("embedded")
    want = []
    for prompt, response in zip(PROMPTS, RESPONSES):
        ids = torch.tensor([tokenizer(f"{prompt}{response} ")["input_ids"]])
        with torch.no_grad():
            p = torch.softmax(model(input_ids=ids).logits[0, -1], -1)
        yes, no = tokenizer.convert_tokens_to_ids(["1", "0"])
        want.append(float(p[yes] / (p[yes] + p[no])))
    got = judge.score(PROMPTS, RESPONSES)
    assert got == pytest.approx(want, rel=1e-5)
    assert len(set(round(g, 6) for g in got)) == len(got)  # really per row, not a constant


@pytest.mark.parametrize("kind", ["classifier", "judge"])
def test_a_batch_scores_what_each_row_alone_scores(kind, classifier):
    name = classifier if kind == "classifier" else "embedded"
    options = {} if kind == "classifier" else {"judge_template": "{prompt}{response}?",
                                               "judge_tokens": ("y", "n")}
    batched = RewardScorer(name, kind, batch_size=4, **options).score(PROMPTS, RESPONSES)
    alone = RewardScorer(name, kind, batch_size=1, **options).score(PROMPTS, RESPONSES)
    assert batched == pytest.approx(alone, abs=1e-5)
    if kind == "classifier":
        assert all(0.0 <= s <= 1.0 for s in batched)  # p(label 1)


def test_a_judge_whose_tokenizer_lacks_one_token_answers_is_refused():
    # The char tokenizer spells " yes" in four tokens: no next-token probability of it exists.
    config = embedded_config("ppo", reward_model_name_or_path="embedded",
                             reward_model_type="judge")
    with pytest.raises(ValueError, match=r"encodes ' yes' as 4 tokens.*reward_judge_tokens"):
        config.validate()
    with pytest.raises(ValueError, match="encodes ' yes' as 4 tokens"):
        RewardScorer("embedded", "judge")


@pytest.mark.parametrize("settings, match", [
    ({"reward_weights": [0.0, 1.0]}, "reward_model_name_or_path=None"),
    ({"num_reward_workers": 2}, "reward_model_name_or_path=None"),
    ({"reward_model_name_or_path": "embedded_reward", "reward_judge_tokens": ["y", "n"]},
     "reads no prompt template"),
    ({"reward_model_name_or_path": "embedded_reward", "reward_weights": [0, 0]},
     "reward_weights=.* must be two numbers >= 0, not both 0"),
    ({"reward_model_name_or_path": "embedded_reward", "reward_weights": [1.0]},
     "reward_weights"),
    ({"reward_model_name_or_path": "embedded_reward", "reward_model_type": "critic"},
     "reward_model_type"),
    ({"reward_model_name_or_path": "embedded", "reward_model_type": "judge",
      "reward_judge_tokens": ["1", "0"], "reward_judge_template": "{question}"},
     "reward_judge_template"),
    ({"reward_model_name_or_path": "./no/such/dir"}, "reward_model_name_or_path"),
])
def test_bad_reward_model_settings_are_refused_naming_them(settings, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        embedded_config("ppo", **settings).validate()


@pytest.mark.usefixtures("ray_session_at_normal_priority")
def test_reward_workers_are_ray_actors_with_the_resources_asked_for(classifier):
    config = embedded_config("ppo", reward_model_name_or_path=classifier, num_reward_workers=2,
                             num_cpus_per_reward_worker=0.5, reward_model_batch_size=2)
    config.validate()
    workers = RewardWorkers(config, load_tokenizer("embedded"))
    try:
        assert all(isinstance(w, ray.actor.ActorHandle) for w in workers.workers)
        assert ray.get([w.resources.remote() for w in workers.workers]) == [{"CPU": 0.5}] * 2
        # Shared out between the two workers, the scores are the model's own.
        want = RewardScorer(classifier).score(PROMPTS + PROMPTS[:1], RESPONSES + RESPONSES[:1])
        assert workers.score(PROMPTS + PROMPTS[:1], RESPONSES + RESPONSES[:1]) == \
            pytest.approx(want, abs=1e-5)
        # A worker that dies for good (Ray told not to restart it) is one line naming it, and
        # nothing is scored.
        ray.kill(workers.workers[1])
        with pytest.raises(RuntimeError, match="reward worker 1 failed .* no episode was "
                                               "changed or trained on") as error:
            workers.score(PROMPTS, RESPONSES)
        assert "\n" not in str(error.value)
    finally:
        workers.stop()


@pytest.mark.usefixtures("ray_session_at_normal_priority")
def test_a_reward_worker_killed_mid_batch_is_restarted_and_the_batch_scored(classifier):
    """Its process killed (as by the kernel's OOM killer) while it scores: Ray starts it again
    and runs the call again, and the batch gets the scores an unbroken call gives."""
    config = embedded_config("ppo", reward_model_name_or_path=classifier, num_reward_workers=1,
                             reward_model_batch_size=1)
    config.validate()
    workers = RewardWorkers(config, load_tokenizer("embedded"))
    try:
        # A batch measured to take >= 1 s on this machine now (a forward pass took 2.5 ms on
        # idle cores, 200 ms on loaded ones), then twice that, killed a quarter of the way in:
        # one timing of a small batch misjudged it when the load changed.
        want = workers.score(PROMPTS, RESPONSES)  # (warm)
        repeats = 1
        while True:
            start = time.perf_counter()
            workers.score(PROMPTS * repeats, RESPONSES * repeats)
            if time.perf_counter() - start >= 1.0:
                break
            repeats *= 2
        repeats *= 2
        prompts, responses, want = PROMPTS * repeats, RESPONSES * repeats, want * repeats
        pid = ray.get(workers.workers[0].__ray_call__.remote(lambda worker: os.getpid()))

        def cpu_s():  # the worker's user + system CPU seconds (/proc/PID/stat fields 14, 15)
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        idle = cpu_s()
        with ThreadPoolExecutor(1) as pool:
            scoring = pool.submit(workers.score, prompts, responses)
            # Killed once it is scoring (its process has spent 0.2 s of CPU on the call, which
            # takes over 2 s), seen by a bounded poll: after a fixed sleep, a call not yet
            # started under load passed as "killed mid-batch".
            deadline = time.monotonic() + 120
            while cpu_s() - idle < 0.2 and not scoring.done() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert not scoring.done(), "the batch was scored before the worker could be killed"
            assert cpu_s() - idle >= 0.2, "the worker did not start scoring within 120 s"
            os.kill(pid, signal.SIGKILL)
            assert scoring.result(timeout=600) == pytest.approx(want, abs=1e-5)
        assert ray.get(workers.workers[0].__ray_call__.remote(lambda w: os.getpid())) != pid
    finally:
        workers.stop()


@pytest.mark.usefixtures("ray_session_at_normal_priority")
def test_a_non_finite_score_is_a_clear_error(tmp_path):
    config = embedded_config("ppo", reward_model_name_or_path=make_classifier(tmp_path, nan=True))
    config.validate()
    workers = RewardWorkers(config, load_tokenizer("embedded"))
    try:
        with pytest.raises(RuntimeError, match=r"reward worker 0 scored response 0 of this "
                                               r"batch nan \(not finite\): prompt '12\+7='"):
            workers.score(PROMPTS, RESPONSES)
    finally:
        workers.stop()


@pytest.mark.usefixtures("ray_session_at_normal_priority")
def test_a_gpu_the_cluster_lacks_is_refused_at_build(classifier):
    if ray.cluster_resources().get("GPU", 0):
        pytest.skip("needs a cluster without GPUs")
    config = embedded_config("ppo", **SHAPE, reward_model_name_or_path=classifier,
                             num_gpus_per_reward_worker=1)
    with pytest.raises(ValueError, match=r"num_gpus_per_reward_worker=1 asks Ray for 1 GPUs, "
                                         r"and the cluster has 0"):
        config.build_algo()


@pytest.mark.usefixtures("ray_session_at_normal_priority")
def test_the_combined_reward_is_what_training_sees(classifier):
    algo = embedded_config("ppo", **SHAPE, reward_model_name_or_path=classifier,
                           reward_weights=[0.5, 2.0]).build_algo()
    try:
        runner = algo.env_runner_group.local_env_runner
        episodes = runner.sample()
        verifier = [float(e.get_rewards()[-1]) for e in episodes]
        prompts, responses = algo.reward_workers.texts(episodes)
        assert prompts[0] == episodes[0].get_infos()[0]["prompt"]
        model = RewardScorer(classifier).score(prompts, responses)
        metrics = algo.reward_workers.apply(episodes)
        got = [float(e.get_rewards()[-1]) for e in episodes]
        assert got == pytest.approx([0.5 * v + 2.0 * m for v, m in zip(verifier, model)],
                                    abs=1e-5)
        assert metrics[MODEL_SCORE_MEAN] == pytest.approx(sum(model) / len(model), abs=1e-6)
        assert metrics[VERIFIER_SCORE_MEAN] == pytest.approx(sum(verifier) / len(verifier))
        # A training iteration logs the scores apart and the workers' time.
        result = algo.train()[REWARD_MODEL_RESULTS]
        assert 0.0 <= result[MODEL_SCORE_MEAN] <= 1.0
        assert 0.0 <= result[VERIFIER_SCORE_MEAN] <= 1.0
        assert result[REWARD_MEAN] == pytest.approx(
            0.5 * result[VERIFIER_SCORE_MEAN] + 2.0 * result[MODEL_SCORE_MEAN], abs=1e-5)
        assert result[TIME_S] > 0
    finally:
        algo.stop()


def test_the_settings_appear_in_the_reference():
    from rllib_llm.algorithm.fields import reference_markdown

    text = reference_markdown()
    for name in ("reward_model_name_or_path", "reward_weights", "num_reward_workers",
                 "num_gpus_per_reward_worker", "reward_judge_template"):
        assert f"`{name}`" in text
    assert RLVRConfig().reward_weights == [1.0, 1.0]
