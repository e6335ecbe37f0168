"""The rules of the reward-model settings (reward_model_name_or_path and the settings of its
workers, weights and judge): settings that would do nothing, or a judge whose tokenizer cannot
answer in one token, are refused here, before any worker is started."""

from __future__ import annotations

import functools

from rllib_llm.algorithm.fields import refuse_changed

# Settings only a reward model reads: without one they must keep their defaults.
REWARD_MODEL_FIELDS = ("reward_model_type", "reward_judge_template", "reward_judge_tokens",
                       "reward_weights", "num_reward_workers", "num_cpus_per_reward_worker",
                       "num_gpus_per_reward_worker", "reward_model_batch_size")
# Settings only a judge reads.
JUDGE_FIELDS = ("reward_judge_template", "reward_judge_tokens")


def check_reward_model(cfg) -> None:
    """Raise ValueError for reward-model settings that would do nothing or other than their
    documentation says."""
    name = cfg.reward_model_name_or_path
    if name is None:
        refuse_changed(cfg, REWARD_MODEL_FIELDS,
                       "configure a reward model, but reward_model_name_or_path=None scores with "
                       "the verifier alone, so they would do nothing. Set "
                       "reward_model_name_or_path, or leave them at their defaults.")
        return
    from rllib_llm.models import resolve_checkpoint
    from rllib_llm.models.reward_model import check_template, judge_token_ids

    try:
        resolve_checkpoint(name, kind="model", setting="RLVRConfig.reward_model_name_or_path")
    except ValueError as e:
        raise ValueError(f"RLVRConfig.reward_model_name_or_path: {e}") from e
    if cfg.reward_model_type != "judge":
        refuse_changed(cfg, JUDGE_FIELDS,
                       "shape an LLM judge's prompt and answer, but reward_model_type="
                       f"{cfg.reward_model_type!r} reads no prompt template. Set "
                       "reward_model_type='judge', or leave them at their defaults.")
        return
    check_template(cfg.reward_judge_template)
    judge_token_ids(_tokenizer(name), cfg.reward_judge_tokens, repr(name))


@functools.lru_cache(maxsize=8)
def _tokenizer(name: str):
    from rllib_llm.models import load_tokenizer

    return load_tokenizer(name)
