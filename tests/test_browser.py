"""The control panel in a real browser: JupyterLab 4 and Notebook 7 on 127.0.0.1, headless Chromium
(Debian's, driven by Playwright). A small notebook starts a Downpour job and shows its panel; the test
types 3 into the replicas slider's box (150 for lesson 08's job on 200 simulated machines) and checks, in
the page and in the kernel, that the running job took it, and that the plot changed while it ran (the
recipe of ``WIDGETS.md``). Lessons 00 and 05 run under Run All with a move on their panels while they run,
then Stop and Start."""

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "docs" / "img" / "panel.png"
FRONT_ENDS = {"lab": ("jupyterlab", "LabApp", "/lab/tree/{name}"),
              "notebook": ("notebook", "JupyterNotebookApp", "/notebooks/{name}")}

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (.ci/run installs it)")]

REAL_JOB = "job = dbkit.DownpourSGD('mlp', 'digits', replicas=2, shards=2, optimizer='adagrad', lr=0.05, seconds=600)"
# lesson 08's job: 200 simulated machines of the paper's era
SIMULATED_JOB = ("from dbkit.sim import Cluster\n"
                 "job = dbkit.DownpourSGD('mlp', 'signals', cluster=Cluster(machines=200, profile='distbelief-2012'), "
                 "replicas=1, shards=4, optimizer='adagrad', lr=0.003, n_fetch=1, n_push=1, eval_every=100)")
# section 5 of lesson 07: a job on emulated hosts (shard on host 1, replicas from host 2 on), built in the kernel
EMULATED_JOB = ("from dbkit.emulate import Cluster as Emulated\n"
                "emulated = Emulated(hosts=3, link='100mbit', cpu=0.5).start()\n"
                "hosts = emulated.workers()\n"
                "job = dbkit.DownpourSGD('mlp', 'digits', scheduler=emulated.address, replicas=1, shards=1, "
                "shard_workers=hosts[:1], replica_workers=hosts[1:], optimizer='adagrad', lr=0.05, seconds=600)")
CELLS = [
    "import json, threading, time\nimport dbkit",
    "{job}\njob.start()\npanel = job.panel()\npanel",
    # the kernel's side of the test: what the running job says, written where the test reads it
    "def report_for_the_test(path={state!r}, stop={stop!r}):\n"
    "    import os\n"
    "    while True:\n"
    "        s = job.snapshot()\n"
    "        with open(path + '.tmp', 'w') as f:\n"
    "            json.dump({{'live': s.live_replicas, 'replicas': s.config.replicas, 'state': s.state,\n"
    "                       'frames': panel.frames, 'stopped': job.stopped}}, f)\n"
    "        os.replace(path + '.tmp', path)\n"
    "        if job.stopped:\n"
    "            return\n"
    "        if os.path.exists(stop):\n"
    "            job.stop()\n"
    "        time.sleep(0.2)\n"
    "threading.Thread(target=report_for_the_test, daemon=True).start()",
]


def _server(kind: str, root: Path, home: Path, token: str) -> tuple[subprocess.Popen, int]:
    """The server and the port it chose (``port=0``; read from its runtime file, so no port is handed
    over that another socket could take first)."""
    module, app, _ = FRONT_ENDS[kind]
    settings = home / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"), DBKIT_SMALL="1")
    cmd = [sys.executable, "-m", module, "--no-browser", "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.allow_root=True", f"--{app}.expose_app_in_browser=True"]
    proc = subprocess.Popen(cmd, env=env, stdout=open(home / "server.log", "w"), stderr=subprocess.STDOUT)
    runtime = home / "runtime" / f"jpserver-{proc.pid}.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            port = int(json.loads(runtime.read_text())["port"])
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return proc, port
        except (OSError, ValueError, KeyError):
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError(f"{module} did not answer: {(home / 'server.log').read_text()[-2000:]}")


