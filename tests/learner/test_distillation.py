"""On-policy distillation on the learner: the teacher is loaded frozen, on learners only and
never checkpointed; its log-probs are those of its logits / temperature; the connector turns them
into the documented advantage (hand values); and settings that would not do what they say are
refused, in one line."""

from __future__ import annotations

import json
import math
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_llm.exchange.columns import ACTION_MASK, ADVANTAGES
from rllib_llm.learner.connector import DISTILLATION_REVERSE_KL, PackAndComputeAdvantages
from rllib_llm.learner.module import RLVRModule, response_logits
from rllib_llm.models import EMBEDDED_DIR, load_model
from rllib_llm.recipes.embedded import embedded_config

SPACES = dict(observation_space=gym.spaces.Discrete(2), action_space=gym.spaces.Discrete(2))
TEACHER = "embedded_teacher"


# --- the module ---------------------------------------------------------------------------------
def module(inference_only: bool = False, **overrides) -> RLVRModule:
    spec = embedded_config("ppo", teacher_model_name_or_path=TEACHER,
                           **overrides).get_default_rl_module_spec()
    return RLVRModule(**SPACES, model_config=spec.model_config, inference_only=inference_only)


def packed_batch(vocab: int) -> dict[str, torch.Tensor]:
    """3 rows of a 4-token prompt (one left-padded) and a 3-token response."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (3, 7), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :1] = 0
    return {"input_ids": ids * mask, "attention_mask": mask, "response_ids": ids[:, -3:]}


def test_the_teacher_is_frozen_on_learners_and_absent_from_env_runners_and_checkpoints():
    learner = module()
    assert learner.has_teacher and not learner.has_reference  # use_kl_loss=False here
    assert not any(p.requires_grad for p in learner.teacher_model.parameters())
    assert all(p.requires_grad for p in learner.policy_parameters())
    learner.train()
    assert learner.model.training and not learner.teacher_model.training
    state = learner.get_state()
    assert state and not any(k.startswith("teacher_model.") for k in state)
    learner.set_state(state)  # a checkpoint without the teacher restores into a learner with one
    runner = module(inference_only=True)
    assert not runner.has_teacher
    runner.set_state(learner.get_state(inference_only=True))


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_teacher_log_probs_are_of_its_logits_over_the_temperature(temperature):
    learner = module(temperature=temperature)
    teacher = load_model(TEACHER)
    batch = packed_batch(teacher.config.vocab_size)
    with torch.no_grad():
        logits = response_logits(teacher, batch["input_ids"], batch["attention_mask"], 3)
    want = torch.log_softmax(logits / temperature, dim=-1).gather(
        -1, batch["response_ids"][..., None])[..., 0]
    torch.testing.assert_close(learner.score_teacher_tokens(batch), want, rtol=1e-5, atol=1e-5)
    # ... and not the student's: the teacher is another model.
    student = learner.score_tokens(batch, reference=False)
    assert (student - want).abs().max() > 1e-2


# --- the connector ------------------------------------------------------------------------------
LENGTHS_AND_REWARDS = [(2, 1.0), (3, 0.0), (3, 1.0), (1, 0.0)]  # one group of four
SAMPLER_LOGP = -0.5  # every token's log-prob under the student that sampled it
# The teacher's log-prob of each token (row, position).
TEACHER_LOGP = torch.tensor([[-0.1, -2.0, 0.0], [-0.5, -0.5, -1.5], [-1.0, -0.2, -0.3],
                             [-3.0, 0.0, 0.0]])


class TeacherOnlyModule(torch.nn.Module):
    """The connector's view of a module that distils: a teacher whose log-probs the test picks
    (the module's own scoring is tested above)."""

    has_reference = False
    has_critic = False
    has_teacher = True

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def unwrapped(self):
        return self

    def score_teacher_tokens(self, rows):
        return TEACHER_LOGP[:, : rows[ACTION_MASK].shape[1]]


def episode(length: int, reward: float) -> SingleAgentEpisode:
    space = gym.spaces.Discrete(50)
    actions = list(range(10, 10 + length))
    infos = [{"prompt_ids": [1, 2], "group_id": "g"}] + [{} for _ in actions]
    return SingleAgentEpisode(
        observations=[2, *actions], infos=infos, actions=actions,
        rewards=[0.0] * (length - 1) + [reward], terminated=True, truncated=False,
        extra_model_outputs={"action_logp": np.full(length, SAMPLER_LOGP, np.float32)},
        observation_space=space, action_space=space, len_lookback_buffer=0,
    ).to_numpy()


class Metrics:
    def __init__(self):
        self.values: dict[str, float] = {}

    def log_value(self, key, value, **kwargs):
        self.values[key[-1] if isinstance(key, tuple) else key] = value


def connect(metrics=None, **overrides) -> dict[str, torch.Tensor]:
    settings = dict(rollout_batch_size=1, num_return_sequences_in_group=4, response_length=3,
                    whiten_advantages=False, advantage_clip=None,
                    teacher_model_name_or_path=TEACHER)
    cfg = embedded_config("ppo", **{**settings, **overrides})
    connector = PackAndComputeAdvantages(config=cfg, pad_token_id=0)
    out = connector(rl_module={DEFAULT_MODULE_ID: TeacherOnlyModule()}, batch={},
                    episodes=[episode(*row) for row in LENGTHS_AND_REWARDS], metrics=metrics)
    return out[DEFAULT_MODULE_ID]


def test_the_advantage_is_the_verifiers_minus_coef_times_the_reverse_kl_by_hand():
    metrics = Metrics()
    out = connect(metrics, distillation_coef=0.5, verifier_advantage_coef=2.0)
    mask = out[ACTION_MASK]
    assert mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]]
    # GRPO on rewards 1, 0, 1, 0: mean 0.5, std (unbiased) 1/sqrt(3): +-sqrt(3)/2 (up to 1e-6).
    grpo = torch.tensor([1.0, -1.0, 1.0, -1.0]) * math.sqrt(3) / 2
    reverse_kl = (SAMPLER_LOGP - TEACHER_LOGP) * mask  # e.g. row 0: -0.4, 1.5
    want = (2.0 * grpo[:, None] - 0.5 * reverse_kl) * mask
    torch.testing.assert_close(out[ADVANTAGES], want, rtol=1e-5, atol=1e-5)
    # Logged: the mean over the 9 response tokens of log pi_student - log pi_teacher.
    mean = (-0.4 + 1.5 + 0.0 + 0.0 + 1.0 + 0.5 - 0.3 - 0.2 + 2.5) / 9
    assert metrics.values[DISTILLATION_REVERSE_KL] == pytest.approx(mean, abs=1e-6)


