"""The rules of the model and its context: every checkpoint setting can be loaded, the prompt
and the response fit the model's context, and the overlong buffer fits the response."""

from __future__ import annotations

from rllib_llm.algorithm.fields import changed_fields


def check_model(cfg) -> None:
    """model_name_or_path (and critic_ and teacher_model_name_or_path) can be loaded: a missing
    local path, or a hub id that cannot be fetched, fails here at once, naming the setting (not
    after the hub's retries, as a traceback). Those two raise FileNotFoundError, as loading
    would."""
    from rllib_llm.models import resolve_checkpoint

    for name in ("model_name_or_path", "critic_model_name_or_path",
                 "teacher_model_name_or_path"):
        value = getattr(cfg, name)
        if value is None:
            continue
        try:
            resolve_checkpoint(value, kind="model", setting=f"RLVRConfig.{name}")
        except ValueError as e:
            raise ValueError(f"RLVRConfig.{name}: {e}") from e
    try:
        cfg.model_context_length  # reads the model's config.json (from the hub for a hub id)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"RLVRConfig.model_name_or_path={cfg.model_name_or_path!r}: its config cannot be "
            f"read ({first}); pass a local checkpoint directory, 'embedded', or a hub id that "
            "exists"
        ) from e


def check_lengths(cfg) -> None:
    """prompt_length + response_length fit the model's context."""
    context = cfg.model_context_length
    if context is None:
        return
    if cfg.response_length >= context:
        raise ValueError(
            f"RLVRConfig.response_length={cfg.response_length} leaves no room for a prompt "
            f"in the model's context of {context} tokens (max_position_embeddings of "
            f"{cfg.model_name_or_path!r}); use a smaller response_length."
        )
    if cfg.prompt_length is not None and cfg.prompt_length + cfg.response_length > context:
        raise ValueError(
            f"RLVRConfig.prompt_length={cfg.prompt_length} + response_length="
            f"{cfg.response_length} exceeds the model's context of {context} tokens "
            f"(max_position_embeddings of {cfg.model_name_or_path!r}); lower them, or set "
            "prompt_length=None to use what the response leaves."
        )


def check_overlong(cfg) -> None:
    """The overlong buffer fits inside the response (L_cache <= L_max), and its factor is read."""
    buffer = cfg.resolved_overlong_buffer_len
    if buffer is not None and buffer > cfg.response_length:
        raise ValueError(
            f"RLVRConfig.overlong_buffer_len={buffer} is longer than response_length="
            f"{cfg.response_length}: the penalty ramps over the last overlong_buffer_len tokens "
            "before response_length; use at most response_length.")
    if buffer is None and changed_fields(cfg, ("overlong_penalty_factor",)):
        raise ValueError(
            f"RLVRConfig.overlong_penalty_factor={cfg.overlong_penalty_factor} has no effect "
            "without overlong_buffer_len; set overlong_buffer_len (the penalty's ramp) too.")
