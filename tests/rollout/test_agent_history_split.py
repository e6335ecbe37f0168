"""An agent that rewrites its history (issue 48, item 3): its calls split into several sequences,
and every one is trained, as a row of its own with the episode's reward, while the episode counts
once in its group's baseline and in the mini-batches that keep groups whole."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest
import torch

openai = pytest.importorskip("openai")

from rllib_llm.envs.openai_agent_env import OpenAIAgentEnv  # noqa: E402

from rllib_llm import core  # noqa: E402
from rllib_llm.core.advantages import GROUP_STD_EPS  # noqa: E402
from rllib_llm.exchange.columns import (  # noqa: E402
    ACTION_MASK,
    ATTENTION_MASK,
    EPISODE_INDEX,
    INPUT_IDS,
    OLD_LOGP,
    SCORES,
)
from rllib_llm.learner import micro_batches  # noqa: E402
from rllib_llm.learner.data_parallel import rank_rows  # noqa: E402
from rllib_llm.learner.optimizer_steps import minibatch_rows, row_groups  # noqa: E402
from rllib_llm.learner.packing import pack_episodes  # noqa: E402
from rllib_llm.models import load_model, load_tokenizer  # noqa: E402
from rllib_llm.rollout.agent_rollouts import (  # noqa: E402
    PREFIX_BREAKS,
    make_gateway,
    sample_agent_episodes,
)
from rllib_llm.rollout.gateway.trajectories import stitch  # noqa: E402
from rllib_llm.rollout.torch_engine import TorchRolloutEngine  # noqa: E402

torch.set_num_threads(1)
ENV = {"model": "embedded_tool", "dataset": "arithmetic", "dataset_kwargs": {"ops": "*"},
       "response_length": 64, "prompt_length": 16}
_STARTED: collections.Counter = collections.Counter()  # problem index -> episodes started
_LOCK = threading.Lock()


def rewriting_agent(client, problem):
    """Of each pair of episodes of a problem (a group of 2), the first to start asks, goes on
    from the reply (one sequence), then twice starts over from a rewritten note (two more
    sequences) and earns 1; the other only asks and goes on, and earns 0. Replies go back as the
    client gives them, so the gateway reuses their sampled ids."""
    with _LOCK:
        rewrites = _STARTED[problem["index"]] % 2 == 0
        _STARTED[problem["index"]] += 1

    def ask(messages):
        return client.chat.completions.create(model=problem["model"], messages=messages,
                                              max_tokens=6).choices[0].message

    messages = [{"role": "user", "content": problem["prompt"]}]
    reply = ask(messages)
    ask([*messages, reply.model_dump(exclude_none=True), {"role": "user", "content": "go on"}])
    if rewrites:
        for note in ("summary", "again"):
            ask([{"role": "user", "content": f"{note}: {problem['prompt']}"}])
    return 1.0 if rewrites else 0.0


class SpyEngine:
    """The real engine, keeping every (prompt, sampled ids, log-probs) it answered."""

    def __init__(self, engine):
        self.engine, self.sampled = engine, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    def generate(self, prompt_ids, n, sampling):
        out = self.engine.generate(prompt_ids, n, sampling)
        self.sampled += [(list(p), list(r.token_ids), list(r.logprobs))
                         for p, group in zip(prompt_ids, out) for r in group]
        return out


@pytest.fixture(scope="module")
def split_batch():
    """One prompt, a group of 2 agent episodes, one of which rewrote its history twice."""
    tok = load_tokenizer("embedded_tool")
    engine = SpyEngine(TorchRolloutEngine(load_model("embedded_tool"), eos_token_id=tok.eos_token_id,
                                          pad_token_id=tok.pad_token_id))
    env = OpenAIAgentEnv({**ENV, "agent": rewriting_agent})
    gateway = make_gateway(env, engine, temperature=1.0, top_p=1.0, response_length=64)
    records = []
    close = gateway.close_episode
    gateway.close_episode = lambda client: records.append(close(client)) or records[-1]
    try:
        episodes, counts = sample_agent_episodes(env, gateway, [env.reset()[1]], 2,
                                                 group_ids=["g"])
    finally:
        gateway.stop()
        env.close()
    return episodes, counts, records, engine.sampled, tok.pad_token_id


def test_every_sequence_of_a_rewritten_history_is_trained_with_the_episodes_reward(split_batch):
    episodes, counts, records, sampled, pad = split_batch
    assert len(episodes) == 2  # one RLlib episode per agent episode: the group stays whole
    breaks = [e.get_infos(-1)[PREFIX_BREAKS] for e in episodes]
    assert sorted(breaks) == [0, 2] and counts.prefix_breaks == 2
    batch = pack_episodes(episodes, 2, pad)
    # Rows follow the episodes in order: 3 sequences of the one, 1 of the other.
    rows_of = [b + 1 for b in breaks]
    assert batch[EPISODE_INDEX].tolist() == [i for i, n in enumerate(rows_of) for _ in range(n)]
    record_of = {id(e): r for e, r in zip(episodes, records)}  # (episodes keep the runs' order)
    row = 0
    for episode in episodes:
        record = record_of[id(episode)]
        sequences, prefix_breaks = stitch(record.calls)
        assert prefix_breaks == episode.get_infos(-1)[PREFIX_BREAKS]
        for sequence in sequences:
            # The row is the sequence, token for token: its prompt and every call's tokens,
            # the model's sampled ids under mask 1 with the engine's log-probs.
            real = batch[ATTENTION_MASK][row].bool()
            tokens = batch[INPUT_IDS][row][real].tolist()
            assert tokens == sequence.tokens()
            p = batch[INPUT_IDS].shape[1] - batch[ACTION_MASK].shape[1]
            mask = batch[ACTION_MASK][row]
            width = len(sequence.tokens()) - len(sequence.prompt_ids)
            assert mask[:width].tolist() == sequence.action_mask()[len(sequence.prompt_ids):]
            assert mask[width:].sum() == 0
            acted = mask.bool()
            assert batch[INPUT_IDS][row, p:][acted].tolist() == sequence.actions
            assert batch[OLD_LOGP][row][acted].tolist() == pytest.approx(sequence.logprobs)
            assert batch[SCORES][row] == episode.get_return()  # the episode's reward
            row += 1
        for call in record.calls:  # what the calls recorded is what the engine answered
            assert (list(call.prompt_ids), list(call.completion_ids),
                    pytest.approx(list(call.logprobs))) in sampled
    assert row == len(batch[SCORES]) == 4
    # Every sampled token is trained exactly once.
    assert int(batch[ACTION_MASK].sum()) == sum(len(c.completion_ids) for r in records
                                                for c in r.calls)


def test_the_split_episode_counts_once_in_its_groups_baseline(split_batch):
    """GRPO over the group's two episodes (rewards 1 and 0), not over its four rows: each
    episode's rows get (r - 0.5) / std([1, 0]) = ±0.5 / sqrt(0.5) on every action token."""
    episodes, _, _, _, pad = split_batch
    batch = pack_episodes(episodes, 2, pad)
    mask = batch[ACTION_MASK]
    grpo = core.AdvantageSettings("grpo", group_size=2, whiten_advantages=False,
                                  advantage_clip=None)
    advantages, _, _ = core.compute_advantages(
        core.AdvantageInputs(batch[SCORES], mask, episode_index=batch[EPISODE_INDEX]), grpo)
    expected = torch.where(batch[SCORES] == 1.0, 0.5, -0.5) / (0.5 ** 0.5 + GROUP_STD_EPS)
    assert torch.allclose(advantages, expected[:, None] * mask, atol=1e-6)
    # Read as four episodes (rows in pairs), the same batch would get other advantages.
    per_row, _, _ = core.compute_advantages(core.AdvantageInputs(batch[SCORES], mask), grpo)
    assert not torch.allclose(per_row, advantages, atol=1e-3)