def _until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def _notebook_page(kind: str, root: Path, home: Path, notebook: str, failure: Path):
    """A Jupyter server of ``kind`` over ``root`` and a Chromium page on ``notebook`` with its kernel idle.

    On an error the page is saved to ``failure``; on the way out the browser closes, then the kernels
    (gracefully) and the server.
    """
    from playwright.sync_api import sync_playwright

    token = secrets.token_hex(16)
    server, port = _server(kind, root, home, token)
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            try:
                page.goto(f"{base}{FRONT_ENDS[kind][2].format(name=notebook)}?token={token}&reset")
                _until(lambda: _kernel_idle(page), 90, "an idle kernel")
                yield page
            except BaseException:
                page.screenshot(path=str(failure))
                raise
            finally:
                browser.close()
    finally:
        _stop_server(server, base, token, home)


def _emulation_missing() -> str | None:
    from dbkit.emulate import missing

    return missing()


@pytest.mark.parametrize("kind, job, before, after", [
    ("notebook", REAL_JOB, 2, 3), ("lab", SIMULATED_JOB, 1, 150),
    pytest.param("lab", EMULATED_JOB, 1, 2, marks=pytest.mark.skipif(
        _emulation_missing() is not None, reason=f"no emulated cluster here: {_emulation_missing()}"))],
    ids=["notebook", "lab-simulated-200-machines", "lab-emulated-hosts"])
def test_the_panel_steers_a_running_job_from_the_browser(kind, job, before, after, tmp_path):
    """Notebook 7, a real job: 2 replicas to 3. Lesson 08's job on 200 simulated machines in JupyterLab:
    1 replica to 150, typed into the same box (the slider reaches the cluster's size). Lesson 07's job on
    emulated hosts (built in the kernel, as root): 1 replica to 2, the new one on host 3; the kernel's end
    removes the hosts. (A real job in JupyterLab: lesson 00's test below.)"""
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    state, stop = root / "state.json", root / "stop"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.format(state=str(state), stop=str(stop), job=job)) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "panel.ipynb")
    with _notebook_page(kind, root, home, "panel.ipynb", tmp_path / f"failure-{kind}.png") as page:
        try:
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_selector(".dbkit-knob-replicas .widget-readout", timeout=90_000)
            page.wait_for_selector("img.dbkit-plot", timeout=30_000)
            _until(lambda: _state(state).get("live") == before, 60, f"{before} live replicas")
            page.evaluate("""() => { window.__srcs = new Set(); window.__timer = setInterval(() => {
                const img = document.querySelector('img.dbkit-plot'); if (img) window.__srcs.add(img.src); },
                100); }""")
            box = page.locator(".dbkit-knob-replicas .widget-readout").first
            box.click()
            page.keyboard.press("Control+A")
            page.keyboard.type(str(after))
            page.keyboard.press("Enter")
            status = page.locator(".dbkit-status").first
            _until(lambda: f"{after} of {after} replicas live" in status.inner_text(), 60,
                   f"the status line to say {after} replicas")
            assert _until(lambda: _state(state).get("live") == after, 30, f"{after} live replicas in the kernel")
            assert _state(state)["replicas"] == after and _state(state)["state"] == "running"
            _until(lambda: page.evaluate("() => window.__srcs.size") >= 3, 30, "the plot to change twice")
            if job == SIMULATED_JOB:
                assert "simulated: profile distbelief-2012, 200 machines" in status.inner_text()
        finally:
            stop.touch()  # the kernel stops its job, then the server shuts the kernel down
            _until(lambda: _state(state).get("stopped") or not _state(state), 60, "the job to stop")
    if job == EMULATED_JOB:  # the kernel closed its hosts on the way out (or, killed, its reaper did)
        from dbkit.emulate import leftovers, tear_down

        try:
            assert _until(lambda: not leftovers(), 60, "the emulated hosts to be removed")
        finally:
            tear_down()


def _kernel_idle(page) -> bool:
    if page.locator(".jp-Dialog button.jp-mod-accept").count():  # "Select Kernel" now and then
        page.locator(".jp-Dialog button.jp-mod-accept").first.click()
    return page.evaluate("""() => { try { return window.jupyterapp.shell.currentWidget.sessionContext.session
        .kernel.status === 'idle'; } catch (e) { return false; } }""")


