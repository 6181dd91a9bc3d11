"""``python -m remotetensors``: the command line."""

from __future__ import annotations

from .cli.app import main_exit

if __name__ == "__main__":
    main_exit()
