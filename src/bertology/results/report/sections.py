"""The sections for what a study varies and measures, beyond its main table: head deltas, curves along a
numeric level axis, the sequential matrix, training loss, perplexity, hidden-state and weight distances,
model size and speed, and the vocabulary.

Each builder takes (results, summary, levels), returns its sections and the analysis tables behind them,
and returns nothing where its data is absent: what a report shows follows from the study's data and
variants, never from its name.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from bertology.results import analysis, conventions, plots
from bertology.results.analysis import HEAD_AXES, ROWS
from bertology.results.cells import cell_text, mean_sd_n, signed
from bertology.results.labels import (
    group_label,
    group_title,
    one_based,
    own_models,
    relabelled,
    shown_columns,
    sized,
    variant_labels,
    weight_layer_names,
)
from bertology.results.report.document import Section, figures_drawn

FORGETTING_STEPS = 6  # evaluation steps the forgetting table prints (the plot and its Parquet keep all)
LOSS_STEPS = 6  # training steps the training-loss table prints (the plot and its Parquet keep all)
LOSS_LINES = 12  # variants the training-loss plot draws (the table and its Parquet keep all)
DESCRIBE = ("n", "mean", "std", "min", "25%", "50%", "75%", "max")


def heads(results, summary, levels):
    """Variants on a layer × head grid (head-reinit): each head's difference from the baseline as a
    matrix and heat map per task, and those differences described per layer, per head and overall."""
    if not set(HEAD_AXES) <= set(levels.columns):
        return [], {}
    deltas = analysis.head_deltas(summary, levels)
    if deltas.is_empty():
        return [], {}
    keys = [k for k in ROWS if k in deltas.columns]
    tables, figures = [], []
    titled = shown_columns(sized(deltas), keys, always=("task", "metric"))
    for i, group in enumerate(sized(deltas).partition_by(keys, maintain_order=True)):
        title = group_title(group, titled)
        layers, heads = sorted(group["layer"].unique()), sorted(group["head"].unique())
        wide = group.pivot(on="head", on_columns=heads, index="layer", values="delta").sort("layer")
        matrix = wide.drop("layer").to_numpy().astype(float)
        p_values = (group.pivot(on="head", on_columns=heads, index="layer", values="p_value").sort("layer")
                    .drop("layer").to_numpy().astype(float))
        shown = pl.DataFrame({"layer": [one_based(v) for v in layers]}).with_columns(
            pl.Series(f"head {one_based(h)}", [signed(v) for v in matrix[:, j]]) for j, h in enumerate(heads))
        baseline = group["baseline_mean"].drop_nulls()
        caption = title + (f" (baseline {baseline[0]:.3f})" if len(baseline) else "")
        tables.append((caption, shown))
        figures.append(plots.heat_map(matrix, [one_based(v) for v in layers], [one_based(h) for h in heads],
                                      name=f"heads-{i}", title=caption, xlabel="head", ylabel="layer", fmt="+.3f",
                                      centre=True, label=f"Δ {group['metric'][0]} vs the baseline",
                                      unclear=~(p_values < 0.05)))
    note = ("Each head variant's mean primary metric minus the baseline's, per task (the college report's "
            "Figures 5–6): green above the baseline, red below, on a colour scale symmetric around 0. Hatched "
            "cells marked n.s.: the 95% interval of the paired difference includes 0 (paired t-test p ≥ 0.05, "
            "before any adjustment for the many heads), or there is no interval (fewer than two seeds). Layers "
            "and heads numbered from 1, as the report does (L1H1: the weights' layer 0, head 0).")
    described = analysis.head_delta_summary(deltas)
    shown = sized(described).with_columns(pl.col("index") + 1)
    shown = shown.select(*shown_columns(shown, keys), "over", "index", "n", *(
        cell_text(lambda x: "—" if x is None else f"{x:.4f}", c, name=c) if c == "std" else cell_text(signed, c, name=c)
        for c in DESCRIBE[1:]))
    summary_note = ("The head deltas described per layer, per head index (both from 1) and over all heads (n, mean, "
                    "sd, min, quartiles, max: the college report's Figures 7–10).")
    return ([Section("Attention heads: difference from the baseline", note, tuple(tables), tuple(figures)),
             Section("Attention heads: summary by layer and by head", summary_note, (("", shown),))],
            {"head_deltas": deltas, "head_delta_summary": described})


def level_curves(results, summary, levels):
    """The primary metric along each numeric level axis (K layers re-initialised, …), a curve per data
    size with the baseline dashed; a named (categorical) axis is the main figure's, not a curve's."""
    head_axes = set(HEAD_AXES) <= set(levels.columns)
    sections, tables = [], {}
    for axis, aliases in analysis.level_axes(levels.drop(HEAD_AXES) if head_axes else levels).items():
        if levels[axis].drop_nulls().n_unique() < 2 or not levels[axis].dtype.is_numeric():
            continue  # a curve needs ordered levels (numbers); named categories are the main figure's bars
        curves = analysis.level_curves(results.tables["runs"], levels, axis)
        if curves.is_empty():
            continue
        tables[f"level_curves_{axis}"] = curves
        # each value of the axis, with the values of the axes that only rename it
        grid = levels.filter(pl.col(axis).is_not_null()).select(axis, *aliases).unique().sort(axis)
        names = {row[0]: " · ".join(f"{a}={v}" for a, v in zip((axis, *aliases), row)) for row in grid.rows()}
        others = [c for c in curves.columns if c in levels.columns and c != axis]
        labelled = sized(curves)
        keys = [*shown_columns(labelled, list(ROWS)), *others]
        shown = (labelled.with_columns(cell_text(mean_sd_n, "mean", "sd", "n"),
                                     pl.col(axis).replace_strict(names, return_dtype=pl.String).alias("_on"))
                 .pivot(on="_on", on_columns=[names[v] for v in grid[axis] if v in set(curves[axis])], index=keys,
                        values="cell"))
        panel_keys = shown_columns(labelled, ["model", "task", "intermediate", "split", "metric"], always=("task",))
        lines = labelled.with_columns(group_label(panel_keys).alias("_panel"),
                                      group_label(["data", *(f"{o}=" for o in others)]).alias("_series"))
        ticks = {v: name.replace(" · ", "\n").removeprefix(f"{axis}=") for v, name in names.items()} if aliases else None
        metrics = curves["metric"].unique()
        base = summary.filter(pl.col("variant") == results.baseline) if results.baseline else summary.clear()
        baseline = ({(p, d): m for p, d, m in sized(base).select(group_label(panel_keys), group_label(["data"]), "mean").rows()}
                    if not others else None)
        figure = plots.line_panels(lines, panel="_panel", series="_series", x=axis, name=f"levels-{axis}",
                                   xlabel=axis, ylabel=metrics[0] if len(metrics) == 1 else "primary metric",
                                   legend="training data", xticks=ticks, metric="metric", baseline=baseline)
        title = f"Curves by {' · '.join((axis, *aliases))}"
        note = (f"The primary metric by `{axis}`, one curve per training-data size: mean ± sd over seeds "
                "(partial-reinitialization report, Figures 1–2; college report, Figure 3)"
                + (f"; dashed, in each curve's colour: `{results.baseline}`, the unmodified model, on the same "
                   "data." if baseline else "."))
        sections.append(Section(title, note, (("", shown.fill_null("—")),), figures_drawn(figure)))
    return sections, tables


def sequential(results, summary, levels):
    """The college report's sequential matrix: intermediate task × final task, a table and a heat map
    per model, variant and size. Its diagonal is the direct fine-tune, as in the report's Figure 2; a task
    fine-tuned after itself, which the figure does not have, gets a table of its own."""
    runs = results.tables["runs"]
    if not results.spec["intermediates"] and not runs.select(
            pl.col("intermediate").is_not_null().any()).collect().item():
        return [], {}
    paper = conventions.of_study(results.name)
    metrics = paper.sequential_metrics
    matrix = analysis.sequential_matrix(runs, metrics)
    intermediates = list(dict.fromkeys([*results.spec["intermediates"],
                                        *(i for i in matrix["intermediate"] if i != "none")]))
    several = matrix.group_by("task").agg(pl.col("split").n_unique()).filter(pl.col("split") > 1)["task"]
    labelled = sized(matrix).with_columns(pl.when(pl.col("task").is_in(several.implode()))
                                   .then(pl.format("{} {}", "task", "split")).otherwise("task").alias("final"),
                                   cell_text(lambda m, s: "—" if m is None else f"{m:.3f} ± {'—' if s is None else f'{s:.3f}'}",
                                         "mean", "sd"))
    keys = [k for k in ("model", "variant", "fraction", "count") if k in matrix.columns]
    tables, figures = [], []
    for i, group in enumerate(labelled.partition_by(keys, maintain_order=True) if keys else [labelled]):
        grid, itself = figure2_layout(group, intermediates)
        finals = group["final"].unique(maintain_order=True).to_list()
        rows = grid["intermediate"].unique(maintain_order=True).to_list()
        shown = grid.pivot(on="final", on_columns=finals, index="intermediate", values="cell").fill_null("—")
        values = grid.pivot(on="final", on_columns=finals, index="intermediate", values="mean")
        title = group_title(group, shown_columns(labelled, keys, always=("variant",)))
        tables.append((title, shown))
        if not itself.is_empty():
            tables.append((f"{title}: each task fine-tuned after itself (not in the report's Figure 2)", itself))
        figures.append(plots.heat_map(values.drop("intermediate").to_numpy().astype(float), rows, finals,
                                      name=f"sequential-{i}", title=title, xlabel="final task",
                                      ylabel="intermediate task", fmt=".3f", centre=False))
    note = ("Rows: the task fine-tuned on first; columns: the final task (the report's Figure 2 has them the "
            "other way round), its primary metric, mean ± sd over seeds. The diagonal is the direct fine-tune, "
            "marked \"(direct)\", as in Figure 2 (\"The diagonal scores are the baseline scores\", the baseline "
            "being to \"finetune directly on the final task without an intermediate task\"); row \"none\" holds "
            "the direct fine-tune of a final task that is not an intermediate task. A task fine-tuned after "
            "itself, which Figure 2 does not have, is in a table of its own, beside its direct fine-tune. The "
            "heat map shades each column from its lowest to its highest value."
            + "".join(f" {task.upper()}: {metric}, as the report's Figure 2 shows." for task, metric in metrics.items()
                      if task in set(matrix["task"]))
            + " " + final_head_note(results.spec, paper))
    return [Section("Sequential fine-tuning", note, tuple(tables), tuple(figures))], {"sequential_matrix": matrix}


def figure2_layout(group: pl.DataFrame, intermediates: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One group's sequential matrix (rows of intermediate, task, final, cell, mean) as the report's Figure 2
    lays it out: the direct fine-tune in the diagonal cell of its task where the task is also an
    intermediate task (row "none" otherwise), the runs of a task after itself left out; and those runs
    apart, each beside its task's direct fine-tune."""
    direct = pl.col("intermediate") == "none"
    diagonal = direct & pl.col("task").is_in(intermediates)
    after_itself = pl.col("intermediate") == pl.col("task")
    order = ["none", *intermediates]
    grid = (group.filter(~after_itself)
            .with_columns(pl.when(diagonal).then(pl.format("{} (direct)", "cell")).otherwise("cell").alias("cell"),
                          pl.when(diagonal).then(pl.col("task")).otherwise("intermediate").alias("intermediate"))
            .sort(pl.col("intermediate").replace_strict(order, range(len(order)), default=len(order)),
                  maintain_order=True))
    itself = (group.filter(after_itself).select("final", pl.col("cell").alias("after itself"))
              .join(group.filter(direct).select("final", pl.col("cell").alias("direct (the diagonal)")),
                    on="final", how="left", maintain_order="left")
              .rename({"final": "task"}).fill_null("—"))
    return grid, itself


