"""Turn exceptions into the one-line messages users see (STYLE.md 14); see ``forge_tui.core.errors``."""
from forge_tui.core.errors import ForgeError, user_message

__all__ = ["ForgeError", "user_message"]
