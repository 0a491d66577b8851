"""The documentation site: it builds with warnings as errors, every internal link of it
resolves, and a real headless browser (Debian's Chromium, driven through the DevTools
protocol) loads the index, an API page and a notebook page with no console error and every
image loaded. A screenshot of the notebook page is saved under docs/_build/screenshots/.

Needs the docs packages (`pip install -e ".[test]"` or ".[docs]") and, for the browser part,
a `chromium` binary (`apt-get install -y chromium`); each part skips with the reason
otherwise.
"""
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
HTML = os.path.join(DOCS, "_build", "html")
SCREENSHOTS = os.path.join(DOCS, "_build", "screenshots")


@pytest.fixture(scope="module")
def site():
    """Build the site as README says (warnings are errors); the html folder."""
    pytest.importorskip("sphinx", reason="sphinx is not installed: pip install -e '.[docs]'")
    pytest.importorskip("myst_nb", reason="myst-nb is not installed: pip install -e '.[docs]'")
    pytest.importorskip("furo", reason="furo is not installed: pip install -e '.[docs]'")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", DOCS, HTML],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout[-5000:]}\n{proc.stderr[-10000:]}"
    return HTML


# ----------------------------------------------------------------------------- static checks

class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "link", "img", "script", "iframe", "source"):
                self.links.append((tag, attrs[key]))


def _parse(path):
    parser = _Links()
    with open(path, encoding="utf-8") as f:
        parser.feed(f.read())
    return parser


def _html_files(root):
    for folder, _dirs, files in os.walk(root):
        if os.path.relpath(folder, root).split(os.sep)[0] in ("_sources", "_static"):
            continue
        for name in files:
            if name.endswith(".html"):
                yield os.path.join(folder, name)


def test_every_internal_link_resolves(site):
    """Every href/src inside the site points at a file that exists, and every #fragment at
    an id of the page it names."""
    parsed, broken, checked = {}, [], 0

    def page(path):
        if path not in parsed:
            parsed[path] = _parse(path)
        return parsed[path]

    for path in _html_files(site):
        for tag, link in page(path).links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or link.startswith("//"):
                continue            # external: not this site's to check
            target = path if not url.path else os.path.normpath(
                os.path.join(os.path.dirname(path), urllib.parse.unquote(url.path)))
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            checked += 1
            where = f"{os.path.relpath(path, site)}: <{tag}> {link}"
            if not os.path.isfile(target):
                broken.append(f"{where} -> missing {os.path.relpath(target, site)}")
            elif url.fragment and target.endswith(".html") and \
                    urllib.parse.unquote(url.fragment) not in page(target).ids:
                broken.append(f"{where} -> no id {url.fragment!r}")
    assert checked > 100, f"only {checked} internal links found: is the site empty?"
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def test_pages_are_there(site):
    """Install quotes README's commands; every public name and every registered kernel has
    its entry; every notebook has its page."""
    import tiledmm as tm

    def text(rel):
        with open(os.path.join(site, rel), encoding="utf-8") as f:
            return f.read()

    # README's shell commands (its indented "pip install ..." lines) appear verbatim on the
    # install page, whatever HTML escaping this Sphinx version uses.
    page = html.unescape(re.sub(r"<[^>]+>", "", text("install.html")))
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        commands = re.findall(r"^    (pip install .+)$", f.read(), re.M)
    assert len(commands) >= 2, commands
    assert 'pip install -e ".[test]" && python -m pytest -n auto' in commands
    for command in commands:
        assert command in page, f"install page lacks README's command {command!r}"

    api_ids = set()
    for rel in os.listdir(os.path.join(site, "api")):
        if rel.endswith(".html"):
            api_ids |= _parse(os.path.join(site, "api", rel)).ids
    for name in tm.__all__:
        wanted = f"tiledmm.{name}"
        assert wanted in api_ids or f"module-{wanted}" in api_ids, f"{wanted} not in the API pages"
    for mod in ("model", "occupancy", "sweep", "plot", "testing"):
        module = getattr(tm, mod)
        for name in module.__all__:
            if callable(getattr(module, name)):
                assert f"tiledmm.{mod}.{name}" in api_ids, f"tiledmm.{mod}.{name} not documented"

    for spec in tm.kernels():
        ids = _parse(os.path.join(site, "kernels", f"{spec.family}.html")).ids
        assert f"{spec.family}-{spec.name}".replace("_", "-") in ids, f"kernel {spec.name} has no section"
    assert "H100" in text("kernels/matmul.html")

    for nb in os.listdir(os.path.join(ROOT, "notebooks")):
        if nb.endswith(".ipynb"):
            assert os.path.isfile(os.path.join(site, "notebooks", nb[:-6] + ".html")), nb


