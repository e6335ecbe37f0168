"""An agent written with an agent framework trains through `openai_agent` (issue 48, item 6):
the OpenAI Agents SDK, its chat-completions model pointed at the episode's client, a function
tool, `Runner.run`. A scripted engine (a tool call, then the tool's output as the answer) makes
every episode take the whole loop; its episodes are the tokens the engine gave, with the tool's
output as state and the verifier's reward."""

from __future__ import annotations

import pytest

pytest.importorskip("openai")
agents = pytest.importorskip("agents")  # openai-agents (dev extra)

PROBLEMS = 3


class ToolCallingEngine:
    """Answers a prompt "A*B=" with `<python>print(A*B)</python>`, and a prompt ending in a
    tool's `<output>X</output>` with X and EOS (the embedded tool model's format)."""

    weight_version = 3

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompt_ids, n, sampling):
        from rllib_llm.rollout.engine import Response

        out = []
        for prompt in prompt_ids:
            text = self.tok.decode(prompt)
            if text.endswith("</output>"):
                reply = text[text.rindex("<output>") + len("<output>"):-len("</output>")]
                ids = [*self.tok.encode(reply, add_special_tokens=False), self.tok.eos_token_id]
            else:
                ids = self.tok.encode(f"<python>print({text.rstrip('=')})</python>",
                                      add_special_tokens=False)
            out.append([Response(ids, [-0.25] * len(ids), "stop") for _ in range(n)])
        return out


async def sdk_agent(client, problem):
    """The embedded tool task in the Agents SDK: one `python` tool (a test stand-in for the
    sandbox: evaluates `print(EXPR)`), at most a tool call and an answer."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool

    @function_tool
    def python(code: str) -> str:
        """Run Python code and see what it prints."""
        try:
            return str(eval(code[len("print("):-1], {})) if code.startswith("print(") else ""
        except Exception as e:
            return type(e).__name__

    agent = Agent(name="solver", tools=[python],
                  model=OpenAIChatCompletionsModel(model=problem["model"], openai_client=client))
    try:
        result = await Runner.run(agent, problem["prompt"], max_turns=2)
    except agents.MaxTurnsExceeded:
        return ""  # still calling tools at the turn limit: no answer
    return result.final_output


def test_an_openai_agents_sdk_agent_trains_through_the_gateway():
    from agents import set_tracing_disabled
    from rllib_llm.envs.openai_agent_env import OpenAIAgentEnv

    from rllib_llm.exchange.columns import ACTION_LOGP
    from rllib_llm.learner.packing import episode_tokens
    from rllib_llm.models import load_tokenizer
    from rllib_llm.rollout.agent_rollouts import make_gateway, sample_agent_episodes

    set_tracing_disabled(True)  # the SDK would export traces to OpenAI's servers
    tok = load_tokenizer("embedded_tool")
    engine = ToolCallingEngine(tok)
    env = OpenAIAgentEnv({"agent": sdk_agent, "model": "embedded_tool", "dataset": "arithmetic",
                          "dataset_kwargs": {"ops": "*"}, "response_length": 64,
                          "prompt_length": 16})
    gateway = make_gateway(env, engine, temperature=1.0, top_p=1.0, response_length=64)
    try:
        infos = [env.reset()[1] for _ in range(PROBLEMS)]
        episodes, counts = sample_agent_episodes(env, gateway, infos, 2,
                                                 group_ids=[str(i) for i in range(PROBLEMS)])
    finally:
        gateway.stop()
    try:
        assert counts.errors == counts.timeouts == 0 and len(episodes) == 2 * PROBLEMS
        assert counts.calls == 2 * len(episodes)  # the SDK ran the tool, then asked again
        for episode in episodes:
            final, first = episode.get_infos(-1), episode.get_infos()[0]
            answer = str(eval(first["prompt"].rstrip("=")))
            assert final["final_answer"] == answer and final["prefix_breaks"] == 0
            assert episode.get_return() == 1.0  # the verifier's score of the right answer
            call = tok.encode(f"<python>print({first['prompt'].rstrip('=')})</python>",
                              add_special_tokens=False)
            output = tok.encode(f"<output>{answer}</output>", add_special_tokens=False)
            tokens = episode_tokens(episode)
            assert list(tokens.prompt_ids) == tok.encode(first["prompt"])
            assert list(tokens.response_ids) == [*call, *output, *tok.encode(answer),
                                                 tok.eos_token_id]
            assert list(tokens.action_mask) == [1] * len(call) + [0] * len(output) + [1] * (
                len(answer) + 1)
            assert list(episode.get_extra_model_outputs(ACTION_LOGP)) == [-0.25] * len(episode)
    finally:
        env.close()
