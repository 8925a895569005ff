"""The built documentation site, opened in headless Chromium (run by ``make docs`` after the build).

Three pages: the home page, a tutorial and an API page. Each must exist, load without a message
on the browser console (an uncaught JavaScript error, a resource that fails to load, anything a
page logs), render its expected text, and not be blank. Screenshots are saved under
``site/_screenshots/``. Skipped unless ``JAXFEED_DOCS_SITE`` names a built site, and where no
``chromium`` is installed (``make docs`` installs Debian's package where it runs as root).
"""

import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from PIL import Image, ImageStat
from tests.docs.test_docs_api import SUBMODULES, exports

SITE = os.environ.get("JAXFEED_DOCS_SITE")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    not SITE, reason="set JAXFEED_DOCS_SITE=site after building it (make docs)"
)
needs_chromium = pytest.mark.skipif(not CHROMIUM, reason="no chromium (apt-get install chromium)")

# page, a text it must show, the name of its screenshot
PAGES = [
    ("index.html", "Getting started", "home"),
    ("tutorials/linen-and-nnx.html", "train_step_nnx", "tutorial"),
    ("reference/jaxfeed.html", "DataLoader", "api"),
]


@pytest.fixture(scope="module")
def server():
    root = Path(SITE).resolve()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def chromium(*args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--enable-logging=stderr", "--v=0", "--no-first-run", "--hide-scrollbars",
             "--virtual-time-budget=5000"]  # fmt: skip
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


@needs_chromium
@pytest.mark.parametrize("how", ["http", "file"])
@pytest.mark.parametrize(("page", "text", "shot"), PAGES, ids=[p[2] for p in PAGES])
def test_page_loads_without_errors_and_is_not_blank(server, page, text, shot, how):
    # the README tells people to open site/index.html: the site must work from file:// too
    root, base = server
    if how == "file":
        base, shot = root.as_uri() + "/", f"{shot}-file"
    assert (root / page).is_file(), f"the site has no {page}"
    shots = root / "_screenshots"
    shots.mkdir(exist_ok=True)
    png = shots / f"{shot}.png"
    png.unlink(missing_ok=True)

    dom = chromium("--dump-dom", base + page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert text in dom.stdout, f"{page} does not show {text!r}"
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, f"{page}: browser console messages:\n" + "\n".join(console)

    done = chromium(f"--screenshot={png}", "--window-size=1280,1000", base + page)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    with Image.open(png) as image:
        spread = [hi - lo for lo, hi in image.convert("RGB").getextrema()]
        stddev = ImageStat.Stat(image.convert("L")).stddev[0]
    assert max(spread) > 50 and stddev > 5, f"{page} rendered blank ({spread}, {stddev:.1f})"


def test_the_built_reference_has_every_public_name():
    reference = Path(SITE) / "reference"
    html = {m: (reference / f"{m.split('.')[-1]}.html").read_text() for m in SUBMODULES}
    html["jaxfeed"] = (reference / "jaxfeed.html").read_text()
    missing = [
        f"{module}.{name}"
        for module in ("jaxfeed", *SUBMODULES)
        for name in exports(module)
        # a name shadowed by its submodule (jaxfeed.data.text.tokenize) is rendered from its module
        if not re.search(rf'id="{re.escape(module)}(\.\w+)?\.{name}"', html[module])
    ]
    assert not missing, f"the built API reference lacks {missing}"


def test_links_and_search_work_without_a_server():
    """Opened from disk, a link to a folder shows a bare listing and a fetched search index is
    blocked: every internal link names an .html file, and the search index ships as a script."""
    root = Path(SITE)
    assert (root / "search" / "search_index.js").is_file(), (
        "no offline search index (plugin offline)"
    )
    for page in (root / "index.html", root / "reference" / "jaxfeed.html"):
        hrefs = re.findall(r'href="([^"#:?]+)"', page.read_text())
        folders = [h for h in hrefs if h.endswith("/") or h in (".", "..")]
        assert not folders, f"{page.name} links to folders: {folders[:5]}"


SEARCH_JS = """(async () => {
  let box = null;
  for (let k = 0; k < 100 && !(box = document.querySelector('.md-search__input')); k++)
    await new Promise(r => setTimeout(r, 100));
  box.focus(); box.value = 'DataLoader';
  box.dispatchEvent(new Event('input', {bubbles: true}));
  box.dispatchEvent(new KeyboardEvent('keyup', {key: 'r', bubbles: true}));
  for (let k = 0; k < 80; k++) {
    const meta = document.querySelector('.md-search-result__meta').textContent;
    if (/matching|served/.test(meta)) return meta.trim();
    await new Promise(r => setTimeout(r, 100));
  }
  return document.querySelector('.md-search-result__meta').textContent.trim();
})()"""


async def _search(url: str, profile: Path) -> str:
    """Type a query into the page's search box (Chrome DevTools protocol) and read the answer."""
    import asyncio

    import aiohttp

    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):
            if port_file.is_file() and port_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as http:
            targets = await (await http.get(f"http://127.0.0.1:{port}/json")).json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"]) as ws:

                async def call(n: int, method: str, **params):
                    await ws.send_json({"id": n, "method": method, "params": params})
                    while (message := await ws.receive_json()).get("id") != n:
                        pass
                    return message["result"]

                await call(1, "Page.enable")
                await call(2, "Page.navigate", url=url)
                await asyncio.sleep(3)
                done = await call(
                    3, "Runtime.evaluate", expression=SEARCH_JS, awaitPromise=True,
                    returnByValue=True,
                )  # fmt: skip
                return str(done["result"].get("value"))
    finally:
        proc.kill()
        proc.wait()


@needs_chromium
def test_search_answers_served_and_says_how_to_serve_from_disk(server, tmp_path):
    import asyncio

    root, base = server
    served = asyncio.run(_search(base + "index.html", tmp_path / "a"))
    assert "matching documents" in served, served
    # from disk, search either works or says plainly how to serve the site; never "Initializing"
    from_disk = asyncio.run(_search(root.as_uri() + "/index.html", tmp_path / "b"))
    assert "matching documents" in from_disk or "make docs-serve" in from_disk, from_disk