def _docs_extension():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tiledmm_docs", os.path.join(DOCS, "_ext", "tiledmm_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results_rows():
    import csv
    import glob
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.csv"))):
        with open(path, newline="", encoding="utf-8") as f:
            rows += list(csv.DictReader(f))
    return rows


def test_measured_tables_one_per_device_titled_from_the_rows():
    """Kernel pages title each measured table with the device its rows name (bench's `device`
    column), one table per device, and refuse results that cannot say their device."""
    ext = _docs_extension()
    row = dict(kernel="tiled", params="tile=16", M="64", N="64", K="64", tflops="1.5",
               pct_cublas="", device="GPU one", _file="benchmarks/results/a_all_families.csv")
    rows = [row, dict(row, M="128", N="128", K="128"),
            dict(row, device="GPU two", _file="benchmarks/results/b.csv"),
            dict(row, M="256", N="256", K="256", _file="benchmarks/results/c.csv")]
    text = "\n".join(ext._measured_table("tiled", rows))
    titles = re.findall(r"^Measured on (.+?) \(", text, re.M)
    assert titles == ["GPU one", "GPU two"]
    assert "ALL FAMILIES" not in text and "64³ | 128³ | 256³" in text
    with pytest.raises(ValueError, match="keep one"):   # one cell from two files, one device
        ext._measured_table("tiled", rows + [dict(row, _file="benchmarks/results/c.csv")])


def test_results_files_name_their_device():
    rows = _results_rows()
    assert rows and all(r.get("device") for r in rows)


def test_kernel_pages_title_tables_with_the_device(site):
    """In the built pages: one "Measured on DEVICE" table per kernel and device of the
    committed results, none titled from a file name."""
    rows = _results_rows()
    for family in ("matmul", "reduce"):
        with open(os.path.join(site, "kernels", f"{family}.html"), encoding="utf-8") as f:
            text = html.unescape(re.sub(r"<[^>]+>", "", f.read()))
        titles = re.findall(r"Measured on (.+?) \(", text)
        expected = {(r["kernel"], r["device"]) for r in rows if r.get("family") == family
                    and (r.get("tflops") or r.get("gbps"))}
        assert expected and len(titles) == len(expected), (family, titles)
        assert set(titles) == {device for _, device in expected}
        assert "ALL FAMILIES" not in text and "SXM (" not in text


def _readme_setup():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return text.split("## Set up", 1)[1].split("\n## ", 1)[0]


def test_readme_names_every_build_switch():
    """Each environment switch setup.py reads (its docstring lists them) is named in README's
    Set up, TILEDMM_NO_CUDA beside TILEDMM_CUDA_ARCHS included."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        switches = set(re.findall(r"^  (TILEDMM_[A-Z_]+)", f.read(), re.M))
    assert {"TILEDMM_NO_CUDA", "TILEDMM_CUDA_ARCHS"} <= switches
    setup = _readme_setup()
    assert not [name for name in switches if name not in setup]


def test_readme_says_how_to_add_an_extra_without_a_rebuild():
    """The packages README tells one to install by name are the [notebooks] extra's."""
    try:
        import tomllib
    except ImportError:   # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["notebooks"]
    wanted = {re.split(r"[<>=\[]", req)[0] for req in extra}
    setup = _readme_setup()
    named = re.search(r"`pip install ((?:[a-z][\w-]* ?)+)`", setup)
    assert named and "temporary folder" in setup
    assert set(named.group(1).split()) == wanted


def test_readme_tells_how_to_get_the_browser_tests():
    setup = _readme_setup()
    assert "apt-get install -y chromium" in setup and "`chromium` package" in setup
    assert 'pip install -e ".[test]" && python -m pytest -n auto' in setup   # the command unchanged


def test_browser_tests_skip_naming_the_package(tmp_path):
    """Without Chromium on PATH the browser tests skip (before building the site) with a
    reason that names Debian's package."""
    pytest.importorskip("websocket")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         f"{__file__}::test_browser_index"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300)
    assert "1 skipped" in proc.stdout, proc.stdout + proc.stderr
    assert "chromium` package (apt-get install -y chromium)" in proc.stdout
    assert not os.path.exists(os.path.join(tmp_path, "docs"))


# ----------------------------------------------------------------------------- the browser

