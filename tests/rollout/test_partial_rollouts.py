"""Partial rollouts (rollout/partial_rollouts.py) on the embedded model and the torch engine:
segments add up to the whole response, a response continued after a weight change keeps each
token's version and behaviour log-prob, a call hands out exactly its groups, and the groups in
flight survive a checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaForCausalLM

from rllib_llm.models import EMBEDDED_DIR, encode_prompt, load_tokenizer
from rllib_llm.rollout.engine import SamplingParams
from rllib_llm.rollout.partial_rollouts import InFlight
from rllib_llm.rollout.torch_engine import TorchRolloutEngine

torch.set_num_threads(1)

PROBLEMS = ["12+37=", "5*8=", "41-19=", "7+7=", "63+28=", "9*9=", "30-4=", "88+11="]
LENGTH = 8  # tokens per response; the embedded model's answers end earlier, at varied lengths


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    if not (EMBEDDED_DIR / "config.json").exists():
        pytest.skip("the embedded checkpoint is not built (python scripts/pretrain_embedded.py)")
    return LlamaForCausalLM.from_pretrained(EMBEDDED_DIR).eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    tokenizer = load_tokenizer(EMBEDDED_DIR)
    return [encode_prompt(tokenizer, p) for p in PROBLEMS]


def engine_of(model) -> TorchRolloutEngine:
    return TorchRolloutEngine(model, eos_token_id=1, pad_token_id=0)


class Starter:
    """A GroupStarter walking `prompts` in a cycle from group `first`: (index, ids, group id)."""

    def __init__(self, prompts, first: int = 0):
        self.prompts, self.started = prompts, first

    def __call__(self):
        i, self.started = self.started, self.started + 1
        return i % len(self.prompts), self.prompts[i % len(self.prompts)], f"g{i}"


def teacher_forced(model, prompt, tokens) -> torch.Tensor:
    """log_softmax(logits)[token] of each of `tokens` after `prompt`, one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_greedy_segments_add_up_to_the_whole_response(model, prompts):
    """One token per segment, greedy: every group handed out holds the tokens (and log-probs)
    of generating each response whole, and the groups come out in the order they started."""
    engine = engine_of(model)
    flight = InFlight(max_split=LENGTH, response_length=LENGTH, group_size=2)
    greedy = SamplingParams(temperature=0, max_tokens=LENGTH)
    start = Starter(prompts)
    groups = flight.sample_groups(3, start, engine, greedy) + \
        flight.sample_groups(3, start, engine, greedy)
    assert [g.group_id for g in groups] == [f"g{i}" for i in range(6)]
    whole = engine.generate([prompts[g.prompt_index] for g in groups], 2, greedy)
    for group, expected in zip(groups, whole, strict=True):
        for got, want in zip(group.responses, expected, strict=True):
            assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
            torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs),
                                       atol=1e-5, rtol=0)
            assert got.versions == [0] * len(got.token_ids)
    # Several lengths, so groups finished at different rounds and others were in flight.
    assert len({len(r.token_ids) for g in groups for r in g.responses}) > 1


def test_a_response_continued_after_a_weight_change_keeps_each_tokens_version_and_logprob(
        model, prompts):
    """The known lag: version 1's weights arrive between two calls. Every handed-out token's
    behaviour log-prob is that of the weights its version names, and responses begun under
    version 0 and finished under version 1 are among them."""
    policy = copy.deepcopy(model)
    engine = engine_of(policy)
    weights = {0: copy.deepcopy(model)}
    flight = InFlight(max_split=LENGTH, response_length=LENGTH, group_size=4)
    start = Starter(prompts)
    handed = []
    for seed in range(10):  # until a call ends with a response half-way
        handed += flight.sample_groups(2, start, engine, SamplingParams(max_tokens=LENGTH,
                                                                        seed=seed))
        if flight.groups:
            break
    assert any(r.token_ids and not r.done for g in flight.groups for r in g.responses)
    torch.manual_seed(0)
    changed = {k: v + 0.05 * torch.randn_like(v) for k, v in policy.state_dict().items()}
    engine.load_weights(changed, version=1)
    weights[1] = copy.deepcopy(policy)
    handed += flight.sample_groups(2, start, engine, SamplingParams(max_tokens=LENGTH, seed=99))
    mixed = 0
    for group in handed:
        prompt = prompts[group.prompt_index]
        for r in group.responses:
            assert r.versions == sorted(r.versions) and set(r.versions) <= {0, 1}
            mixed += len(set(r.versions)) == 2
            logp = torch.tensor(r.logprobs)
            for version, other in ((0, 1), (1, 0)):
                at = torch.tensor(r.versions) == version
                if at.any():
                    torch.testing.assert_close(
                        logp[at], teacher_forced(weights[version], prompt, r.token_ids)[at],
                        atol=1e-5, rtol=0)
                    assert (logp[at] - teacher_forced(weights[other], prompt, r.token_ids)[at]
                            ).abs().max() > 1e-3  # the other weights would not give them
    assert mixed > 0


