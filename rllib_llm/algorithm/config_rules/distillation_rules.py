"""The rules of on-policy distillation's settings (teacher_model_name_or_path,
distillation_coef, verifier_advantage_coef): a teacher the learner cannot use as documented is
refused here, before anything is loaded on a learner."""

from __future__ import annotations

import functools

from rllib_llm import core
from rllib_llm.algorithm.fields import refuse_changed

# Settings only distillation reads: without a teacher they must keep their defaults.
DISTILLATION_FIELDS = ("distillation_coef", "verifier_advantage_coef")


def check_distillation(cfg) -> None:
    """Raise ValueError for distillation settings that would do nothing or something other than
    their documentation says."""
    teacher = cfg.teacher_model_name_or_path
    if teacher is None:
        refuse_changed(cfg, DISTILLATION_FIELDS,
                       "weigh on-policy distillation's advantage, but teacher_model_name_or_path="
                       "None distils from no teacher, so they would do nothing. Set "
                       "teacher_model_name_or_path, or leave them at their defaults.")
        return
    if cfg.in_evaluation:
        return
    if core.adv_estimator_info(cfg.adv_estimator).needs_critic:
        # The distillation term is added to the actor's advantages after the estimator; a
        # critic would learn the verifier's returns alone, a baseline for another objective.
        raise ValueError(
            f"RLVRConfig.teacher_model_name_or_path={teacher!r} with adv_estimator="
            f"{cfg.adv_estimator!r}: the teacher's per-token term is added to the advantages "
            "after the estimator, where a critic's value targets never see it. Use a "
            "critic-free estimator (grpo, rloo, reinforce_baseline, reinforce).")
    if cfg.learner_strategy == "deepspeed":
        raise ValueError(
            f"RLVRConfig.teacher_model_name_or_path={teacher!r} with learner_strategy="
            f"{cfg.learner_strategy!r}: a teacher is not supported (nor tested) on DeepSpeed "
            "learners yet, whose ZeRO-3 would partition it outside the engine. Use "
            "learner_strategy='torch' or 'fsdp2' (which shards it as it shards the policy).")
    if cfg.dynamic_sampling and cfg.verifier_advantage_coef == 0:
        raise ValueError(
            "RLVRConfig.dynamic_sampling=True with verifier_advantage_coef=0: dynamic sampling "
            "keeps prompt groups whose verifier rewards differ, and distillation alone gives "
            "those rewards no weight. Drop dynamic_sampling, or set verifier_advantage_coef > 0.")
    mismatch = tokenizer_mismatch(cfg.model_name_or_path, teacher)
    if mismatch:
        raise ValueError(
            f"RLVRConfig.teacher_model_name_or_path={teacher!r}: its tokenizer is not the "
            f"student's ({cfg.model_name_or_path!r}): {mismatch}. The teacher scores the "
            "student's token ids, so both must map every token to the same id; pick a teacher "
            "of the student's tokenizer family.")


@functools.lru_cache(maxsize=8)
def tokenizer_mismatch(student: str, teacher: str) -> str | None:
    """How the two checkpoints' tokenizers differ (token -> id maps), or None if they agree."""
    from rllib_llm.models import load_tokenizer

    ours = load_tokenizer(student).get_vocab()
    theirs = load_tokenizer(teacher).get_vocab()
    if ours == theirs:
        return None
    if len(ours) != len(theirs):
        return f"{len(theirs)} tokens against the student's {len(ours)}"
    moved = sorted(t for t in ours if ours[t] != theirs.get(t))
    return f"{len(moved)} tokens have other ids, e.g. {moved[0]!r}"
