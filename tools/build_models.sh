#!/usr/bin/env bash
# Rebuilds the bundled nano models and the transformers goldens on the GPU box, from scratch, with fixed seeds.
#
#   bash tools/build_models.sh OUT            # all stages; logs and a copy of the results land in OUT
#   STAGES="corpus drafter" bash tools/build_models.sh OUT   # only some stages (the corpus is not checked in)
#   CORPUS_FROM=build-nano/corpus STAGES="target goldens" bash tools/build_models.sh OUT
#       # use a gzipped corpus made on another machine (carry build-nano with the device tool)
#
# Stages, in order: corpus -> tokenizer -> target -> drafter -> goldens. WORK (default /tmp/lanespark-build) holds
# the corpus and other scratch data. Results are written into the repo paths (models/nano/, tests/golden/) and, for
# bringing them back from the device tool, packed into OUT/results.tar.part-* (15 MiB pieces; unpack with
# `cat results.tar.part-* | tar -x -C REPO`). Dry run at toy size on a CPU (the knobs are environment variables):
#   PYTHON=.venv-tools/bin/python STAGES="corpus tokenizer target" VOCAB=1024 \
#   CORPUS_ARGS="--code-mb 2 --prose-mb 1 --chat-mb 1 --eval-per-kind 8 --workers 2" \
#   TARGET_ARGS="--preset tiny --batch 2 --seq-len 64" TARGET_STEPS=10 bash tools/build_models.sh /tmp/out
set -euo pipefail
OUT=${1:?usage: bash tools/build_models.sh OUT}
STAGES=${STAGES:-"corpus tokenizer target drafter goldens"}
WORK=${WORK:-/tmp/lanespark-build}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
cd "$(dirname "$0")/.."
mkdir -p "$OUT" "$WORK"
has() { [[ " $STAGES " == *" $1 "* ]]; }
stamp() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/build.log"; }
RESULTS=()

if [[ -n "${CORPUS_FROM:-}" ]]; then
  # A corpus built elsewhere by tools/corpus.py and gzipped (the checked-in models were built this way, see
  # docs/models.md): unpack it instead of running the corpus stage.
  stamp "corpus from $CORPUS_FROM"
  mkdir -p "$WORK/corpus"
  for f in "$CORPUS_FROM"/*.jsonl.gz; do gunzip -c "$f" > "$WORK/corpus/$(basename "$f" .gz)"; done
elif has corpus; then
  stamp "corpus"
  $PY tools/corpus.py --out "$WORK/corpus" --eval-out models/nano/eval_prompts.json \
      ${CORPUS_ARGS:---code-mb 40 --prose-mb 15 --chat-mb 20 --max-files 32000} 2>&1 | tee "$OUT/corpus.log"
  cp "$WORK/corpus/stats.json" "$OUT/corpus_stats.json"
  RESULTS+=(models/nano/eval_prompts.json)
fi

if has tokenizer; then
  stamp "tokenizer"
  $PY tools/train_tokenizer.py --corpus "$WORK/corpus" --out models/nano/target --vocab-size "${VOCAB:-8192}" --seed 7 \
      2>&1 | tee "$OUT/tokenizer.log"
  RESULTS+=(models/nano/target/tokenizer.json models/nano/target/tokenizer_config.json)
fi

if has target; then
  stamp "target"
  rm -f models/nano/target/model*.safetensors* models/nano/target/config.json models/nano/target/generation_config.json
  $PY tools/train_target.py --corpus "$WORK/corpus" --tokenizer models/nano/target --out models/nano/target \
      --log-dir "$OUT" --eval-prompts models/nano/eval_prompts.json --seed 1234 \
      ${TARGET_STEPS:+--steps "$TARGET_STEPS"} --minutes "${TARGET_MINUTES:-2.0}" ${TARGET_ARGS:-} 2>&1 | tee "$OUT/target.log"
  RESULTS+=(models/nano/target)
fi

# ---- drafter steps (tools-drafter): add them below, guarded by `if has drafter; then ... fi`, and append the
# ---- paths to bring back to RESULTS. ----
if has drafter; then
  # Regenerate responses with the target, train (DRAFTER_STEPS / DRAFTER_SECONDS / DRAFTER_ARGS override), then
  # calibrate, evaluate and write the goldens. Later steps may fail without losing the trained drafter.
  stamp "drafter: regenerate + train"
  rm -rf "$WORK/drafter" models/nano/drafter
  $PY tools/train_drafter.py --target models/nano/target --work "$WORK/drafter" \
      --out models/nano/drafter --log-dir "$OUT" --seed 2024 ${DRAFTER_STEPS:+--steps "$DRAFTER_STEPS"} \
      --max-seconds "${DRAFTER_SECONDS:-300}" ${DRAFTER_ARGS:-} 2>&1 | tee "$OUT/drafter.log"
  RESULTS+=(models/nano/drafter)
  stamp "drafter: calibrate"
  $PY tools/calibrate_confidence.py --target models/nano/target --drafter models/nano/drafter \
      --regen "$WORK/drafter/regen.pt" --report "$OUT/calibration.json" 2>&1 | tee "$OUT/calibrate.log" \
      || stamp "drafter: calibration FAILED"
  stamp "drafter: eval"
  $PY tools/eval_acceptance.py --target models/nano/target --drafter models/nano/drafter \
      --prompts models/nano/eval_prompts.json ${EVAL_ARGS:-} --report "$OUT/eval_acceptance.json" \
      --markdown "$OUT/eval_acceptance.md" 2>&1 | tee "$OUT/eval.log" || stamp "drafter: eval FAILED"
  stamp "drafter: goldens"
  $PY tools/make_drafter_goldens.py --out tests/golden/dspark --nano models/nano 2>&1 | tee "$OUT/drafter_goldens.log" \
      && RESULTS+=(tests/golden/dspark tests/golden/dspark_nano) || stamp "drafter: goldens FAILED"
fi
# ---- end of drafter steps ----

if has goldens; then
  stamp "goldens"
  $PY tools/make_goldens.py --out tests/golden ${GOLDENS_ARGS:---bf16} 2>&1 | tee "$OUT/goldens.log"
  RESULTS+=(tests/golden/lfm2_dense tests/golden/lfm2_moe)
fi

stamp "packing ${RESULTS[*]}"
tar -cf - "${RESULTS[@]}" | split -b 15M -d - "$OUT/results.tar.part-"
ls -la "$OUT" | tee -a "$OUT/build.log"
stamp "done"