def test_a_call_hands_out_exactly_its_groups_and_keeps_the_rest(model, prompts):
    """Finished groups beyond a call's count wait, finished, and a later call takes them first
    without generating; no group is handed out twice or lost."""
    engine = engine_of(model)
    flight = InFlight(max_split=4, response_length=LENGTH, group_size=4)
    start = Starter(prompts)
    seen = []
    for call in range(20):
        groups = flight.sample_groups(3, start, engine, SamplingParams(max_tokens=LENGTH,
                                                                       seed=call))
        assert len(groups) == 3 and all(g.done for g in groups)
        seen += [g.group_id for g in groups]
        if flight.finished:
            break
    assert flight.finished, "no call finished more groups than it needed in 20 calls"
    waiting = [g.group_id for g in flight.finished]
    groups = flight.sample_groups(len(waiting), start, engine, SamplingParams(max_tokens=LENGTH))
    assert flight.rounds == 0 and [g.group_id for g in groups] == waiting
    seen += waiting
    in_flight = [g.group_id for g in flight.groups]
    assert sorted(seen + in_flight, key=lambda s: int(s[1:])) == \
        [f"g{i}" for i in range(start.started)]


def test_the_groups_in_flight_survive_a_checkpoint(model, prompts):
    """A runner restored from get_state continues the same responses to the same ends."""
    engine = engine_of(model)
    flight = InFlight(max_split=LENGTH, response_length=LENGTH, group_size=4)
    start = Starter(prompts)
    for seed in range(10):  # until a call ends with responses half-way
        flight.sample_groups(2, start, engine, SamplingParams(max_tokens=LENGTH, seed=seed))
        if flight.groups:
            break
    assert flight.groups
    restored = InFlight(max_split=LENGTH, response_length=LENGTH, group_size=4)
    restored.set_state(copy.deepcopy(flight.get_state()))
    assert restored.groups == flight.groups and restored.finished == flight.finished
    more = SamplingParams(max_tokens=LENGTH, seed=2)
    again = Starter(prompts, first=start.started)  # the env's data order, restored alike
    expected = flight.sample_groups(2, start, engine, more)
    assert restored.sample_groups(2, again, engine, more) == expected


# --- in the env runner -------------------------------------------------------------------------
def partial_config(**training):
    from rllib_llm.recipes.embedded import embedded_config

    return embedded_config("topr", seed=0, rollout_batch_size=4, num_return_sequences_in_group=4,
                           async_generation_ratio=1, partial_rollout_max_split=3,
                           **training).env_runners(num_env_runners=1)


@pytest.mark.usefixtures("model")  # (skips without the embedded checkpoint)
def test_the_runner_hands_out_whole_groups_and_a_restored_runner_goes_on_alike():
    """Each sample() is 4 whole groups of 4; a runner restored from get_state (groups in flight
    included) samples what the original samples next, token for token."""
    from rllib_llm.exchange.columns import ACTION_LOGP, GROUP_ID, WEIGHT_VERSION
    from rllib_llm.rollout.env_runner import RLVREnvRunner
    from rllib_llm.rollout.sample_metrics import PARTIAL_GROUPS_IN_FLIGHT

    config = partial_config()
    runner = RLVREnvRunner(config=config)
    for _ in range(10):  # until a call leaves groups in flight
        episodes = runner.sample()
        groups = [e.get_infos(0)[GROUP_ID] for e in episodes]
        assert len(episodes) == 16 and all(groups.count(g) == 4 for g in groups)
        in_flight = runner.metrics.peek(PARTIAL_GROUPS_IN_FLIGHT)  # groups kept for the next call
        if in_flight:
            break
    assert in_flight > 0
    restored = RLVREnvRunner(config=config)
    restored.set_state(runner.get_state())

    def tokens(episodes):
        return [(e.get_infos(0)[GROUP_ID], e.get_actions().tolist(),
                 e.get_extra_model_outputs(ACTION_LOGP).tolist(),
                 e.get_extra_model_outputs(WEIGHT_VERSION).tolist()) for e in episodes]
    assert tokens(restored.sample()) == tokens(runner.sample())
    runner.stop()
    restored.stop()


def test_a_multi_turn_environment_is_refused_when_the_runner_is_built():
    from rllib_llm.recipes.embedded import embedded_tool_config
    from rllib_llm.rollout.env_runner import RLVREnvRunner

    config = embedded_tool_config("topr", async_generation_ratio=1,
                                  partial_rollout_max_split=2).env_runners(num_env_runners=1)
    with pytest.raises(ValueError, match="with the multi-turn environment 'math_tool'"):
        RLVREnvRunner(config=config)
