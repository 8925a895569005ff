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
    ("tutorials/linen-and-nnx/index.html", "train_step_nnx", "tutorial"),
    ("reference/jaxfeed/index.html", "DataLoader", "api"),
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
@pytest.mark.parametrize(("page", "text", "shot"), PAGES, ids=[p[2] for p in PAGES])
def test_page_loads_without_errors_and_is_not_blank(server, page, text, shot):
    root, base = server
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
    html = {m: (reference / m.split(".")[-1] / "index.html").read_text() for m in SUBMODULES}
    html["jaxfeed"] = (reference / "jaxfeed" / "index.html").read_text()
    missing = [
        f"{module}.{name}"
        for module in ("jaxfeed", *SUBMODULES)
        for name in exports(module)
        # a name shadowed by its submodule (jaxfeed.data.text.tokenize) is rendered from its module
        if not re.search(rf'id="{re.escape(module)}(\.\w+)?\.{name}"', html[module])
    ]
    assert not missing, f"the built API reference lacks {missing}"
