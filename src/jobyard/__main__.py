from __future__ import annotations

from jobyard.cli import main

main()
