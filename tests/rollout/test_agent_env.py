"""`openai_agent` (issue 48, items 2 and 5): agents written with the openai client, sync and
async, run once per episode against the gateway; their sampled tokens become the episodes the
learner trains on, exactly; agents that raise, hang, return garbage, never call or flood calls
end in counted, named outcomes and the call goes on."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import numpy as np
import pytest
import torch

openai = pytest.importorskip("openai")

from rllib_llm.envs.openai_agent_env import FINAL_ANSWER, OpenAIAgentEnv  # noqa: E402
from rllib_llm.envs.token_mdp import VERIFIER_INFO  # noqa: E402

from rllib_llm.exchange.columns import ACTION_LOGP, WEIGHT_VERSION  # noqa: E402
from rllib_llm.learner.packing import episode_rows, episode_tokens  # noqa: E402
from rllib_llm.models import load_model  # noqa: E402
from rllib_llm.rollout.agent_rollouts import (  # noqa: E402
    AGENT_ERROR_FRACTION,
    AGENT_TIMEOUT_FRACTION,
    AGENT_TRUNCATED_BY,
    PREFIX_BREAKS,
    make_gateway,
    sample_agent_episodes,
)
from rllib_llm.rollout.gateway.trajectories import stitch  # noqa: E402
from rllib_llm.rollout.torch_engine import TorchRolloutEngine  # noqa: E402

torch.set_num_threads(1)
PYTHON = {"type": "function", "function": {
    "name": "python", "description": "Run Python code",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}
ENV = {"model": "embedded_tool", "dataset": "arithmetic", "dataset_kwargs": {"ops": "*"},
       "response_length": 64, "prompt_length": 16}


def tool_agent(client, problem):
    """The embedded tool task as an agent: ask; run a python call (here: eval, a test stand-in
    for the sandbox); ask again; the last reply's text is the answer."""
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(2):
        message = client.chat.completions.create(
            model=problem["model"], messages=messages, tools=[PYTHON]).choices[0].message
        if not message.tool_calls:
            return message.content
        call = message.tool_calls[0]
        code = json.loads(call.function.arguments)["code"]
        try:  # (sampled at temperature 1, the code may be anything)
            output = str(eval(code[len("print("):-1], {})) if code.startswith("print(") \
                else "error"
        except Exception as e:
            output = type(e).__name__
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": output}]
    return message.content or ""


async def async_tool_agent(client, problem):
    message = (await client.chat.completions.create(
        model=problem["model"], messages=[{"role": "user", "content": problem["prompt"]}],
        max_tokens=8)).choices[0].message
    return message.content or ""


