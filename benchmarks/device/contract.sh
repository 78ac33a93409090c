#!/usr/bin/env bash
# The evaluation contract on a GPU: what the binary check reads from nvcc's objects
# (cross-checked with cuobjdump), cuBLAS linked through the stream guard, and the cuda corpus:
# every cheat gets its verdict (never ok), every kernel under tests/adversarial/good/cuda is ok.
# Writes $OUT/contract_corpus.json and $OUT/contract.log. Run from the repository root.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 FORGE_CACHE=${FORGE_CACHE:-/tmp/forge-cache}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nvcc --version | tail -1
  NVBIN=$(dirname "$(readlink -f "$(command -v nvcc)")")
  echo "cuobjdump: $(command -v cuobjdump || ls "$NVBIN/cuobjdump" 2>/dev/null || echo none)"
  echo "cublas: $(ls "$NVBIN"/../lib64/libcublas.so* "$NVBIN"/../targets/*/lib/libcublas.so* 2>/dev/null | head -2 | tr '\n' ' ')"
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, 'stream', torch.cuda.current_stream().cuda_stream)"
  # the cubin reader and cuobjdump agree on the device printf of print_device.cu
  python3 - <<'PY'
import shutil, subprocess
from pathlib import Path
from forge_tui.evaluate import binary, compile as c
from tests.adversarial.cases import cases
case = next(x for x in cases("cuda") if x.name == "print_device")
res = c.compile_source(case.source(), "cuda", arch="sm_90")
print("print_device:", res.refused or res.log[-300:])
obj = next(Path(c.cache_dir()).glob("*/kernel.o"), None)
tool = shutil.which("cuobjdump") or str(Path(shutil.which("nvcc")).resolve().parent / "cuobjdump")
for o in sorted(Path(c.cache_dir()).glob("*/kernel.o")):
    ours = [n for im in binary.embedded_cubins(o.read_bytes()) for n in binary.elf_undefined(im)]
    theirs = subprocess.run([tool, "-symbols", str(o)], capture_output=True, text=True).stdout if Path(tool).exists() else ""
    print(o.parent.name, "cubin UND:", ours, "| cuobjdump says vprintf:", "vprintf" in theirs)
PY
} 2>&1 | tee "$OUT/contract.log"
timeout "${CORPUS_S:-200}" python3 tests/adversarial/run_cuda_corpus.py --json "$OUT/contract_corpus.json" "$@" 2>&1 | tee -a "$OUT/contract.log"
