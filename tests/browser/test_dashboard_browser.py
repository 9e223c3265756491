"""The Voila dashboard in a real headless Chromium: loads cleanly, redraws, prunes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
#: Console errors that are expected offline: the template's icon font comes from a CDN.
TOLERATED = ("fontawesome", "font-awesome", "fonts.googleapis", "cdn.jsdelivr", "unpkg.com")
ERROR_MARKERS = ("There was an error when executing cell", "Traceback")
WIDGET_ERRORS = ("could not create", "model not found", "not found in module", "error creating")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(base: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until the server answers on a path other than the dashboard (that starts a kernel)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"voila exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{base}/voila/static/none.txt", timeout=2)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means the server is up
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"voila did not answer on {base} within {timeout} s")


@pytest.fixture(scope="module")
def voila_url(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium); ./dev test installs it")
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    pytest.importorskip(
        "voila", reason="voila is not installed (pip install sparsity-explorer[widgets])"
    )
    port = _free_port()
    cache = tmp_path_factory.mktemp("cache")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["SPARSITY_EXPLORER_CACHE"] = os.environ.get("SPARSITY_EXPLORER_CACHE", str(cache))
    log = (cache / "voila.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voila",
            "notebooks/dashboard.ipynb",
            f"--port={port}",
            "--no-browser",
            "--Voila.ip=127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(base, proc)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(voila_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.console_errors = []
        page.on(
            "console",
            lambda msg: (
                page.console_errors.append(f"{msg.text} @ {msg.location.get('url', '')}")
                if msg.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda exc: page.console_errors.append(f"pageerror: {exc}"))
        # Voila draws the widgets while the notebook still runs, then connects the page to the
        # kernel and restores every widget's state from it; a change made before that settles
        # can be overwritten. Wait for the kernel's socket, then for it to go quiet.
        frames: list[float] = []

        def on_socket(ws):
            if "/api/kernels/" in ws.url:
                ws.on("framereceived", lambda _payload: frames.append(time.monotonic()))

        page.on("websocket", on_socket)
        page.goto(voila_url, timeout=300_000, wait_until="domcontentloaded")
        page.wait_for_selector(".explorer-dashboard", timeout=300_000)
        page.wait_for_selector(".explorer-mask .heatmaplayer", timeout=60_000)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (not frames or time.monotonic() - frames[-1] < 3):
            page.wait_for_timeout(250)
        assert frames, "the page never connected to its kernel"
        yield page
        browser.close()


def _unexpected(errors: list[str]) -> list[str]:
    return [e for e in errors if not any(t in e.lower() for t in TOLERATED)]


def _title(page) -> str:
    return page.locator(".explorer-mask .gtitle").first.text_content() or ""


def _points(page) -> int:
    return (
        page.locator(".explorer-tradeoff .scatterlayer .trace").first.locator("path.point").count()
    )


def test_page_loads_without_errors(page):
    body = page.content()
    for marker in ERROR_MARKERS:
        assert marker not in body, f"{marker!r} in the page"
    assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
    errors = _unexpected(page.console_errors)
    assert not [e for e in errors if any(w in e.lower() for w in WIDGET_ERRORS)], errors
    assert not errors, errors


def test_selecting_a_layer_redraws_the_heatmap(page):
    before = _title(page)
    select = page.locator(".explorer-layer select")
    options = select.locator("option")
    assert options.count() >= 2
    current = select.input_value()
    target = next(
        options.nth(i).get_attribute("value")
        for i in range(options.count())
        if options.nth(i).get_attribute("value") != current
    )
    select.select_option(value=target)
    page.wait_for_function(
        "prev => { const t = document.querySelector('.explorer-mask .gtitle');"
        " return t && t.textContent !== prev; }",
        arg=before,
        timeout=60_000,
    )
    assert _title(page) != before


def test_running_a_method_adds_a_tradeoff_point(page):
    before = _points(page)
    page.locator("button.explorer-run").click()
    page.wait_for_function(
        "() => /speedup|failed|cancelled/.test("
        "(document.querySelector('.explorer-status') || {}).textContent || '')",
        timeout=180_000,
    )
    status = page.locator(".explorer-status").text_content() or ""
    assert "speedup" in status, status
    page.wait_for_function(
        "n => document.querySelectorAll('.explorer-tradeoff .scatterlayer .trace')[0]"
        ".querySelectorAll('path.point').length > n",
        arg=before,
        timeout=60_000,
    )
    assert _points(page) == before + 1
    assert not _unexpected(page.console_errors), page.console_errors