def final_head_note(spec: dict, paper: conventions.Conventions) -> str:
    """Which task head the sequential runs' final task started with, and what the study assumes of the report.
    A plan without the setting made new heads, the only kind before it existed."""
    applied = spec.get("final_head", "new")
    text = f"The final task's head: {FINAL_HEADS[applied]} (`final_head={applied}`)."
    if paper.final_head is not None:
        assumed, why = paper.final_head
        text += f" {why}"
        if applied != assumed:
            text += f" This run differs from that assumption (`final_head={assumed}` would follow it)."
    return text


FINAL_HEADS = {"new": "a new classifier, drawn afresh", "carried": "the intermediate run's classifier, carried"}


def training_loss(results, summary, levels):
    """The college report's Figures 1 and 4: training loss against iterations, a panel per task."""
    curves = results.tables.get("curves")
    if curves is not None:
        curves = analysis.beside_study_model(curves, own_models(results), results.spec.get("models", []))
    loss = analysis.training_loss_curve(curves) if curves is not None else pl.DataFrame()
    if loss.is_empty():
        return [], {}
    labels = variant_labels(results.spec["variants"])
    lines = relabelled(sized(loss), labels)
    panel_keys = shown_columns(lines, ["model", "task", "intermediate", "fraction", "count"], always=("task",))
    lines = lines.with_columns(group_label(panel_keys).alias("_panel"))
    variants = [labels[v] for v in results.variants if labels[v] in set(lines["variant"])]
    drawn = variants[:LOSS_LINES]
    figure = plots.line_panels(lines.filter(pl.col("variant").is_in(drawn)), panel="_panel", series="variant",
                               x="step", name="training-loss", xlabel="training step (iteration)",
                               ylabel="training loss", legend="variant")
    steps = loss["step"].unique().sort()
    picked = steps.gather(np.unique(np.linspace(0, len(steps) - 1, LOSS_STEPS).round().astype(int)))
    shown = (lines.filter(pl.col("step").is_in(picked.implode()))
             .with_columns(cell_text(lambda m, s: f"{m:.3f} (± {'—' if s is None else f'{s:.3f}'})", "mean", "sd"),
                           pl.format("step {}", "step").alias("_step"))
             .pivot(on="_step", on_columns=[f"step {s}" for s in picked], index=["_panel", "variant"], values="cell")
             .rename({"_panel": " · ".join(panel_keys)}).fill_null("—"))
    drawing = ("one line per variant" if figure is not None
               else "no plot: each run logged its loss at one step only, so there is no curve to draw")
    note = ("Training loss averaged over each `log_every` steps, against the training step, mean (± sd) over seeds, "
            f"{drawing} (the college report's Figures 1 and 4: loss against iterations); the table gives a "
            "few of the steps, tables/training_loss.parquet all of them."
            + (f" The plot draws the first {LOSS_LINES} of {len(variants)} variants."
               if figure is not None and len(variants) > LOSS_LINES else ""))
    return [Section("Training loss", note, (("", shown),), figures_drawn(figure))], {"training_loss": loss}


