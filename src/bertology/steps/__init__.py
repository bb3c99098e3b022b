"""The pipeline steps. Each module has `run(store, args)`; `jobs/<step>.py` is its entry point.

Every step derives its output key from a spec id, returns at once when that key's marker exists, and
publishes its rows to `results/` for the study that asked, so a cached step still serves a new study.
"""
