#!/usr/bin/env bash
# Set up forge-tui in ./.venv, reusing a torch that the invoking interpreter (python3, or
# $PYTHON) already imports; only when it has none is torch 2.13.0 installed. Then the
# package itself with its test extras. Safe to run again.
#
# Where that torch lives decides how .venv sees it:
# - the system interpreter (NGC containers, DGX OS, a conda env's own python): .venv is
#   made with --system-site-packages, which reaches that interpreter's site-packages;
# - python3 is itself a venv (or a venv over conda): --system-site-packages reaches only the
#   BASE interpreter, not the venv's torch. Then .venv gets a .pth file that adds the
#   invoking interpreter's site-packages (purelib, platlib, the one holding torch) after its
#   own. We chose this over installing into that environment: forge-tui's dependencies and
#   upgrades stay in .venv, the user's environment is never written to (pip refuses to
#   uninstall anything outside .venv), and removing .venv undoes everything.
# Either way pip installs forge-tui under a constraint pinning the torch it found, so it
# never replaces it (a CUDA torch least of all): a torch older than forge-tui needs makes
# the install fail with pip's message instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PTH_NAME=_forge_tui_outer_site.pth
say() { echo "install.sh: $*" >&2; }

command -v "$PY" >/dev/null 2>&1 || { say "no interpreter '$PY' (set PYTHON to one)"; exit 2; }
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { say "$PY is Python $("$PY" -c 'import sys; print(sys.version.split()[0])'); forge-tui needs 3.10+"; exit 2; }

# FT_TORCH_FILE, FT_TORCH_VERSION, FT_TORCH_DIST, FT_TORCH_CUDA, FT_ENV_KIND, FT_PY_VERSION, FT_SITE_DIRS
eval "$("$PY" scripts/find_torch.py | grep '^FT_')"
[ -n "${FT_PY_VERSION:-}" ] || { say "scripts/find_torch.py failed under $PY"; exit 1; }

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
VENV_PY_VERSION=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$VENV_PY_VERSION" != "$FT_PY_VERSION" ]; then
  say ".venv is Python $VENV_PY_VERSION but $PY is $FT_PY_VERSION: remove .venv to rebuild it with $PY"
  exit 2
fi
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$SITE/$PTH_NAME"  # written afresh below when still needed (PYTHON may have changed)

venv_torch() { .venv/bin/python -c 'import os, torch; print(os.path.realpath(torch.__file__))' 2>/dev/null || true; }

if [ -n "$FT_TORCH_FILE" ]; then
  SEEN=$(venv_torch)
  if [ "$SEEN" != "$FT_TORCH_FILE" ]; then
    # site.addsitedir rather than bare paths: it also runs those directories' own .pth
    # files (editable installs, conda's and NGC's path hooks) as the invoking interpreter does.
    IFS=: read -ra DIRS <<< "$FT_SITE_DIRS"
    for d in "${DIRS[@]}"; do
      printf 'import site; site.addsitedir(%s)\n' "$("$PY" -c 'import sys; print(repr(sys.argv[1]))' "$d")"
    done > "$SITE/$PTH_NAME"
    SEEN=$(venv_torch)
  fi
  if [ "$SEEN" != "$FT_TORCH_FILE" ]; then
    say "$PY imports torch from $FT_TORCH_FILE but .venv imports ${SEEN:-no torch}:"
    say "remove .venv (it holds a torch of its own from an earlier install) and run this again"
    exit 1
  fi
  say "using the torch $PY has: $FT_TORCH_VERSION (CUDA ${FT_TORCH_CUDA:-none}, $FT_ENV_KIND) at $(dirname "$FT_TORCH_FILE")"
elif [ -z "$(venv_torch)" ]; then
  say "no torch importable from $PY: installing torch 2.13.0 into .venv"
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi

# Pin the torch .venv now imports, as pip sees it, so that nothing below replaces it.
TORCH_DIST=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null || true)
if [ -z "$TORCH_DIST" ]; then
  say "the torch .venv imports ($(venv_torch)) has no package metadata, so pip would install"
  say "another torch over it; install forge-tui by hand: .venv/bin/pip install --no-deps -e . and its other dependencies"
  exit 1
fi
CONSTRAINT=$(mktemp)
trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==$TORCH_DIST" > "$CONSTRAINT"
.venv/bin/python -m pip install -q -c "$CONSTRAINT" -e ".[dev]"
# The CUTLASS/CuTe headers the catalog's CUTLASS seeds include (kernels/gemm_glu: BSD-3-Clause,
# headers under cutlass_library/source/include, 6 MB): the package alone, without the Python
# packages its CUTLASS Python interface needs (cuda-python, scipy, ...), which forge-tui never
# imports. The `cutlass` extra installs it with them.
.venv/bin/python -m pip install -q --no-deps "nvidia-cutlass==4.2.0.0"