def perplexity(results, summary, levels):
    """A masked-LM study's perplexity: the forgetting curve on every eval split during fine-tuning, and
    each variant's perplexity at its best point (the cross-lingual report's Tables 1-2)."""
    sections, tables = [], {}
    curves = results.tables.get("curves")
    forgetting = analysis.forgetting_curve(curves) if curves is not None else pl.DataFrame()
    if not forgetting.is_empty():
        tables["forgetting_curve"] = forgetting
        lines = sized(forgetting)
        panel_keys = shown_columns(lines, ["model", "variant", "task", "intermediate", "fraction", "count"],
                            always=("variant",))
        lines = lines.with_columns(group_label(panel_keys).alias("_panel"))
        # the variants side by side within each eval split: what forgets more, on one log axis
        by_split = relabelled(lines, variant_labels(results.spec["variants"])).with_columns(
            group_label([*shown_columns(lines, ["model", "task", "intermediate", "fraction", "count"], always=("task",)), "split"])
            .alias("_split"))
        figure = plots.line_panels(by_split, panel="_split", series="variant", x="step", name="forgetting",
                                   xlabel="training step", ylabel="perplexity", legend="variant")
        steps = forgetting["step"].unique().sort()
        picked = steps.gather(np.unique(np.linspace(0, len(steps) - 1, FORGETTING_STEPS).round().astype(int)))
        splits = forgetting["split"].unique(maintain_order=True).to_list()
        panels = lines["_panel"].unique(maintain_order=True).to_list()
        shown = (lines.filter(pl.col("step").is_in(picked.implode()))
                 .sort(pl.col("_panel").replace_strict(panels, range(len(panels))), "step", maintain_order=True)
                 .with_columns(cell_text(lambda m, s: f"{m:.2f} (± {'—' if s is None else f'{s:.2f}'})", "mean", "sd"))
                 .pivot(on="split", on_columns=splits, index=["_panel", "step"], values="cell")
                 .rename({"_panel": " · ".join(panel_keys)}).fill_null("—"))
        note = ("Perplexity on every eval split during fine-tuning, mean (± sd) over seeds, at a few of the "
                "evaluation steps (all of them in the plot and in tables/forgetting_curve.parquet): the "
                "cross-lingual report's Table 1 and Figure 2. The plot has a panel per eval split, the variants "
                "as lines in it, on a log axis shared by all panels.")
        sections.append(Section("Forgetting curve", note, (("", shown),), figures_drawn(figure)))
    best = analysis.freezing_perplexity(results.tables["runs"])
    if not best.is_empty():
        tables["freezing_perplexity"] = best
        splits = best["split"].unique(maintain_order=True).to_list()
        keys = shown_columns(sized(best), ["model", "task", "intermediate", "fraction", "count", "variant"],
                      always=("variant",))
        shown = (sized(best).with_columns(cell_text(mean_sd_n, "mean", "sd", "n"))
                 .pivot(on="split", on_columns=splits, index=keys, values="cell").fill_null("—"))
        note = ("Each variant's perplexity at its best evaluation point on every eval split, mean ± sd over seeds "
                "(the cross-lingual report's Table 2: freezing schemes).")
        sections.append(Section("Perplexity by eval split", note, (("", shown),)))
    return sections, tables


