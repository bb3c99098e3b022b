"""The README's report screenshots, in one command: `make screenshots`.

Runs three tiny studies locally (`bertology run workflows/<study>.yaml -p preset=tiny`, in a temporary
store), loads each `report.html` in headless Chromium (bertology.browser, as tests/test_e2e.py does),
refuses a page with any problem (console error, failed load, an <svg> of zero size), and saves the whole
page as docs/screenshots/<study>.png. Rerun it whenever the report's layout changes.

    .venv/bin/python docs/screenshots.py [STUDY ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bertology.browser import Chromium

REPO = Path(__file__).resolve().parent.parent
# The main table with training loss; head heat maps; the sequential matrix.
STUDIES = ("reversed-layers", "head-reinit", "sequential-finetune")


def run_study(study: str, store: Path, cache: Path) -> Path:
    """The study under the tiny preset; the path of its report.html (the run's last line names it)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTOLOGY_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-m", "bertology.cli", "run", f"workflows/{study}.yaml", "-p",
                           "preset=tiny", "--store", str(store)], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{study}: bertology run exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1].removeprefix("report: "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="*", default=STUDIES, help=f"default: {' '.join(STUDIES)}")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bertology-screenshots-") as tmp:
        reports = {}
        for study in args.studies:
            print(f"{study}: running the tiny preset", flush=True)
            reports[study] = run_study(study, Path(tmp) / "store", Path(tmp) / "cache")
        with Chromium() as browser:
            for study, report in reports.items():
                png = args.out / f"{study}.png"
                page = browser.open(report, screenshot=png)
                if page.problems:
                    print(f"{study}: {report} has problems:", *page.problems, sep="\n  ", file=sys.stderr)
                    return 1
                print(f"{png.relative_to(REPO) if png.is_relative_to(REPO) else png}: {len(page.svgs)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
