"""A stand-in for a tensor where only its shape matters (no torch import)."""

from __future__ import annotations

import math


class Shaped:
    """What a task's ``sizes_of`` reads of a tensor: ``shape``, ``dim()``, ``numel()``."""

    def __init__(self, shape: tuple):
        self.shape = tuple(shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)
