#!/usr/bin/env bash
# The paper path on a GPU machine in under 5 minutes: the device figures (gpu_smoke.py) and 2-step data-
# parallel runs (DDP, then FSDP2 of student and teacher) over every visible GPU through torchrun (NCCL); with
# one GPU those runs are skipped, on a machine without one everything runs in CPU mode (scaled-down shapes,
# 2 gloo processes) to show it executes.
#   bash benchmarks/gpu_smoke.sh            (from the repository root, after `make setup`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
if [ "$NGPU" -ge 1 ]; then
  $PY benchmarks/gpu_smoke.py
else
  $PY benchmarks/gpu_smoke.py --cpu
fi
if [ "$NGPU" -eq 1 ]; then
  echo "DDP: skipped (one GPU)"
  exit 0
fi
NPROC=$([ "$NGPU" -ge 2 ] && echo "$NGPU" || echo 2)
BACKEND=$([ "$NGPU" -ge 2 ] && echo "NCCL" || echo "gloo, CPU mode")
# two optimizer steps of the tiny student, the batch split over the ranks
start=$(date +%s)
$PY -m normgrow.cli teacher train tiny "data.cache_dir=$OUT/cache" --no-progress > "$OUT/teacher.log" 2>&1  # ranks do not build it
$PY -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m normgrow.cli run tiny \
  "data.cache_dir=$OUT/cache" "train.batch_size=$((NPROC * 2))" "curriculum.stages=[{n_layer: 3, tokens: $((NPROC * 2 * 32 * 2))}]" \
  train.threads=1 --no-progress --no-plots -o "$OUT/ddp" > "$OUT/ddp.log" 2>&1 || { tail -20 "$OUT/ddp.log"; exit 1; }
echo "DDP over $NPROC ranks ($BACKEND): ok, 2 steps, final val/ce $($PY -c "import json; print(round(json.load(open('$OUT/ddp/summary.json'))['val/ce'], 4))") ($(( $(date +%s) - start )) s incl. the micro teacher)"
# the same two steps with the student and the teacher sharded (FSDP2): the same val/ce up to summation order
start=$(date +%s)
$PY -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m normgrow.cli run tiny \
  "data.cache_dir=$OUT/cache" "train.batch_size=$((NPROC * 2))" "curriculum.stages=[{n_layer: 3, tokens: $((NPROC * 2 * 32 * 2))}]" \
  train.threads=1 train.sharding=fsdp teacher.sharding=fsdp --no-progress --no-plots -o "$OUT/fsdp" > "$OUT/fsdp.log" 2>&1 \
  || { tail -20 "$OUT/fsdp.log"; exit 1; }
echo "FSDP2 (student and teacher) over $NPROC ranks ($BACKEND): ok, 2 steps, final val/ce $($PY -c "import json; print(round(json.load(open('$OUT/fsdp/summary.json'))['val/ce'], 4))") ($(( $(date +%s) - start )) s)"
