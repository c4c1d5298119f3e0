#!/usr/bin/env bash
# Reproduce kb's shipped reranker (models/reranker/) from a clean checkout, then measure it.
#
#   bash training/reranker/run.sh            # venv + artifacts + prepare + train + export + evaluate
#
# Environment (all optional): KB_DATA (default ../shared/data next to the checkout),
# KB_FIXTURES (../shared/fixtures), OUT (training/out), ART (artifacts folder; default
# $OUT/artifacts, built here with --no-reranker when missing), EXPORT (default models/reranker),
# SKIP_EVAL=1 to stop after the export.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DATA="${KB_DATA:-$ROOT/../shared/data}"
FIXTURES="${KB_FIXTURES:-$ROOT/../shared/fixtures}"
OUT="${OUT:-$ROOT/training/out}"
ART="${ART:-$OUT/artifacts}"
EXPORT="${EXPORT:-$ROOT/models/reranker}"
VENV="$ROOT/training/.venv"
PY="$VENV/bin/python"

# The shipped recipe: change these and MODEL_CARD.md together.
SEED=13
PAIR_GROUPS="hugo=1200,scifact=900,cranfield=450,cisi=450"
NEGATIVES=4
LAYERS=2
MAX_LEN=192
EPOCHS=1
LR=2e-4
HEAD_LR=1e-3

t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*" >&2; }

if [ ! -x "$PY" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
  "$VENV/bin/pip" install -q -e "$ROOT[build]"
fi

mkdir -p "$OUT" "$ART"
for set in hugo scifact cranfield cisi; do
  if [ ! -f "$ART/$set.kb" ]; then
    say "building $ART/$set.kb"
    if [ "$set" = hugo ]; then
      "$VENV/bin/kb-build" "$DATA/hugo-docs/content/en" -o "$ART/$set.kb" --no-reranker --quiet
    else
      "$VENV/bin/kb-build" --jsonl "$DATA/$set/corpus.jsonl" -o "$ART/$set.kb" --no-reranker --quiet
    fi
  fi
done

say "prepare: derived pairs + kb-mined negatives"
"$PY" "$HERE/prepare.py" --art-dir "$ART" --data "$DATA" --fixture "$FIXTURES/hugo-docs.json" \
  --out "$OUT/pairs.jsonl" --seed "$SEED" --groups "$PAIR_GROUPS" --negatives "$NEGATIVES"

say "train: L$LAYERS, max_len $MAX_LEN, $EPOCHS epoch(s)"
"$PY" "$HERE/train.py" --pairs "$OUT/pairs.jsonl" --out "$OUT/model" --layers "$LAYERS" --max-len "$MAX_LEN" \
  --epochs "$EPOCHS" --lr "$LR" --head-lr "$HEAD_LR" --fresh-pooler --seed "$SEED" --threads 2 --export "$EXPORT"

if [ "${SKIP_EVAL:-0}" != 1 ]; then
  say "evaluate: kb bench with and without rerank"
  "$PY" "$HERE/evaluate.py" --model "$EXPORT" --art-dir "$ART" --data "$DATA" --fixtures "$FIXTURES" --out "$OUT/eval"
fi
say "done: $EXPORT ($(du -sh "$EXPORT" | cut -f1)); metrics in $OUT/eval/eval.md"
