"""What torch the interpreter running this script already has, for scripts/install.sh.

Run with the interpreter the user invoked (``python3`` or ``$PYTHON``); standard library
only, Python 3.10+. Prints shell assignments, one per line, each starting with ``FT_``
(install.sh evaluates only those lines, so anything torch prints on import is ignored):

  FT_TORCH_FILE     torch.__file__, empty when ``import torch`` fails
  FT_TORCH_VERSION  torch.__version__ (e.g. 2.5.1+cu124), empty without torch
  FT_TORCH_DIST     the version pip sees (importlib.metadata), empty when torch has none
  FT_TORCH_CUDA     torch.version.cuda, empty for a CPU build or without torch
  FT_ENV_KIND       system | venv | conda: what kind of environment the interpreter is
  FT_PY_VERSION     major.minor of the interpreter
  FT_SITE_DIRS      the interpreter's site-packages directories, ':'-separated, in its
                    sys.path order, the one holding torch included: what a new venv must
                    add to see this torch and the packages it depends on
"""

from __future__ import annotations

import os
import shlex
import site
import sys
import sysconfig
import warnings


def env_kind() -> str:
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
        return "conda"
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        return "venv"
    return "system"


def site_dirs(torch_file: str) -> list[str]:
    candidates = []
    try:
        candidates += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site.py
        pass
    paths = sysconfig.get_paths()
    candidates += [paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        candidates.append(site.getusersitepackages())
    if torch_file:  # torch/__init__.py -> the directory that holds the torch package
        candidates.append(os.path.dirname(os.path.dirname(torch_file)))
    seen, out = set(), []
    for d in candidates:
        d = os.path.realpath(d)
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append(d)
    # keep the interpreter's own precedence: sys.path order first, the rest after
    order = {os.path.realpath(p): i for i, p in enumerate(sys.path) if p}
    return sorted(out, key=lambda d: order.get(d, len(order)))


def probe() -> dict:
    info = {"TORCH_FILE": "", "TORCH_VERSION": "", "TORCH_DIST": "", "TORCH_CUDA": ""}
    warnings.simplefilter("ignore")  # torch's import-time warnings are not ours to show
    try:
        import torch
    except Exception:  # not installed, or broken: either way not one to build on
        pass
    else:
        info["TORCH_FILE"] = os.path.realpath(torch.__file__)
        info["TORCH_VERSION"] = str(torch.__version__)
        info["TORCH_CUDA"] = str(getattr(torch.version, "cuda", None) or "")
        try:
            from importlib.metadata import version

            info["TORCH_DIST"] = version("torch")
        except Exception:
            pass
    info["ENV_KIND"] = env_kind()
    info["PY_VERSION"] = "%d.%d" % sys.version_info[:2]
    info["SITE_DIRS"] = ":".join(site_dirs(info["TORCH_FILE"]))
    return info


def main() -> int:
    for key, val in probe().items():
        print(f"FT_{key}={shlex.quote(val)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