def activations(results, summary, levels):
    """The hidden-state distance to the native model per layer during fine-tuning (cross-lingual report)."""
    if "activation_distance" not in results.tables:
        return [], {}
    curves = analysis.activation_distance_curves(results.tables["activation_distance"])
    if curves.is_empty():
        return [], {}
    lines = sized(curves)
    panel_keys = shown_columns(lines, ["model", "variant", "task", "intermediate", "fraction", "count", "reference"],
                        always=("variant",))
    lines = lines.with_columns(group_label(panel_keys).alias("_panel"),
                               pl.when(pl.col("layer") == 0).then(pl.lit("embeddings"))
                               .otherwise(pl.format("layer {}", "layer")).alias("_layer"))
    figure = plots.line_panels(lines, panel="_panel", series="_layer", x="step", name="activations",
                               xlabel="training step", ylabel="mean L2 distance", legend="hidden states")
    panels = lines["_panel"].unique(maintain_order=True).to_list()
    last = lines.filter(pl.col("step") == pl.col("step").max().over("_panel"))
    shown = (last.with_columns(cell_text(mean_sd_n, "mean", "sd", "n"))
             .pivot(on="_panel", on_columns=panels, index="_layer", values="cell").rename({"_layer": "layer"})
             .fill_null("—"))
    note = ("Mean L2 distance between the fine-tuned model's hidden states and the native reference model's on a "
            "fixed batch, per layer (the embeddings' output, then layers 1 to L) during fine-tuning, mean ± sd over seeds; the table gives "
            "the last evaluation step (the cross-lingual report's Figures 1, 3 and A.1–A.4).")
    return ([Section("Hidden-state distance to the native model", note, (("", shown),), figures_drawn(figure))],
            {"activation_distance": curves})


