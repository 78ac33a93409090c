# Sourced by the device scripts in benchmarks/ (run from the repo root): makes $OUT, installs
# the carried wheels (.whl/, see ../shared/tools/gpu-wheels) into /tmp/site when present, and
# exports PYTHONPATH, PYTHONUNBUFFERED and FORGE_CACHE. The caller sets FORGE_DB if it needs one.
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FORGE_CACHE=${FORGE_CACHE:-/tmp/forge-cache}