def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class DevTools:
    """A page of a headless Chromium, driven through the DevTools protocol."""

    def __init__(self, ws_url):
        import websocket
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def send(self, method, timeout=60, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)
        raise TimeoutError(method)

    def wait_for(self, event, timeout=60):
        deadline = time.monotonic() + timeout
        for i, msg in enumerate(self.events):
            if msg.get("method") == event:
                return self.events.pop(i)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == event:
                return msg
            self.events.append(msg)
        raise TimeoutError(event)

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self):
        """Console errors, uncaught exceptions and failed loads seen so far (then cleared)."""
        out = []
        for msg in self.events:
            method, p = msg.get("method"), msg.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console." + p["type"] + ": "
                           + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p["exceptionDetails"])[:500])
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif method == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"load failed: {p.get('errorText')} ({p.get('type')})")
            elif method == "Network.responseReceived" and p["response"]["status"] >= 400:
                out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
        self.events.clear()
        return out

    def close(self):
        self.ws.close()


CHROMIUM_SKIP = ("no Chromium on PATH (looked for chromium, chromium-browser, google-chrome): "
                 "install Debian's `chromium` package (apt-get install -y chromium) to run the "
                 "browser tests")


@pytest.fixture(scope="module")
def browser(request):
    pytest.importorskip("websocket", reason="websocket-client is not installed: "
                                            "pip install -e '.[test]'")
    exe = _chromium()
    if exe is None:   # before building the site: the skip costs nothing
        pytest.skip(CHROMIUM_SKIP)
    site = request.getfixturevalue("site")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="tiledmm-chromium-")
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         "--remote-allow-origins=*", f"--user-data-dir={profile}", "--window-size=1280,900",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        assert port, f"chromium did not start its DevTools endpoint (exit {proc.poll()})"
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            targets = [t for t in json.load(r) if t.get("type") == "page"]
        page = DevTools(targets[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                  deviceScaleFactor=1, mobile=False)
        page.base = f"http://127.0.0.1:{server.server_address[1]}/"
        yield page
        page.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


# Every image made to load now (lazy ones included), then the ones that did not load.
_BROKEN_IMAGES = """(async () => {
  const imgs = Array.from(document.images);
  for (const img of imgs) { img.loading = "eager"; }
  await Promise.all(imgs.map(img => img.decode().catch(() => null)));
  return {count: imgs.length,
          broken: imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)};
})()"""


def _load(page, rel):
    page.problems()
    page.send("Page.navigate", url=page.base + rel)
    page.wait_for("Page.loadEventFired")
    time.sleep(0.5)   # let late scripts (theme, search) run and report
    title = page.evaluate("document.title")
    images = page.evaluate(_BROKEN_IMAGES)
    problems = page.problems()
    assert not problems, f"{rel}: " + "\n".join(problems)
    assert not images["broken"], f"{rel}: images that did not load: {images['broken']}"
    return title, images["count"]


def _notebook_page(site):
    """The built notebook page with the most images (the first one when none has any)."""
    pages = sorted(p for p in os.listdir(os.path.join(site, "notebooks"))
                   if p.endswith(".html") and p != "index.html")
    assert pages, "no notebook pages were built"
    return "notebooks/" + max(pages, key=lambda p: sum(
        tag == "img" for tag, _ in _parse(os.path.join(site, "notebooks", p)).links))


def test_browser_index(browser):
    title, _ = _load(browser, "index.html")
    assert "tiledmm" in title
    assert browser.evaluate("document.querySelectorAll('a.reference.internal').length") > 5


def test_browser_api_page(browser):
    title, _ = _load(browser, "api/tiledmm.html")
    assert "tiledmm" in title
    assert browser.evaluate("!!document.getElementById('tiledmm.matmul')")
    # its example is on the page
    assert "kernel=\"tiled\", tile=8" in browser.evaluate("document.body.innerText")


def test_browser_notebook_page(browser, site):
    rel = _notebook_page(site)
    title, n_images = _load(browser, rel)
    assert browser.evaluate("document.querySelectorAll('div.cell').length") > 0, \
        f"{rel}: no notebook cells rendered"
    # code cells wrap at the page's width: none scrolls sideways (docs/_static/tiledmm.css)
    wide = browser.evaluate("Array.from(document.querySelectorAll('div.cell_input pre'))"
                            ".filter(p => p.scrollWidth > p.clientWidth + 1).length")
    assert wide == 0, f"{rel}: {wide} code cells scroll sideways"
    os.makedirs(SCREENSHOTS, exist_ok=True)
    shots = {"notebook.png": "window.scrollTo(0, 0)"}
    if n_images:   # and one with the first plot in view
        shots["notebook_figure.png"] = "document.images[0].scrollIntoView({block: 'center'})"
    for name, js in shots.items():
        browser.evaluate(js)
        time.sleep(0.3)
        data = browser.send("Page.captureScreenshot", format="png")["data"]
        import base64
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, "screenshot looks empty"
        with open(os.path.join(SCREENSHOTS, name), "wb") as f:
            f.write(png)
    assert not browser.problems()
