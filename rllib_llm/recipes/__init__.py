"""Recipes: whole, tested settings for a task, as opposed to the named algorithm presets of
`algorithm/presets.py` (`RLVRConfig.preset`), which set an algorithm's fields and nothing else.
`embedded` holds the settings that train the project's own tiny model on its arithmetic task
(shared by the demo, the examples, the tests and the benchmarks, so none imports another's
script); `demo` is the main job that runs them (`make demo`)."""
