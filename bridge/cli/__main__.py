"""`python -m bridge.cli`: the command line, as the console scripts run it."""

from __future__ import annotations

from bridge.cli import main

if __name__ == "__main__":
    main()
