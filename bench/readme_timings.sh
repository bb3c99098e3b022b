#!/usr/bin/env bash
# How long each of the README's commands takes for a newcomer: a fresh clone of this repository's HEAD,
# no pip, uv, Hugging Face or bertology cache, each command timed as the README gives it, one after the
# other. Run it on an idle machine (it prints the load average before each command) and copy the table
# into the README and docs/measurements.md.
#
#   bash bench/readme_timings.sh [WORKDIR]      # WORKDIR: where the clone goes (default: a new temp dir)
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=${1:-$(mktemp -d /tmp/bertology-first-hour.XXXXXX)}
mkdir -p "$work"
git clone -q "$repo" "$work/bertology"
cd "$work/bertology"
export PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1 HF_HOME="$work/hf" BERTOLOGY_CACHE="$work/cache"
log="$work/timings.tsv"
printf 'command\tseconds\texit\tload (1 min) before\n' > "$log"

timed() {  # timed COMMAND...: runs it from the clone, its output in $work/NAME.log, a row in timings.tsv
  local load start end rc=0
  load=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s%N)
  "$@" > "$work/$(echo "$*" | tr -c 'a-zA-Z0-9' '_' | cut -c1-60).log" 2>&1 || rc=$?
  end=$(date +%s%N)
  printf '%s\t%d.%d\t%s\t%s\n' "$*" $(((end - start) / 1000000000)) $(((end - start) / 100000000 % 10)) "$rc" "$load" | tee -a "$log"
}

echo "clone of $(git rev-parse --short HEAD) in $work; $(nproc) cores"
timed make install
timed .venv/bin/bertology studies
timed .venv/bin/bertology run workflows/reversed-layers.yaml -p preset=tiny
timed .venv/bin/bertology run workflows/reversed-layers.yaml -p preset=tiny
timed .venv/bin/bertology run workflows/reversed-layers.yaml --dry-run
timed make demo
timed .venv/bin/mkdocs build --strict
timed make test
column -t -s $'\t' "$log"
