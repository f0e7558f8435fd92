"""docs/GETTING_STARTED.md, executed (issue 11, point 8): every file block is written, every
`sh` block run, in a fresh directory outside the repository with the wheel of this checkout
installed. The page's own last section says how it is read; keep the two in step."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import installed

pytestmark = pytest.mark.slow

PAGE = installed.REPO / "docs" / "GETTING_STARTED.md"
_FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_DIRECTIVE = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->")
_TITLE = re.compile(r'title="([^"]+)"')


@dataclass
class Step:
    """One fenced block of the page, with the directives written just before it."""

    lang: str
    title: str | None
    body: str
    directives: list[str] = field(default_factory=list)
    line: int = 0


@dataclass
class Standalone:
    """A directive that stands alone (stop NAME, wait-http PATH)."""

    directive: str
    line: int


def parse(text: str) -> list[Step | Standalone]:
    """The page's blocks and stand-alone directives, in order."""
    items: list[tuple[int, Step | Standalone]] = []
    fences = list(_FENCE.finditer(text))
    pending: list[tuple[int, str]] = []
    cursor = 0
    for fence in fences:
        between = text[cursor : fence.start()]
        for found in _DIRECTIVE.finditer(between):
            pending.append((cursor + found.start(), found.group(1)))
        # Directives followed by prose (not directly by the block) stand alone.
        attached: list[str] = []
        for pos, directive in pending:
            tail = text[pos : fence.start()]
            rest = _DIRECTIVE.sub("", tail).strip()
            if rest:
                items.append((pos, Standalone(directive, text.count("\n", 0, pos) + 1)))
            else:
                attached.append(directive)
        pending = []
        title = _TITLE.search(fence.group(2))
        line = text.count("\n", 0, fence.start()) + 1
        step = Step(fence.group(1), title[1] if title else None, fence.group(3), attached, line)
        items.append((fence.start(), step))
        cursor = fence.end()
    for found in _DIRECTIVE.finditer(text[cursor:]):
        pos = cursor + found.start()
        items.append((pos, Standalone(found.group(1), text.count("\n", 0, pos) + 1)))
    return [item for _, item in sorted(items, key=lambda pair: pair[0])]


def _quoted(directive: str) -> list[str]:
    return shlex.split(directive)


class Page:
    """Runs the steps in one directory with one environment."""

    def __init__(self, workdir: Path, venv: Path, api_port: int) -> None:
        self.workdir = workdir
        self.venv = venv
        self.env = installed.user_env(venv) | {"JOBYARD_API_PORT": str(api_port)}
        self.api_port = api_port
        self.background: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def run(self, item: Step | Standalone) -> None:
        if isinstance(item, Standalone):
            self.standalone(item)
            return
        if any(d.startswith("skip") for d in item.directives):
            return
        if item.title is not None:
            target = self.workdir / item.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(item.body)
            return
        if item.lang != "sh":
            return  # sample output and the like
        script = self.script(item.body)
        for directive in item.directives:
            words = _quoted(directive)
            if words[0] == "background":
                self.start(words[1], script, item.line)
                return
        retry_s = next(
            (float(_quoted(d)[1]) for d in item.directives if d.startswith("retry")), 0.0
        )
        deadline = time.monotonic() + retry_s
        while True:
            output, problem = self.attempt(script, item.directives)
            if problem is None:
                return
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"GETTING_STARTED.md line {item.line}: {problem}\n{output}\n{self.logs()}"
                )
            time.sleep(0.5)

    def script(self, body: str) -> str:
        lines = []
        for line in body.splitlines():
            words = line.split()
            if words[:2] == ["pip", "install"]:
                packages = [w for w in words[2:] if w != "jobyard"]
                if packages:
                    installed.pip_install(self.venv, packages)
                continue
            lines.append(line)
        return "set -e\n" + "\n".join(lines) + "\n"

    def attempt(self, script: str, directives: list[str]) -> tuple[str, str | None]:
        result = subprocess.run(
            ["bash", "-c", script], cwd=self.workdir, env=self.env,
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        output = result.stdout + result.stderr
        if result.returncode != 0:
            return output, f"exit {result.returncode}"
        for directive in directives:
            words = _quoted(directive)
            if words[0] == "expect" and words[1] not in output:
                return output, f"expected {words[1]!r} in the output"
            if words[0] == "expect-not" and words[1] in output:
                return output, f"did not expect {words[1]!r} in the output"
            if words[0] == "expect-count" and output.count(words[1]) != int(words[2]):
                return output, f"expected {words[1]!r} {words[2]} times"
        if "Traceback" in output:
            return output, "a traceback in the output"
        return output, None

    def start(self, name: str, script: str, line: int) -> None:
        log = self.workdir.parent / f"{name}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                ["bash", "-c", script.replace("set -e\n", "exec ", 1)],
                cwd=self.workdir, env=self.env, stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.background[name] = (proc, log)

    def standalone(self, item: Standalone) -> None:
        words = _quoted(item.directive)
        if words[0] == "stop":
            proc, log = self.background.pop(words[1])
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            assert code == 0, f"line {item.line}: {words[1]} exited {code}\n{log.read_text()}"
            assert "Traceback" not in log.read_text(), log.read_text()
        elif words[0] == "wait-http":
            url = f"http://127.0.0.1:{self.api_port}{words[1]}"
            deadline = time.monotonic() + 90
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        if response.status == 200:
                            return
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"line {item.line}: {url} never answered 200\n{self.logs()}")
                time.sleep(0.5)
        else:
            pytest.fail(f"line {item.line}: unknown directive {item.directive!r}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{log.read_text(errors='replace')[-3000:]}"
            for name, (_, log) in self.background.items()
        )

    def close(self) -> None:
        for proc, _ in self.background.values():
            if proc.poll() is None:
                proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    root = installed.user_dir("jy-docs-")
    dist = Path(tempfile.mkdtemp(prefix="jy-docs-dist-"))
    try:
        installed.build(dist)
        (wheel,) = dist.glob("*.whl")
        installed.install(wheel, root / "venv")
        yield root / "venv"
    finally:
        installed.stop_embedded(root / "venv", root / "shop")
        shutil.rmtree(dist, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def test_the_page_parses_into_the_steps_it_shows() -> None:
    steps = parse(PAGE.read_text())
    titles = [s.title for s in steps if isinstance(s, Step) and s.title]
    assert titles[:3] == ["tasks.py", "defer_jobs.py", "checkout.py"]
    assert [s.directive for s in steps if isinstance(s, Standalone)] == [
        "stop worker", "stop scheduler", "wait-http /readyz", "stop api",
    ]  # fmt: skip
    assert any(isinstance(s, Step) and "background worker" in s.directives for s in steps)


def test_getting_started_runs_as_written(venv: Path) -> None:
    workdir = venv.parent / "shop"
    workdir.mkdir()
    page = Page(workdir, venv, _free_port())
    try:
        for item in parse(PAGE.read_text()):
            page.run(item)
        assert not page.background, f"still running at the end: {list(page.background)}"
    finally:
        page.close()