def _stop_server(server: subprocess.Popen, base: str, token: str, home: Path) -> None:
    """Shut the kernels down (gracefully), then the server; remove its settings and runtime folders."""
    _shutdown_kernels(base, token)
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(home, ignore_errors=True)


def _shutdown_kernels(base: str, token: str) -> None:
    """Ask the server to shut each kernel down (gracefully: its LocalCluster closes on the way out)."""
    try:
        kernels = json.load(urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=5))
        for k in kernels:
            req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
            urllib.request.urlopen(req, timeout=30)
    except OSError:
        pass


def _type_into(page, knob: str, value: int) -> None:
    """Type ``value`` into a slider's readout box, as a learner does (WIDGETS.md: arrow keys do not work
    in Notebook 7)."""
    box = page.locator(f".dbkit-knob-{knob} .widget-readout").first
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")


@pytest.mark.parametrize("lesson, knob, value", [("00_tour", "replicas", 3), ("05_partitioning", "partitions", 1)])
def test_a_lesson_panel_steers_its_running_job_under_run_all_and_starts_again_after_it(lesson, knob, value,
                                                                                        tmp_path, capsys):
    """A lesson as a learner meets it (issue #44): "Run all" from a fresh kernel; while the lesson goes on, a
    move on its panel reaches the running job (the status line says "applied", not "for the next run"); the
    lesson's own check holds; after Run All, Stop then Start runs a new job with its replicas live. The
    seconds from "Run all" to the first evaluation on screen are printed (measured, not asserted)."""
    root, home = tmp_path / "root", tmp_path / "home"
    (root / "notebooks").mkdir(parents=True)
    (root / "docs" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / f"{lesson}.ipynb", root / "notebooks" / f"{lesson}.ipynb")
    for shipped in (ROOT / "docs" / "data").glob("*.json"):  # lesson 05 reads its shipped measurements
        shutil.copy(shipped, root / "docs" / "data" / shipped.name)
    with _notebook_page("lab", root, home, f"notebooks/{lesson}.ipynb", tmp_path / f"failure-{lesson}.png") as page:
        started = time.monotonic()
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        status = page.locator(".dbkit-status").last
        _until(lambda: status.count() and "test accuracy" in status.inner_text(), 300,
               "the panel to show an evaluation")
        first_curve = time.monotonic() - started
        page.wait_for_selector(f".dbkit-knob-{knob} .widget-readout", timeout=30_000)
        _type_into(page, knob, value)
        _until(lambda: f"{knob}={value} applied" in status.inner_text() or f"{knob} " in status.inner_text()
               and "applied" in status.inner_text(), 60, f"the status line to say {knob} was applied")
        assert "for the next run" not in status.inner_text()
        _until(lambda: "lesson held" in page.locator(".jp-OutputArea").last.inner_text(), 420,
               "the lesson's closing check")
        assert "running" in status.inner_text(), "the panel's job runs on after Run All"
        if lesson == "00_tour":  # the README's picture: the tour's panel after Run All, steered
            frame = "() => Array.from(document.querySelectorAll('img.dbkit-plot')).pop().src"
            for _ in range(2):  # two new frames since: the plot shows the change too
                shown = page.evaluate(frame)
                _until(lambda shown=shown: page.evaluate(frame) != shown, 30, "a new frame of the plot")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.locator(".dbkit-panel").last.screenshot(path=str(SCREENSHOT))
        page.locator(".dbkit-button-stop").last.click()
        _until(lambda: "stopped" in status.inner_text(), 60, "the job to stop")
        page.locator(".dbkit-button-start").last.click()
        _until(lambda: "a new run started" in status.inner_text() and " replicas live" in status.inner_text()
               and "running" in status.inner_text(), 90, "a new run with its replicas live")
        assert " 0 of " not in status.inner_text()
        with capsys.disabled():
            print(f"\n{lesson}: first evaluation on the panel {first_curve:.1f} s after Run all")
