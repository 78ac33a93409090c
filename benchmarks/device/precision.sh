#!/usr/bin/env bash
# A TF32 GEMM under --precision highest and high; KernelBench's losses at their own sizes with a constant cheat
# Needs KernelBench's files in $KB (default .kb): level 2 76_Gemm_Add_ReLU.py, level 1 94_MSELoss.py,
# 96_HuberLoss.py, 98_KLDivLoss.py, 99_TripletMarginLoss.py, 100_HingeLoss.py. Kernels: benchmarks/precision/.
# Writes $OUT/precision_gemm.log, $OUT/precision_losses_{a,b}.log and $OUT/gemm_high_show.json. Time limits per step: PREC_STEP_S (default 150 s),
# the GEMM run (eager and torch.compile baselines) PREC_RUN_S (default 150 s).
set -uo pipefail
KB=${KB:-.kb}
P=benchmarks/precision
export FORGE_DB=${FORGE_DB:-/tmp/forge.db}
# 100_HingeLoss broadcasts (B,) against (B, 32768): its value checks run at the file's size on the CPU
export FORGE_LOAD_MEMORY_MB=${FORGE_LOAD_MEMORY_MB:-100000}
STEP_S=${PREC_STEP_S:-150}
step() {
  local s=$1 t0=$SECONDS
  shift
  echo "== $* [$(date -u +%T)]"
  timeout "$s" python3 -m forge_tui.cli "$@"
  echo "== rc $? in $((SECONDS - t0)) s"
}
gemm_lane() {
  echo "machine: ${MACHINE:-?}"
  step "$STEP_S" eval "$KB/76_Gemm_Add_ReLU.py" "$P/gemm_add_relu_tf32.cu" --backend cuda --precision highest
  step "${PREC_RUN_S:-150}" run "$KB/76_Gemm_Add_ReLU.py" --backend cuda --precision high --proposer tune \
    --seed-kernel "$P/gemm_add_relu_tf32.cu" --iterations 0 --headless
  python3 -m forge_tui.cli show 1
  python3 -m forge_tui.cli show 1 --json >"$OUT/gemm_high_show.json"
}
# loss_lane NAME:VALUE ...: a constant cheat (VALUE, about the loss on the file's inputs) on each loss
loss_lane() {
  for tv in "$@"; do
    t=${tv%%:*} v=${tv##*:} src=$P/const_loss2.cu
    [ "$t" = 99_TripletMarginLoss ] && src=$P/const_loss3.cu
    [ "$t" = 100_HingeLoss ] && src=$P/const_hinge.cu
    sed "s/^#define LOSS_VALUE .*/#define LOSS_VALUE ${v}f/" "$src" >"/tmp/const_$t.cu"
    step "$STEP_S" eval "$KB/$t.py" "/tmp/const_$t.cu" --backend cuda
  done
}
# three lanes on the one GPU (the device lock serialises their timing windows; correctness shares it):
# `precision.sh` runs all, `precision.sh losses` the loss lanes only, `precision.sh last` 98 and 100
if [ "${1:-all}" = all ]; then
  { gemm_lane; step "$STEP_S" eval "$KB/94_MSELoss.py" "$P/mse.cu" --backend cuda; } >"$OUT/precision_gemm.log" 2>&1 &
fi
if [ "${1:-all}" = last ]; then  # 98 and 100 only
  loss_lane 98_KLDivLoss:0.04 >"$OUT/precision_losses_a.log" 2>&1 &
  loss_lane 100_HingeLoss:1.0 >"$OUT/precision_losses_b.log" 2>&1
  wait
  cat "$OUT"/precision_*.log
  exit 0
fi
loss_lane 96_HuberLoss:0.1 94_MSELoss:0.1944 >"$OUT/precision_losses_a.log" 2>&1 &
loss_lane 98_KLDivLoss:0.04 100_HingeLoss:1.0 99_TripletMarginLoss:1.0 >"$OUT/precision_losses_b.log" 2>&1
wait
cat "$OUT"/precision_*.log
