"""The README's report screenshots, in one command: `make screenshots`.

Runs three tiny studies locally (`bertology run workflows/<study>.yaml -p preset=tiny`, in a temporary
store, or rebuilds their reports in an existing one with `--store`), loads each `report.html` in headless
Chromium (bertology.browser, as tests/test_e2e.py does), refuses a page with any problem (console error,
failed load, an <svg> of zero size), and saves the part of the page it illustrates as
docs/screenshots/<study>.png (CROPS): the page's head, verdict and main figure; the head heat map; the
sequential matrix. The page is laid out WIDTH CSS pixels wide and captured at twice that, so the PNG stays
sharp and its text readable where the docs show it 560 pixels wide. Rerun it whenever the report's layout
changes.

    .venv/bin/python docs/screenshots.py [STUDY ...] [--out DIR] [--store DIR]
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bertology.browser import Chromium

REPO = Path(__file__).resolve().parent.parent
# The head of the page with the verdict and main figure; head heat maps; the sequential matrix.
STUDIES = ("reversed-layers", "head-reinit", "sequential-finetune")
WIDTH = 760  # CSS pixels: the page as a narrow window lays it out
SCALE = 2  # device pixels per CSS pixel
# Per study, what its screenshot shows: from the top of the element the first selector finds (none: the top
# of the page) to the bottom of the first <figure> after it, 12 pixels beyond.
CROPS = {"reversed-layers": None, "head-reinit": "#attention-heads-difference-from-the-baseline",
         "sequential-finetune": "#sequential-fine-tuning"}
CROP = """((selector) => {
  const start = selector ? document.querySelector(selector) : document.body;
  if (!start) return null;
  const top = selector ? start.getBoundingClientRect().top + window.scrollY - 8 : 0;
  const figure = start.querySelector('figure') || document.querySelector('figure');
  const end = figure ? figure.getBoundingClientRect().bottom + window.scrollY + 12
                     : document.documentElement.scrollHeight;
  return {top: Math.max(0, top), bottom: end};
})"""


class Cropping(Chromium):
    """Chromium whose screenshot is the part of the page `crop` names (a CSS selector; None: the head of
    the page), at SCALE device pixels per CSS pixel."""

    crop: str | None = None

    def _screenshot(self, session: str, out: Path) -> None:
        expression = f"{CROP}({'null' if self.crop is None else repr(self.crop)})"
        box = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                         session)["result"].get("value")
        if not box:
            raise SystemExit(f"{out.name}: nothing on the page matches {self.crop!r}")
        clip = {"x": 0, "y": box["top"], "width": self.width, "height": box["bottom"] - box["top"], "scale": SCALE}
        shot = self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                     "clip": clip}, session)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))


def run_study(study: str, store: Path, cache: Path, *, rebuild: bool = False) -> Path:
    """The study under the tiny preset (or, `rebuild`, its report rebuilt from `store`); the path of its
    report.html (the command's last line names it)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTOLOGY_CACHE": str(cache)}
    command = (["report", study, "--store", str(store)] if rebuild else
               ["run", f"workflows/{study}.yaml", "-p", "preset=tiny", "--store", str(store)])
    done = subprocess.run([sys.executable, "-m", "bertology.cli", *command], check=False, cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{study}: bertology {command[0]} exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return Path(last.removeprefix("report: ").removeprefix("file://"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="*", default=STUDIES, help=f"default: {' '.join(STUDIES)}")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--store", type=Path, default=None,
                        help="a store where the tiny studies already ran: rebuild their reports, run nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bertology-screenshots-") as tmp:
        reports = {}
        for study in args.studies:
            print(f"{study}: {'rebuilding the report' if args.store else 'running the tiny preset'}", flush=True)
            reports[study] = run_study(study, args.store or Path(tmp) / "store", Path(tmp) / "cache",
                                       rebuild=args.store is not None)
        with Cropping(width=WIDTH) as browser:
            for study, report in reports.items():
                png = args.out / f"{study}.png"
                browser.crop = CROPS.get(study)
                page = browser.open(report, screenshot=png)
                if page.problems:
                    print(f"{study}: {report} has problems:", *page.problems, sep="\n  ", file=sys.stderr)
                    return 1
                print(f"{png.relative_to(REPO) if png.is_relative_to(REPO) else png}: {len(page.svgs)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