def weights(results, summary, levels):
    """How far fine-tuning moved the weights per layer, by training-data size (partial-reinitialization report,
    Figure 3); with one data size there is nothing to compare, so no section."""
    if "weight_distance" not in results.tables:
        return [], {}
    distances = results.tables["weight_distance"]
    sizes = distances.select("fraction", "count").unique().collect().height
    if max(len(results.spec["sizes"]), sizes) < 2:
        return [], {}
    per_module = analysis.weight_distance_by_size(distances)
    per_layer = analysis.weight_distance_by_size(distances, per="layer")
    projection = analysis.weight_distance_by_size(distances, per="output-projection")
    lines = sized(projection if projection.height else per_layer)
    panel_keys = shown_columns(lines, ["model", "variant", "task", "intermediate"], always=("task",))
    lines = lines.with_columns(group_label(panel_keys).alias("_panel"))
    names = weight_layer_names(per_module)
    figure = plots.line_panels(lines, panel="_panel", series="data", x="layer", name="weights",
                               xlabel="layer", ylabel="L2 distance", legend="training data",
                               xticks={v: names[v] for v in sorted(names)})
    sizes_seen = lines["data"].unique(maintain_order=True).to_list()
    shown = (lines.with_columns(cell_text(mean_sd_n, "mean", "sd", "n"))
             .pivot(on="data", on_columns=sizes_seen, index=[*panel_keys, "layer"], values="cell")
             .with_columns(pl.col("layer").replace_strict(names, return_dtype=pl.String)).fill_null("—"))
    without = analysis.runs_without_projection(distances)
    measured = ("each layer's output dense weight matrix (the partial-reinitialization report's Figure 3: \"the weight "
                "matrices of the linear projections contained in the output sub-layer\")"
                + (f"; {without} runs analysed before that measure existed are left out" if without else "")
                if projection.height else "all of each layer's weights (embeddings, layers 1 to L, pooler; these "
                "runs were analysed before the output-projection measure existed)")
    note = (f"L2 distance between the built and the fine-tuned weights of {measured}, by training-data size, mean ± "
            "sd over seeds; whole layers in tables/weight_distance_by_layer.parquet, per module in "
            "tables/weight_distance.parquet.")
    return ([Section("Weight distance by training-data size", note, (("", shown),), figures_drawn(figure))],
            {"weight_distance": per_module, "weight_distance_by_layer": per_layer,
             "weight_distance_output_projection": projection})


