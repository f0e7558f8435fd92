"""`jobyard bench`: enqueue, drain and pickup benchmarks on a throwaway database.

Sits beside `cli` (it imports core, db and starts real `jobyard worker` processes); nothing in
the engine imports it. Each measurement runs in its own database cloned from the migrated
template and dropped afterwards, so runs never see each other's rows. See docs/BENCHMARKS.md.
"""

from __future__ import annotations
