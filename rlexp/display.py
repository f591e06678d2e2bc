"""Console wording shared by the commands, and whether this process can show a window (plot --show,
test_policy's rendering)."""

from __future__ import annotations

import os
import sys


def epochs(n: int) -> str:
    """``1 epoch`` / ``N epochs``: how messages count completed epochs (progress.txt numbers its rows
    from Epoch 0, so after 3 epochs its last row is Epoch 2)."""
    return f"{n} epoch" if n == 1 else f"{n} epochs"


def has_display() -> bool:
    """Whether a window can be shown (macOS and Windows always; elsewhere an X or Wayland display)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