@pytest.mark.parametrize("estimator, want", [
    ("reinforce_baseline", [2 / 3, -1 / 3, -1 / 3]),  # r - mean([1, 0, 0])
    ("rloo", [1.0, -0.5, -0.5]),  # r - mean of the other two
    ("grpo", [(2 / 3) / (1 / 3) ** 0.5, -(1 / 3) / (1 / 3) ** 0.5, -(1 / 3) / (1 / 3) ** 0.5]),
])
def test_group_baselines_count_each_episode_once_by_hand(estimator, want):
    """A group of K=3 episodes with rewards 1, 0, 0, the first split into 3 rows. Counted per
    row, the mean would be 3/5 and the first episode's advantage 0.4 (reinforce_baseline)."""
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0])
    mask = torch.ones(5, 2)
    episode_index = torch.tensor([0, 0, 0, 1, 2])
    advantages, _, _ = core.compute_advantages(
        core.AdvantageInputs(scores, mask, episode_index=episode_index),
        core.AdvantageSettings(estimator, group_size=3, whiten_advantages=False,
                               advantage_clip=None))
    per_row = torch.tensor(want)[episode_index]
    assert torch.allclose(advantages, per_row[:, None].expand(5, 2), atol=1e-5)


def test_reward_normalisation_counts_each_episode_once():
    """Batch mean over the episodes' rewards 1, 0, 0 is 1/3 (over the rows it would be 3/5)."""
    scores, mask = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0]), torch.ones(5, 1)
    _, _, token_rewards = core.compute_advantages(
        core.AdvantageInputs(scores, mask, episode_index=torch.tensor([0, 0, 0, 1, 2])),
        core.AdvantageSettings("reinforce", norm_mean_type="batch", whiten_advantages=False,
                               advantage_clip=None))
    assert token_rewards[:, 0].tolist() == pytest.approx([2 / 3] * 3 + [-1 / 3] * 2)