def profile(results, summary, levels):
    """Parameters and inference speed, only where the variants' sizes differ: otherwise the speeds
    differ by measurement noise alone and the numbers stay in tables/model_profile.parquet."""
    if "model_profile" not in results.tables:
        return [], {}
    measured = analysis.model_profile_summary(results.tables["model_profile"], results.baseline)
    size = [c for c in ("n_params", "encoder_layers") if c in measured.columns]
    # per study model; with one, a variant's own model (DistilBERT) is compared with it too
    by_model = ["model"] if "model" in measured.columns and len(results.spec.get("models", [])) > 1 else []
    resized = bool(size) and (measured.group_by(by_model or pl.lit(0)).agg(pl.struct(size).n_unique().alias("_n"))
                              ["_n"].max() > 1)
    if not resized:
        # every variant has its model's size: their speeds differ by measurement noise alone (a head
        # re-initialised, layers reversed), not a finding; the numbers stay in tables/model_profile.parquet
        return [], {"model_profile": measured}
    keys = shown_columns(measured, ["model", "device", "batch_size", "seq_len", "variant"], always=("variant",))
    cost = ([cell_text(lambda x: "—" if x is None else f"{x:.2f}", "intervention_cpu_seconds", name="cost to make (CPU s)")]
            if "intervention_cpu_seconds" in measured.columns else [])
    shown = relabelled(measured, variant_labels(results.spec["variants"])).select(
        *keys, (pl.col("n_params") / 1e6).round(1).alias("parameters (M)"), pl.col("encoder_layers").alias("layers"),
        *cost, cell_text(lambda m, s, n: f"{m:,.1f} ± {'—' if s is None else f'{s:,.1f}'} (n={n})", "mean", "sd", "n",
                     name="examples/s"),
        cell_text(lambda x: "—" if x is None else f"{x:.2f}×", "speedup", name="speed"))
    note = ("Parameters, encoder layers, the intervention's cost and inference speed of each variant, with the "
            "speed relative to the unmodified model on the same device (the monolingual report's Table 7).")
    return [Section("Model size and inference speed", note, (("", shown),))], {"model_profile": measured}


