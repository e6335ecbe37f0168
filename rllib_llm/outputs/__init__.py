"""A run's outputs, and how they are read: its checkpoints (find, load, export), its logs (our
progress lines and metrics files, Tune's experiment logs), the stable names of its metrics, and
its plots. Used by the CLI and the demo; nothing below `outputs` in the layers imports it."""
