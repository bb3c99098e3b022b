"""What a study's report shows because of the paper it reproduces, and the papers' labels: 1-based layers
and heads, MRPC by accuracy in the sequential matrix, DistilBERT beside BERT with its difference, and the
monolingual report's best run beside mean ± sd."""

from __future__ import annotations

import polars as pl
import pytest

from bertology.results import analysis, conventions
from bertology.results.labels import variant_labels, weight_layer_names
from bertology.results.report import build_report, markdown
from bertology.results.study_results import StudyResults, with_defaults


def _runs(rows: list[dict]) -> pl.DataFrame:
    base = {"model": "bert", "intermediate": None, "split": "validation", "fraction": None, "count": None}
    return pl.from_dicts([{**base, **r, "run_id": f"{r['variant']}-{r['task']}-{r.get('intermediate')}-{r['seed']}"}
                          for r in rows], infer_schema_length=None)


def _results(name: str, runs: pl.DataFrame, variants: list[dict], **spec) -> StudyResults:
    spec = with_defaults({"preset": "paper", "models": ["bert"], "seeds": [1, 2, 3], "variants": variants, **spec})
    return StudyResults(name, "id", spec, [], [], {"runs": runs.lazy()}, [])


def test_heads_and_layers_are_labelled_from_one_but_stored_from_zero():
    heads = [{"name": f"L{layer}H{head}", "interventions": [], "levels": {"layer": layer, "head": head}}
             for layer in (0, 11) for head in (0, 11)]
    variants = [{"name": "baseline", "interventions": []}, *heads]
    assert variant_labels(variants) == {"baseline": "baseline", "L0H0": "L1H1", "L0H11": "L1H12", "L11H0": "L12H1",
                                        "L11H11": "L12H12"}
    rows = [{"variant": v["name"], "task": "cola", "metric": "matthews_corrcoef", "primary": True, "seed": s,
             "value": 0.5 + 0.01 * s + (0.0 if v["name"] == "baseline" else -0.1)} for v in variants for s in (1, 2, 3)]
    report = build_report(_results("head-reinit", _runs(rows), variants))
    text = markdown(report)
    assert "| layer | head 1 | head 12 |" in text  # the college report's "attention head 6 in layer 12"
    assert "| 1 | -0.1000 | -0.1000 |" in text and "| 12 | -0.1000 | -0.1000 |" in text
    assert "| L1H1 |" in text and "L0H0" not in text
    # the stored analysis tables keep the weights' 0-based indices and the variants' names
    deltas = report.tables["head_deltas"]
    assert sorted(deltas["layer"].unique()) == [0, 11] and "L0H0" in set(deltas["variant"])


def test_weight_distance_names_embeddings_and_pooler():
    per_module = pl.DataFrame({"module": ["embeddings", "layer.0.output", "layer.0.intermediate", "layer.1.output",
                                          "pooler"], "layer": [-1, 0, 0, 1, 2]})
    assert weight_layer_names(per_module) == {-1: "embeddings", 0: "1", 1: "2", 2: "pooler"}
    # a model without a pooler (DistilBERT): its last layer is a layer
    assert weight_layer_names(per_module.filter(pl.col("module") != "pooler"))[1] == "2"


