"""Python cost per token of turning generated responses into the learner batch, no model calls.

    python benchmarks/speed/per_token_overhead.py [--prompts 64 --group 8 --tokens 1024 --repeats 3]

Synthetic responses stand in for the engine's: `--group` per prompt of the arithmetic task,
random token ids (digits, spaces and `+-=`, so the verifier decides on its in-process fast path),
random behaviour log-probs. Half of each group runs to `--tokens` (truncated), half ends with EOS
at a random length in [tokens/2, tokens] (terminated). Phases, as the env runner and the learner
connector run them:
- verify: `env.verify_responses` (decode, answer extraction, comparison);
- build episodes: the runner replays every response through the env (`step_chunk`) into a
  `SingleAgentEpisode` (`episode_building.build_episodes`);
- pack: episodes -> the (B, T) tensors of the learner batch (`packing.pack_episodes`).

Prints a Markdown table: wall and CPU seconds (the median of `--repeats`, garbage collected
before each), CPU µs per token (CPU time: steady on a machine other work shares), and the peak
memory each phase allocates (tracemalloc, in a separate untimed pass). Goal: build + pack
<= 0.3 µs per token.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import torch

RESPONSE_CHARS = list("0123456789 +-=")


def synthetic_responses(env, num_prompts: int, group: int, tokens: int, seed: int = 0):
    """(prompt indices, responses[prompt][j]) of the shape described in the module docstring."""
    from rllib_llm.rollout.engine import Response

    rng = np.random.default_rng(seed)
    tok = env.tokenizer
    alphabet = np.asarray(tok.convert_tokens_to_ids(RESPONSE_CHARS))
    indices = [env.reset()[1]["prompt_index"] for _ in range(num_prompts)]
    responses = []
    for _ in indices:
        group_responses = []
        for j in range(group):
            stops = j % 2 == 1
            length = int(rng.integers(tokens // 2, tokens + 1)) if stops else tokens
            ids = rng.choice(alphabet, length)
            if stops:
                ids[-1] = tok.eos_token_id
            logprobs = -rng.exponential(size=length)
            group_responses.append(Response(ids.tolist(), logprobs.tolist(),
                                            "stop" if stops else "length"))
        responses.append(group_responses)
    return indices, responses


def measure(phase: Callable[[], object], repeats: int,
            setup: Callable[[], object] = lambda: None) -> tuple[float, float, float]:
    """Median wall and CPU seconds of `phase` over `repeats` runs, each after an untimed
    `setup`, and the peak MiB it allocates."""
    walls, cpus = [], []
    for _ in range(repeats):
        setup()
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        phase()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    setup()
    gc.collect()
    tracemalloc.start()
    phase()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(walls), statistics.median(cpus), peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from rllib_llm.learner.packing import pack_episodes
    from rllib_llm.recipes.embedded import embedded_config
    from rllib_llm.rollout.env_runner import RLVREnvRunner
    from rllib_llm.rollout.episode_building import build_episodes

    # The model is never called, so responses may run past its context; prompt_length is set,
    # not left to what the context leaves after the response (negative at 1,024 tokens).
    config = embedded_config("topr", rollout_batch_size=args.prompts,
                             num_return_sequences_in_group=args.group,
                             response_length=args.tokens, prompt_length=64)
    runner = RLVREnvRunner(config=config)
    env = runner.env
    indices, responses = synthetic_responses(env, args.prompts, args.group, args.tokens)
    flat_indices = [i for i, group in zip(indices, responses) for _ in group]
    flat_tokens = [r.token_ids for group in responses for r in group]
    num_tokens = sum(len(t) for t in flat_tokens)
    verify = lambda: env.verify_responses(flat_indices, flat_tokens)  # noqa: E731
    verdicts = verify()
    group_ids = [f"0-{g}" for g in range(len(indices))]  # (the runner's form)

    def build():
        return build_episodes(env, indices, responses, verdicts, group_ids=group_ids,
                              weight_version=0)

    episodes = build()
    pad = env.tokenizer.pad_token_id
    results = {
        "verify": measure(verify, args.repeats),
        # As in `RLVREnvRunner._sample`, each replay follows the batch's verification.
        "build episodes": measure(build, args.repeats, setup=verify),
        "pack": measure(lambda: pack_episodes(episodes, args.group, pad), args.repeats),
    }

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {args.prompts} prompts x {args.group} responses, "
          f"{num_tokens:,} tokens (up to {args.tokens} each), median of {args.repeats}\n")
    print("| phase | wall s | CPU s | CPU µs/token | peak MiB |")
    print("|---|---|---|---|---|")
    for name, (wall, cpu, peak) in results.items():
        print(f"| {name} | {wall:.3f} | {cpu:.3f} | {cpu / num_tokens * 1e6:.3f} | {peak:.0f} |")
    wall = results["build episodes"][0] + results["pack"][0]
    cpu = results["build episodes"][1] + results["pack"][1]
    print(f"| **build + pack** | {wall:.3f} | {cpu:.3f} | **{cpu / num_tokens * 1e6:.3f}** | |")
    print(f"\npeak RSS of the process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    runner.stop()


if __name__ == "__main__":
    main()
