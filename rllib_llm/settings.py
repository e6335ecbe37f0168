"""Print every RLVRConfig setting with its default and meaning: `python -m rllib_llm.settings`."""

from rllib_llm.algorithm.fields import reference_markdown

if __name__ == "__main__":
    print(reference_markdown())