def test_sequential_matrix_shows_mrpc_accuracy_as_the_college_report():
    """College report, Figure 2: "MRPC  0.757  0.776  0.732  0.786  acc" (its Metric column)."""
    assert conventions.of_study("sequential-finetune").sequential_metrics == {"mrpc": "accuracy"}
    rows = []
    for after in (None, "cola"):
        for s in (1, 2):
            rows += [{"variant": "pre-trained", "task": "mrpc", "intermediate": after, "seed": s, "metric": "f1",
                      "primary": True, "value": 0.85},
                     {"variant": "pre-trained", "task": "mrpc", "intermediate": after, "seed": s, "metric": "accuracy",
                      "primary": False, "value": 0.75 + 0.01 * s},
                     {"variant": "pre-trained", "task": "cola", "intermediate": after, "seed": s,
                      "metric": "matthews_corrcoef", "primary": True, "value": 0.5}]
    runs = _runs(rows)
    matrix = analysis.sequential_matrix(runs, {"mrpc": "accuracy"})
    assert dict(zip(matrix["task"], matrix["metric"])) == {"mrpc": "accuracy", "cola": "matthews_corrcoef"}
    assert matrix.filter(pl.col("task") == "mrpc")["mean"].to_list() == pytest.approx([0.765, 0.765])
    assert set(analysis.sequential_matrix(runs)["metric"]) == {"f1", "matthews_corrcoef"}  # by default: primary
    variants = [{"name": "pre-trained", "interventions": []}]
    text = markdown(build_report(_results("sequential-finetune", runs, variants, intermediates=["cola"])))
    # CoLA, an intermediate task too, has its direct fine-tune on the diagonal; MRPC's is in row none
    assert "| none | 0.765 ± 0.007 | — |" in text and "MRPC: accuracy" in text
    assert "| cola | 0.765 ± 0.007 | 0.500 ± 0.000 (direct) |" in text
    # a study of another name shows the primary metric
    other = markdown(build_report(_results("my-sequential", runs, variants, intermediates=["cola"])))
    assert "| none | 0.850 ± 0.000 | — |" in other


def test_distilbert_sits_beside_bert_with_a_difference_paired_on_seeds():
    variants = [{"name": "base", "interventions": []},
                {"name": "distil", "model": "distilbert", "interventions": []}]
    base = {1: 0.80, 2: 0.82, 3: 0.84}
    distil = {1: 0.77, 2: 0.80, 3: 0.80}
    rows = [{"variant": "base", "task": "rte", "metric": "accuracy", "primary": True, "seed": s, "value": v}
            for s, v in base.items()]
    rows += [{"variant": "distil", "model": "distilbert", "task": "rte", "metric": "accuracy", "primary": True,
              "seed": s, "value": v} for s, v in distil.items()]
    report = build_report(_results("layer-removal", _runs(rows), variants))
    main = report.tables["main"]
    assert main["model"].unique().to_list() == ["bert"]  # one row: DistilBERT in BERT's row
    row = main.filter(pl.col("variant") == "distil").row(0, named=True)
    from scipy import stats

    assert row["delta"] == pytest.approx(sum(distil.values()) / 3 - sum(base.values()) / 3)
    assert row["p_value"] == pytest.approx(stats.ttest_rel(list(distil.values()), list(base.values())).pvalue)
    text = markdown(report)
    assert "| bert | rte | validation | accuracy | -0.030 (p=" in text
    assert "`distil` is distilbert" in text
    # with several study models the variant keeps its own rows (no study model to sit beside)
    several = analysis.beside_study_model(_runs(rows), {"distil": "distilbert"}, ["bert", "roberta"]).collect()
    assert set(several["model"]) == {"bert", "distilbert"}


@pytest.mark.parametrize("study", ["reversed-layers", "foreign-bert", "shuffled-embeddings", "init-distribution",
                                   "english-embeddings", "layer-removal"])
def test_the_monolingual_studies_report_the_best_run_beside_mean_and_sd(study):
    """Monolingual report §7: the best epoch of the best run, reported beside the mean over three runs."""
    variants = [{"name": "pre-trained", "interventions": []}, {"name": "clean", "interventions": []}]
    rows = [{"variant": v, "task": "rte", "metric": "accuracy", "primary": True, "seed": s,
             "value": 0.6 + 0.01 * s + (0.1 if v == "pre-trained" else 0.0)}
            for v in ("pre-trained", "clean") for s in (1, 2, 3)]
    text = markdown(build_report(_results(study, _runs(rows), variants)))
    assert "## Main table" in text and "## Best run" in text
    assert "| bert | rte | validation | accuracy | 0.730 (seed 3) | 0.630 (seed 3) |" in text
    # the other papers' studies do not report it unless asked
    for other in ("partial-reinit", "head-reinit", "crosslingual-mlm", "someone-elses-study"):
        shown = markdown(build_report(_results(other, _runs(rows), variants)))
        assert "## Best run" not in shown
        assert "## Best run" in markdown(build_report(_results(other, _runs(rows), variants), best_of_runs=True))
