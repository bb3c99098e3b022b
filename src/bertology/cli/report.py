"""`bertology report`: a study's tables, report.md and report.html rebuilt from what the store holds."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertology.cli.locations import store_uri
from bertology.store import open_store


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild a study's tables and report from the store (its latest plan unless --id names one)."""
    from bertology.results.study_results import latest_study_id
    from bertology.results.summary import study_result
    from bertology.steps.aggregate import aggregate
    from bertology.study import check_study_name

    check_study_name(args.study)
    store = open_store(store_uri(args.store))
    study_id = args.id
    if study_id is None:
        study_id = latest_study_id(store, args.study)
        print(f"study {args.study}: latest plan {study_id} (choose another with --id)")
    written = aggregate(store, args.study, study_id, best_of_runs=args.best_of_runs,
                        out=Path(args.out) if args.out else None, echo=False)
    for line in study_result(store, args.study, study_id):  # the main table and the report's orderings
        print(line)
    for location in written:
        if location.endswith(("report.md", "report.html")):
            print(location)
    return 0
