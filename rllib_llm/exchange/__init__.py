"""What rollout and learning both must know, in one layer below both (docs/DESIGN.md, "Layers").

The env runner (`rllib_llm.rollout`) and the learner (`rllib_llm.learner`) never import each
other: they meet in the algorithm, and share only what lives here:
- `columns`: the names of an episode's extra data (written by the runner, read by the learner
  connector) and of the learner batch columns other layers read, with each column's layout;
- `weight_broadcast`: the channel that carries weights from the learner to the rollout engines;
- `threads`: the torch thread setting every sampling and learning process applies;
- `token_budget`: how rows are packed into batches under a token budget, for the engine's
  decode batches and the learner's micro-batches alike.

These modules import neither rollout, learner nor algorithm (`tests/project/test_layers.py`).
"""
