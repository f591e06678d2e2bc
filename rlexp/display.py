"""Whether this process can show a window (plot --show, test_policy's rendering)."""

from __future__ import annotations

import os
import sys


def has_display() -> bool:
    """Whether a window can be shown (macOS and Windows always; elsewhere an X or Wayland display)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
