"""regress: the nightly's comparison of tonight's study table with the stored baseline, as a step (its
parameters and store), over bertology.results.regression, which compares and promotes."""

from __future__ import annotations

from bertology.errors import BadInput
from bertology.errors import unknown as unknown_name
from bertology.results.regression import NAME, parse_tolerances, regress
from bertology.steps.harness import require_study
from bertology.store import Store, open_store
from bertology.study import parse_pairs

PARAMS = ("baseline_store", "baseline", "promote", "tolerances")


def options(pairs: list[str]) -> dict[str, str]:
    params = parse_pairs(pairs, "--param")
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise unknown_name("regress parameter", unknown[0], PARAMS)
    promote_text = params.get("promote", "").strip().lower() or "false"
    if promote_text not in ("true", "false"):
        raise BadInput(f"parameter 'promote' must be true or false, got {params['promote']!r}")
    name = params.get("baseline", "").strip() or "nightly"
    if not NAME.match(name):
        raise BadInput(f"parameter 'baseline' must be a name of letters, digits, '.', '_' and '-', "
                       f"got {name!r}")
    return {**params, "promote": promote_text, "baseline": name}


def run(store: Store, args) -> None:
    name, study_id, _ = require_study(args, "regress")
    given = options(args.param)
    baseline_store = open_store(given["baseline_store"]) if given.get("baseline_store") else store
    regress(store, name, study_id, baseline_store=baseline_store, baseline=given["baseline"],
            promote_it=given["promote"] == "true", tolerances=parse_tolerances(given.get("tolerances")))
