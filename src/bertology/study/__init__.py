"""A study: the parameters an Argo Workflow passes, its presets, and its expansion into runs.

params:  the table of parameters and their defaults (with the `default:` mark), each raw string typed.
checks:  the typed values checked together, before a preset replaces any.
presets: paper, demo and tiny: the study's design on models and data that fit the machine at hand.
spec:    StudySpec, built from the parameters (`from_params`) and expanded into cells (`cells`).
cost:    what the cells cost on a GPU: runs, training sequences, GPU-hours at the last measured rates.
"""

from bertology.study.params import DEFAULT_MARK, PARAMS, check_study_name, parse_pairs, typed_param, unmark
from bertology.study.presets import PRESETS, stand_in
from bertology.study.spec import StudySpec

__all__ = [
    "DEFAULT_MARK",
    "PARAMS",
    "PRESETS",
    "StudySpec",
    "check_study_name",
    "parse_pairs",
    "stand_in",
    "typed_param",
    "unmark",
]
