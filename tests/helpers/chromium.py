"""Headless Chromium as a reader of the report: the page laid out at a screen's width, measured in the
browser (page width, what each image and table renders to), and a full-page screenshot.

As root Chromium refuses to start without --no-sandbox; the other flags keep it from touching the
network or a profile (an empty --user-data-dir per run)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars")
# Run in the page once it has loaded (images decoded): what a reader's screen would show, as JSON.
_MEASURE = """<script>window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width, height: r.height}; };
  const out = {
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    scrollHeight: document.documentElement.scrollHeight,
    images: [...document.images].map(i => ({alt: i.alt, naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight, ...box(i)})),
    tables: [...document.querySelectorAll('table')].map(t => ({id: t.id, rows: t.tBodies[0] ? t.tBodies[0].rows.length : 0,
      headers: [...t.querySelectorAll('th')].map(h => h.textContent), ...box(t)})),
    summary: (() => { const s = document.getElementById('summary'); return s ? {text: s.innerText, ...box(s)} : null; })(),
    bodyText: document.body.innerText,
  };
  const pre = document.createElement('pre'); pre.id = 'chromium-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""
_OUT = re.compile(r'<pre id="chromium-measure">(.*?)</pre>', re.S)


@dataclass
class Layout:
    """The report as Chromium laid it out in a window `innerWidth` px wide."""

    innerWidth: int
    scrollWidth: int
    scrollHeight: int
    images: list[dict[str, Any]]
    tables: list[dict[str, Any]]
    summary: dict[str, Any] | None
    bodyText: str


def _run(chromium: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, env={"HOME": profile, "PATH": "/usr/bin:/bin"})


def measure(chromium: str, html_path: Path, width: int) -> Layout:
    """Lay the page out `width` px wide and measure it in the browser (a measuring script is added to a copy)."""
    import html as html_mod  # noqa: PLC0415

    page = html_path.read_text(encoding="utf-8")
    probe = html_path.with_name(html_path.stem + ".measure.html")
    probe.write_text(page.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    try:
        r = _run(chromium, [f"--window-size={width},1000", "--dump-dom", probe.as_uri()])
    finally:
        probe.unlink()
    m = _OUT.search(r.stdout)
    assert r.returncode == 0 and m, f"chromium exit {r.returncode}: {r.stderr[-2000:]}"
    return Layout(**json.loads(html_mod.unescape(m.group(1))))


def screenshot(chromium: str, html_path: Path, png_path: Path, width: int, height: int) -> None:
    """A `width` x `height` screenshot of the page (pass the page's scrollHeight for all of it)."""
    r = _run(chromium, [f"--window-size={width},{height}", f"--screenshot={png_path}", html_path.as_uri()])
    assert r.returncode == 0 and png_path.exists(), f"chromium exit {r.returncode}: {r.stderr[-2000:]}"
