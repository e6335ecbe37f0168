"""Models: loading causal LMs and tokenizers by name or path (`loading.py`, re-exported here),
the embedded checkpoints the project trains itself (`embedded*/`), LoRA adapters (`lora.py`),
the critic's value model (`value_model.py`), reward models (`reward_model.py`) and reading
SmolLM2's GGUF file (`gguf_checkpoint.py`).
"""

from rllib_llm.models.loading import (
    DTYPES,
    EMBEDDED,
    EMBEDDED_CHECKPOINTS,
    EMBEDDED_DIR,
    EMBEDDED_REWARD,
    EMBEDDED_TEACHER,
    EMBEDDED_TOOL,
    MODEL_CONFIG,
    encode_prompt,
    load_model,
    load_model_and_tokenizer,
    load_tokenizer,
    resolve_checkpoint,
    resolve_path,
)

__all__ = [
    "DTYPES",
    "EMBEDDED",
    "EMBEDDED_CHECKPOINTS",
    "EMBEDDED_DIR",
    "EMBEDDED_REWARD",
    "EMBEDDED_TEACHER",
    "EMBEDDED_TOOL",
    "MODEL_CONFIG",
    "encode_prompt",
    "load_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_checkpoint",
    "resolve_path",
]