def vocabulary(results, summary, levels):
    """The vocabulary analyses of the study's models: English-like word-pieces, overlap with the
    reference, and English-like contexts in a corpus (the monolingual report's Table 2)."""
    if results.vocabulary is None:
        return [], {}
    table = analysis.vocabulary_table(results.vocabulary)
    shown = table.select(
        "model", "reference", *(cell_text(lambda x: f"{x:,}", column, name=name) for column, name in (
            ("vocab_size", "word-pieces"), ("english_like", "English-like"), ("overlap", "shared with the reference"))),
        pl.col("corpus").fill_null("—"),
        cell_text(lambda x: "—" if x is None else f"{x:.1%}", "english_window_share", name="English-like contexts"))
    note = ("English-like word-pieces (`(##)?[A-Za-z]+`) of each model's vocabulary and how many it shares with "
            "the reference vocabulary, and the share of English-like 10-piece contexts in a corpus (the "
            "monolingual report's Table 2).")
    return [Section("Vocabulary", note, (("", shown),))], {"vocabulary": table}


# The kinds of word-embedding row a shuffle tells apart (bertology.interventions.shuffle_embeddings.KINDS),
# as the report names them.
ROW_KINDS = {"english_like": "English-like", "other": "other", "special": "special", "reserved": "reserved",
             "no_token": "no token"}


def embedding_rows(results, summary, levels):
    """Which word-embedding rows each shuffled variant moved and which it kept, per model, from its
    checkpoint's manifest: what "we only map English tokens to English embedding vectors" came to on each
    model's vocabulary, in numbers."""
    facts = [f for f in results.intervention_facts if f["intervention"] == "shuffle-embeddings"]
    if not facts:
        return [], {}
    labels = variant_labels(results.spec["variants"])
    long, shown = [], []
    for fact in facts:
        group_of = {kind: group for group in fact["shuffled"] for kind in group}
        cells = {}
        for kind, count in fact["rows"].items():
            group = group_of.get(kind)
            long.append({"model": fact["model"], "variant": fact["variant"], "step": fact["step"], "kind": kind,
                         "rows": count, "fate": "kept" if group is None else "shuffled",
                         "group": None if group is None else "+".join(group)})
            together = ", ".join(ROW_KINDS.get(k, k) for k in group or () if k != kind)
            fate = "kept" if group is None else f"shuffled with {together}" if together else "shuffled"
            cells[ROW_KINDS.get(kind, kind)] = f"{count:,} {fate}"
        shown.append({"model": fact["model"], "variant": labels.get(fact["variant"], fact["variant"]), **cells})
    note = ("The word-embedding rows of each shuffled variant's checkpoint, by kind, from its manifest: shuffled "
            "rows trade places only within their group (English-like among English-like, other among other, or "
            "\"with\" the kinds named), kept rows keep their pre-trained vectors. English-like: the whole piece "
            "matches `(##)?[A-Za-z]+` (the monolingual report's RegEx, §4.1); special: the tokenizer's special "
            "tokens ([CLS], [SEP], [PAD], [MASK], [UNK]); reserved: the `[unusedN]` placeholder pieces (kept, "
            "assumed: the report preserves the special tokens' alignments and does not name these); no token: "
            "rows of a padded table beyond the tokenizer's vocabulary.")
    return ([Section("Shuffled word-embedding rows", note, (("", pl.DataFrame(shown).fill_null("—")),))],
            {"embedding_rows": pl.DataFrame(long)})
