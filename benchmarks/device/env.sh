# Sourced by benchmarks/device.sh (from the repo root); the named scripts inherit it.
# Makes $OUT, installs the carried wheels (.whl/, see ../shared/tools/gpu-wheels) into
# /tmp/site when present, exports PYTHONPATH, PYTHONUNBUFFERED, FORGE_CACHE, OUT, NGPU and
# MACHINE (nvidia-smi's line and the CPU count), and defines db_gz.
export OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FORGE_CACHE=${FORGE_CACHE:-/tmp/forge-cache}
if command -v nvidia-smi >/dev/null 2>&1; then
  NGPU=$(nvidia-smi -L | wc -l)
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
  MACHINE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) CPU cores"
else
  NGPU=1; MACHINE="no GPU, $(nproc) CPU cores"; echo "$MACHINE"
fi
[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
export NGPU MACHINE
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')" 2>&1 | tail -1

# db_gz DB OUT.gz: one self-contained gzipped copy of a database (its WAL folded in)
db_gz() {
  python3 -c "import sqlite3, sys; s = sqlite3.connect(sys.argv[1]); d = sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" \
    "$1" "$1.copy" && gzip -c "$1.copy" > "$2" && rm -f "$1.copy"
}
export -f db_gz