def test_distillation_alone_ignores_the_verifier_and_whitening():
    out = connect(verifier_advantage_coef=0.0, whiten_advantages=True, advantage_clip=0.1)
    want = -(SAMPLER_LOGP - TEACHER_LOGP) * out[ACTION_MASK]  # nats per token, unclipped
    torch.testing.assert_close(out[ADVANTAGES], want, rtol=1e-6, atol=1e-6)


# --- settings -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    """The embedded checkpoint with two tokens' ids swapped in its tokenizer."""
    path = tmp_path_factory.mktemp("other") / "model"
    shutil.copytree(EMBEDDED_DIR, path)
    tokenizer = json.loads((path / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    return str(path)


@pytest.mark.parametrize("training,message", [
    (dict(distillation_coef=0.5), "distillation_coef=0.5 weigh on-policy distillation.*no "
                                  "teacher"),
    (dict(verifier_advantage_coef=0.0), "verifier_advantage_coef=0.0 weigh .*no teacher"),
    (dict(teacher_model_name_or_path=TEACHER, distillation_coef=0.0),
     r"distillation_coef=0.0 is invalid: it must be a number > 0"),
    (dict(teacher_model_name_or_path=TEACHER, verifier_advantage_coef=-1.0),
     r"verifier_advantage_coef=-1.0 is invalid"),
    (dict(teacher_model_name_or_path=TEACHER, adv_estimator="gae"),
     "never see it. Use a critic-free estimator"),
    (dict(teacher_model_name_or_path=TEACHER, dynamic_sampling=True,
          verifier_advantage_coef=0.0), "distillation alone gives those rewards no weight"),
    (dict(teacher_model_name_or_path="./no/such/teacher"),
     "teacher_model_name_or_path='./no/such/teacher' does not exist"),
])
def test_bad_settings_are_refused_in_one_line(training, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message) as err:
        embedded_config("topr", **training).validate()
    assert "\n" not in str(err.value)


def test_a_teacher_on_deepspeed_learners_is_refused():
    cfg = embedded_config("topr", teacher_model_name_or_path=TEACHER,
                          learner_strategy="deepspeed").learners(num_learners=1)
    with pytest.raises(ValueError, match="not supported .* on DeepSpeed learners") as err:
        cfg.validate()
    assert "\n" not in str(err.value)


def test_a_teacher_of_another_tokenizer_is_refused(other_tokenizer):
    with pytest.raises(ValueError, match="its tokenizer is not the student's.*2 tokens have "
                                         "other ids") as err:
        embedded_config("topr", teacher_model_name_or_path=other_tokenizer).validate()
    assert "\n" not in str(err.value)


def test_a_teacher_of_the_same_tokenizer_validates():
    from rllib_llm.models import load_tokenizer

    cfg = embedded_config("topr", teacher_model_name_or_path=TEACHER, verifier_advantage_coef=0.0,
                          distillation_coef=0.5)
    # The premise: the teacher maps every token to the student's id (the rule compares these).
    assert load_tokenizer(TEACHER).get_vocab() == load_tokenizer(cfg.model_name_or_path).get_vocab()
    cfg.validate()  # raises, naming the rule, on a teacher it refuses
    assert (cfg.teacher_model_name_or_path, cfg.distillation_coef,
            cfg.verifier_advantage_coef) == (TEACHER, 0.5, 0.0)


# --- a run --------------------------------------------------------------------------------------
TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)


@pytest.mark.usefixtures("ray_session")  # tests/conftest.py
def test_a_distilling_run_logs_the_reverse_kl_and_checkpoints_without_the_teacher(tmp_path):
    from rllib_llm.outputs.checkpoints import POLICY_MODULE, _read_pickle

    config = embedded_config("topr", teacher_model_name_or_path=TEACHER, seed=0, **TINY)
    algo = config.build_algo()
    learned = algo.train()["learners"]["default_policy"]
    assert math.isfinite(learned[DISTILLATION_REVERSE_KL])
    algo.save_to_path(str(tmp_path))
    state = _read_pickle(tmp_path / POLICY_MODULE / "module_state.pkl")
    assert any(k.startswith("model.") for k in state)
    assert not any(k.startswith("teacher_model.") for k in state)
    trained = {k: v.clone() for k, v in
               algo.learner_group.local_learner.module["default_policy"].model.state_dict().items()}
    algo.stop()
    restored = config.build_algo()
    restored.restore_from_path(str(tmp_path))
    module = restored.learner_group.local_learner.module["default_policy"]
    for k, v in module.model.state_dict().items():
        assert torch.equal(v, trained[k]), k
    # The teacher came from teacher_model_name_or_path again, untouched by the restore.
    shipped = load_model(TEACHER).state_dict()
    for k, v in module.teacher_model.state_dict().items():
        assert torch.equal(v, shipped[k]), k
    restored.train()
    restored.stop()
