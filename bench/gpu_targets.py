"""The GPU bench's targets and the report section that sets each measured figure beside its
target. Apart from bench/gpu.py: it reads only the figures, so it is the same for a finished, cut-off or
CPU run."""

from __future__ import annotations

FIXED = "fixed-128"  # the ours-vs-Trainer row at a fixed length of 128 (SST-2's single-sentence head)


def figure_at(figures: dict, *path):
    """The figure at `path` in the nested figures, None where any key is missing (not measured)."""
    for key in path:
        if not isinstance(figures, dict) or key not in figures:
            return None
        figures = figures[key]
    return figures


def best(figures: dict, part: str) -> float | None:
    """The largest seq/s in all among a side-by-side part's K rows (None: none measured)."""
    rates = [row["seq_s"] for row in (figures.get(part) or {}).values() if isinstance(row, dict) and "seq_s" in row]
    return max(rates, default=None)


def targets(figures: dict) -> list[dict]:
    """Each target with its measured value (None: not measured) and whether it is met (None on CPU:
    the targets are for BERT-base on an H100, a CPU run's figures say nothing about them)."""
    cuda = figures["meta"].get("cuda", False)
    rows = [("BERT-base training seq/s at fixed length 128", "seq/s", figure_at(figures, "ours", FIXED, "ours", "seq_s"),
             ">=", 3000),
            ("ours / HF Trainer at fixed length 128, same batches", "x",
             figure_at(figures, "ours", FIXED, "ours_over_trainer"), ">=", 2.0)]
    rows += [(f"ours / HF Trainer on {t} lengths", "x", figure_at(figures, "ours", t, "ours_over_trainer"), ">=", 2.0)
             for t in ("sst2", "qnli", "rte")]
    rows += [("per-run overhead share of an RTE-sized run (3 epochs)", "share",
              figure_at(figures, "overhead", "RTE-sized", "share"), "<", 0.10),
             ("the same, through the finetune step (K = 1, a bundle's non-training share)", "share",
              figure_at(figures, "concurrency", "RTE-sized, 3 epochs", "1", "non_training_share"), "<", 0.10),
             ("a pod's bundle of 8 RTE-sized runs, one by one: its non-training share", "share",
              figure_at(figures, "bundle", "RTE-sized, 3 epochs", "1", "non_training_share"), "<", 0.10),
             ("GLUE sweep estimate (9 tasks, 3 epochs, one seed)", "min", figure_at(figures, "sweep", "total_min"), "<", 10.0),
             ("K runs fused on one GPU, in all (the best K)", "seq/s", figure_at(figures, "fused", "best_seq_s"), ">=", 6000),
             ("K runs side by side on one GPU, in all (the best K)", "seq/s", best(figures, "streams"), ">=", 6000),
             ("K compiled runs side by side, in all (the best K)", "seq/s", best(figures, "compiled"), ">=", 6000),
             ("one compiled run", "seq/s", figure_at(figures, "compiled", "1", "seq_s"), ">=", 3500),
             ("process start to the first training step (BERT-base)", "s",
              figure_at(figures, "start", "bytecode as cached, BERT-base", "to_first_step_s"), "<", 5.0)]
    for bundle in (figures.get("concurrency") or {}):
        for k in ("2", "4"):
            rows.append((f"{bundle}: aggregate speed-up of K = {k} over K = 1", "x",
                         figure_at(figures, "concurrency", bundle, k, "speedup"), "report", None))
    out = []
    for name, unit, value, op, goal in rows:
        met = None
        if cuda and value is not None and goal is not None:
            met = value >= goal if op == ">=" else value < goal
        out.append({"target": name, "unit": unit, "measured": value, "op": op, "goal": goal, "met": met})
    return out


def _shown(value: float, unit: str) -> str:
    return {"seq/s": f"{value:,.0f} seq/s", "x": f"{value:.2f}x", "share": f"{value:.1%}", "min": f"{value:.1f} min",
            "s": f"{value:.1f} s"}[unit]


def render_targets(figures: dict) -> list[str]:
    """The report's last section, recomputed from the figures at every save."""
    figures["targets"] = targets(figures)
    lines = ["## Targets", ""]
    if not figures["meta"].get("cuda", False):
        lines += ["CPU run: the targets are for BERT-base on an H100; these CPU figures neither meet nor miss them.", ""]
    lines += ["| target | goal | measured | met |", "|---|---|---|---|"]
    for t in figures["targets"]:
        shown = "not measured" if t["measured"] is None else _shown(t["measured"], t["unit"])
        goal = "(reported)" if t["goal"] is None else f"{t['op']} {_shown(t['goal'], t['unit'])}"
        met = {True: "yes", False: "**no**", None: ""}[t["met"]]
        lines.append(f"| {t['target']} | {goal} | {shown} | {met} |")
    status = ", ".join(f"{name}: {p['status']}" for name, p in figures["parts"].items())
    return lines + ["", f"Parts: {status or 'none started'}. Elapsed {figures['meta'].get('elapsed_s', 0):.0f} s."]
