"""``python -m forge_tui.cli``: the ``forge-tui`` command (the app starts searches this way)."""

import sys

from forge_tui.cli import main

sys.exit(main())