@pytest.fixture(scope="module")
def engine():
    model = load_model("embedded_tool")
    from rllib_llm.models import load_tokenizer

    tok = load_tokenizer("embedded_tool")
    return TorchRolloutEngine(model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def sample(agent, engine, *, prompts=2, n=2, **settings):
    env = OpenAIAgentEnv({**ENV, "agent": agent, **settings})
    gateway = make_gateway(env, engine, temperature=1.0, top_p=1.0, response_length=64)
    try:
        infos = [env.reset()[1] for _ in range(prompts)]
        episodes, counts = sample_agent_episodes(env, gateway, infos, n,
                                                 group_ids=[f"g{i}" for i in range(prompts)])
    finally:
        gateway.stop()
    return env, infos, episodes, counts


def test_a_sync_agents_episodes_are_the_tokens_the_gateway_sampled(engine):
    recorded = []

    def agent(client, problem):  # tool_agent, keeping what the model said for the test
        answer = tool_agent(client, problem)
        recorded.append((problem["index"], answer))
        return answer

    env, infos, episodes, counts = sample(agent, engine, prompts=3, n=2)
    assert len(episodes) == 6 and counts.errors == counts.timeouts == 0
    assert [e.get_infos()[0]["group_id"] for e in episodes] == ["g0"] * 2 + ["g1"] * 2 + ["g2"] * 2
    for episode in episodes:
        tokens = episode_tokens(episode)
        final = episode.get_infos(-1)
        # Tool calls are state (mask 0): the learner's response is exactly the stitched
        # sequence's tokens, its mask exactly the model's tokens.
        actions = np.asarray(episode.get_actions())
        assert tokens.action_mask.sum() == len(actions)
        assert np.array_equal(tokens.response_ids[tokens.action_mask.astype(bool)], actions)
        assert np.array_equal(tokens.behaviour_logp[tokens.action_mask.astype(bool)],
                              episode.get_extra_model_outputs(ACTION_LOGP))
        assert set(episode.get_extra_model_outputs(WEIGHT_VERSION)) == {engine.weight_version}
        # The reward is the verifier's score of the answer the agent returned.
        verdict = env.verify_text(episode.get_infos()[0]["prompt_index"], final[FINAL_ANSWER])
        assert episode.get_return() == verdict.score
        assert final[VERIFIER_INFO]["correct"] == verdict.correct
        assert final[PREFIX_BREAKS] == 0 and final[AGENT_TRUNCATED_BY] is None
    assert sorted(i for i, _ in recorded) == sorted(i["prompt_index"] for i in infos for _ in "ab")
    env.close()


def test_the_trained_tokens_equal_the_recorded_calls(engine):
    """Through a spy gateway: each episode's actions and log-probs are its recorded calls'."""
    env = OpenAIAgentEnv({**ENV, "agent": tool_agent})
    gateway = make_gateway(env, engine, temperature=1.0, top_p=1.0, response_length=64)
    records = []
    close = gateway.close_episode
    gateway.close_episode = lambda client: records.append(close(client)) or records[-1]
    try:
        infos = [env.reset()[1]]
        episodes, _ = sample_agent_episodes(env, gateway, infos, 2, group_ids=["g"])
    finally:
        gateway.stop()
        env.close()
    for episode, record in zip(episodes, records, strict=True):
        (sequence,), _ = stitch(record.calls)
        assert episode.get_actions().tolist() == [t for c in record.calls for t in c.completion_ids]
        assert episode.get_extra_model_outputs(ACTION_LOGP).tolist() == pytest.approx(
            [lp for c in record.calls for lp in c.logprobs])
        assert list(episode_tokens(episode).prompt_ids) == list(record.calls[0].prompt_ids)


def test_async_agents_run_concurrently(engine):
    env, _, episodes, counts = sample(async_tool_agent, engine, prompts=2, n=4)
    assert len(episodes) == 8 and counts.errors == 0 and counts.calls == 8


def test_a_failing_agent_drops_its_group_with_one_warning_naming_the_first_error(engine, caplog):
    def agent(client, problem):
        tool_agent(client, problem)
        if problem["index"] % 2 == 0:
            raise RuntimeError(f"boom on {problem['index']}")
        return "0"

    caplog.set_level(logging.WARNING)
    env, infos, episodes, counts = sample(agent, engine, prompts=4, n=2)
    failing = {i["prompt_index"] for i in infos if i["prompt_index"] % 2 == 0}
    assert 0 < len(failing) < 4  # (the data set's seeded order)
    assert counts.errors == 2 * len(failing) and counts.dropped_groups == len(failing)
    assert len(episodes) == 2 * (4 - len(failing))
    assert counts.metrics()[AGENT_ERROR_FRACTION] == counts.errors / 8
    warnings = [r for r in caplog.records if "openai_agent" in r.getMessage()]
    assert len(warnings) == 1 and "RuntimeError: boom on" in warnings[0].getMessage()


@pytest.mark.parametrize(("agent", "why"), [
    (lambda client, problem: {"answer": 1}, "garbage"),
    (lambda client, problem: "42", "never calls"),
])
def test_garbage_and_no_calls_drop_the_episode_counted_as_errors(engine, agent, why):
    def calling(client, problem):
        if why == "garbage":
            client.chat.completions.create(model="x", messages=[
                {"role": "user", "content": problem["prompt"]}], max_tokens=2)
        return agent(client, problem)

    _, _, episodes, counts = sample(calling, engine, prompts=1, n=2)
    assert episodes == [] and counts.errors == 2 and counts.dropped_groups == 1


def test_a_hanging_agent_times_out_and_the_call_goes_on(engine):
    def agent(client, problem):
        client.chat.completions.create(model="x", max_tokens=2, messages=[
            {"role": "user", "content": problem["prompt"]}])
        if problem["index"] % 2:
            time.sleep(5)
        return "0"

    start = time.monotonic()
    _, infos, episodes, counts = sample(agent, engine, prompts=2, n=1, agent_timeout_s=0.5)
    assert time.monotonic() - start < 4  # the sleeping threads are abandoned, not awaited
    hung = sum(i["prompt_index"] % 2 for i in infos)
    assert counts.timeouts == hung and len(episodes) == 2 - hung
    assert counts.metrics()[AGENT_TIMEOUT_FRACTION] == hung / 2


def test_an_async_agent_that_hangs_times_out(engine):
    async def agent(client, problem):
        await asyncio.sleep(5)

    _, _, episodes, counts = sample(agent, engine, prompts=1, n=2, agent_timeout_s=0.3)
    assert counts.timeouts == 2 and episodes == []


def test_an_agent_flooding_calls_is_refused_past_max_calls_and_its_episode_is_truncated(engine):
    def agent(client, problem):
        messages = [{"role": "user", "content": problem["prompt"]}]
        while True:  # never stops by itself: the gateway's error ends it
            client.chat.completions.create(model="x", messages=messages, max_tokens=1)

    _, _, episodes, counts = sample(agent, engine, prompts=1, n=2, max_calls=3)
    assert len(episodes) == 2 and counts.errors == 0
    for episode in episodes:
        final = episode.get_infos(-1)
        assert final[AGENT_TRUNCATED_BY] == "max_calls" and episode.is_truncated
        assert final["agent_calls"] == 3 and episode.get_return() == 0.0
        # Three calls of the same prompt: one sequence each, two counted as prefix breaks;
        # all three are trained, one row each (tests/rollout/test_agent_history_split.py).
        assert final[PREFIX_BREAKS] == 2 and len(episode) == 3
        assert len(episode_rows(episode)) == 3


def test_an_agent_named_by_its_import_path_is_loaded_and_a_bad_one_is_refused():
    env = OpenAIAgentEnv({**ENV, "agent": "test_agent_env:tool_agent"})
    assert env.agent is tool_agent or env.agent.__name__ == "tool_agent"
    env.close()
    with pytest.raises(ValueError, match="agent='no_such_module:solve' cannot be loaded"):
        OpenAIAgentEnv({**ENV, "agent": "no_such_module:solve"})
    with pytest.raises(ValueError, match="package.module:function"):
        OpenAIAgentEnv({**ENV, "agent": "solve"})
    with pytest.raises(ValueError, match="unknown openai_agent config keys"):
        OpenAIAgentEnv({**ENV, "agent": tool_agent, "max_turns": 2})


def test_an_env_runner_samples_agent_episodes_and_reports_the_agents_metrics():
    from rllib_llm.algorithm import RLVRConfig
    from rllib_llm.rollout.env_runner import RLVREnvRunner

    config = (RLVRConfig()
              .environment("openai_agent", env_config={
                  "agent": "test_agent_env:tool_agent", "dataset": "arithmetic",
                  "dataset_kwargs": {"ops": "*"}})
              .training(model_name_or_path="embedded_tool", rollout_batch_size=2,
                        num_return_sequences_in_group=2, response_length=64)
              .debugging(seed=0, log_level="ERROR"))
    runner = RLVREnvRunner(config=config)
    try:
        episodes = runner.sample()
        assert len(episodes) == 4 and len({e.get_infos()[0]["group_id"] for e in episodes}) == 2
        assert runner.metrics.peek(AGENT_ERROR_FRACTION) == 0.0
        assert runner.metrics.peek(AGENT_TIMEOUT_FRACTION) == 0.0
    finally:
        runner.stop()


def test_evaluation_runs_the_agent_on_held_out_problems_and_counts_the_verdicts(engine):
    from rllib_llm.rollout.agent_rollouts import score_agents
    from rllib_llm.rollout.engine import SamplingParams

    seen = []

    def agent(client, problem):  # right on even problems, after one call; odd ones raise
        client.chat.completions.create(model="x", max_tokens=1, messages=[
            {"role": "user", "content": problem["prompt"]}])
        seen.append(problem["index"])
        if problem["index"] % 2:
            raise ValueError("odd")
        return problem["answer"]

    env = OpenAIAgentEnv({**ENV, "agent": agent, "split": "test"})
    try:
        shard = score_agents(env, engine, [0, 1, 2, 3, 4], 2,
                             SamplingParams(temperature=0, max_tokens=64), num_problems=5)
    finally:
        env.close()
    assert sorted(seen) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert shard.prompt_indices == [0, 1, 2, 3, 4] and shard.num_correct == [2, 0, 2, 0, 2]
    assert shard.samples_per_problem == 2 and shard.response_tokens == 10


def test_a_runner_whose_agents_all_fail_says_so_naming_the_first_error():
    from rllib_llm.algorithm import RLVRConfig
    from rllib_llm.rollout.agent_rollouts import AllAgentsFailed
    from rllib_llm.rollout.env_runner import RLVREnvRunner

    config = (RLVRConfig()
              .environment("openai_agent", env_config={
                  "agent": "test_agent_env:broken_agent", "dataset": "arithmetic"})
              .training(model_name_or_path="embedded_tool", rollout_batch_size=2,
                        num_return_sequences_in_group=2, response_length=8)
              .debugging(seed=0, log_level="ERROR"))
    runner = RLVREnvRunner(config=config)
    try:
        with pytest.raises(AllAgentsFailed, match="4 errors.*KeyError: 'no_such_field'"):
            runner.sample()
        assert runner.metrics.peek(AGENT_ERROR_FRACTION) == 1.0
    finally:
        runner.stop()


def broken_agent(client, problem):
    client.chat.completions.create(model="x", max_tokens=1, messages=[
        {"role": "user", "content": problem["prompt"]}])
    return problem["no_such_field"]
