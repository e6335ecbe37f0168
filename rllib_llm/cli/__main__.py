"""`python -m rllib_llm.cli`: the same as the `rllib-llm` console script."""

import sys

from rllib_llm.cli import main

sys.exit(main())
