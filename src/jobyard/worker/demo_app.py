"""The app `jobyard up` / `jobyard demo` run: the demo project, with only the built-ins
(noop, sleep, fail, http_request), which every worker registers anyway."""

from __future__ import annotations

from jobyard.worker.app import App

app = App(project="demo/default")