def test_episodes_must_be_numbered_in_row_order():
    with pytest.raises(ValueError, match="episode_index must number episodes 0, 1"):
        core.compute_advantages(
            core.AdvantageInputs(torch.ones(3), torch.ones(3, 1),
                                 episode_index=torch.tensor([0, 1, 0])),
            core.AdvantageSettings("reinforce"))


def test_mini_batches_and_learner_shares_keep_groups_whole_whatever_their_rows():
    """Groups of K=2 episodes with 4, 2 and 3 rows: mini-batches of 2 responses are one group
    each; a shuffled epoch still sees every row once; two learners split by whole groups."""
    episode_index = torch.tensor([0, 0, 0, 1, 2, 3, 4, 4, 5])
    groups = row_groups({EPISODE_INDEX: episode_index}, 2)
    assert groups.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    steps = minibatch_rows(9, group_size=2, mini_batch_size=2, num_epochs=1, groups=groups)
    assert [s.tolist() for s in steps] == [[0, 1, 2, 3], [4, 5], [6, 7, 8]]
    shuffled = minibatch_rows(9, group_size=2, mini_batch_size=2, num_epochs=2, groups=groups,
                              generator=torch.Generator().manual_seed(0))
    assert sorted(torch.cat(shuffled[:3]).tolist()) == list(range(9))
    assert all(len(set(groups[s].tolist())) == 1 for s in shuffled)
    with pytest.raises(ValueError, match="mini_batch_size must be a multiple"):
        minibatch_rows(9, group_size=2, mini_batch_size=4, num_epochs=1, groups=groups)
    two = torch.tensor([0, 0, 0, 0, 1, 1])  # a mini-batch of two groups, 4 and 2 rows
    assert rank_rows(torch.arange(6), group_size=2, rank=0, world=2, groups=two).tolist() == \
        [0, 1, 2, 3]
    assert rank_rows(torch.arange(6), group_size=2, rank=1, world=2, groups=two).tolist() == \
        [4, 5]


def test_micro_batches_carry_each_rows_episode(split_batch):
    episodes, _, _, _, pad = split_batch
    batch = pack_episodes(episodes, 2, pad)
    micros = micro_batches.split(batch, max_tokens=None, max_rows=1)  # (in the plan's order)
    assert sorted(int(m[EPISODE_INDEX]) for m in micros) == batch[EPISODE_INDEX].tolist()
    assert np.isclose(sum(float(m[ACTION_MASK].sum()) for m in micros),
                      float(batch[ACTION_MASK].sum()))
