"""An emulated cluster: ``hosts`` machines on this one, each with its own address, a shaped link and a CPU share.

``Cluster(hosts=8, link="100mbit", cpu=0.25)`` builds the hosts (``dbkit.emulate.links``), their CPU groups
(``dbkit.emulate.cpu_groups``), starts a real ``dask scheduler`` on the bridge's address and one
``dask worker`` per host, inside its namespace and group, bound to its own address. ``address`` is the
scheduler's, which every job, ``dbkit run --scheduler`` and the panel accept. Used as a context manager it
removes everything on exit (KeyboardInterrupt included); ``dbkit emulate up``/``down`` keep it between
commands, with its state in ``STATE``.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import cpu_groups, links
from .support import missing

STATE = Path("/run/dbkit-emulate/state.json")
LOGS = Path("/tmp/dbkit-emulate")
SCHEDULER_PORT = 8786
SCHEDULER_GROUP = f"{links.PREFIX}-sched"


class EmulationUnavailable(RuntimeError):
    """This machine cannot build an emulated cluster; the message says what is missing, in one line."""


def check_share(name: str, share: float | None) -> None:
    """Refuse a host's CPU share outside 0.01 to 64 cores (``None``, uncapped, is allowed)."""
    if share is not None and not (isinstance(share, (int, float)) and 0.01 <= share <= 64):
        raise ValueError(f"{name} is a host's share of one core, from 0.01 to 64, got {share!r}")


@dataclass(frozen=True)
class ClusterSpec:
    """What to build: ``hosts`` hosts, each link at ``link`` both ways, each host ``cpu`` of a core
    (``None``: uncapped), ``threads`` per worker."""

    hosts: int = 4
    link: str = "100mbit"
    cpu: float | None = 0.25
    threads: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or not 1 <= self.hosts <= links.MAX_HOSTS:
            raise ValueError(f"hosts must be a whole number from 1 to {links.MAX_HOSTS}, got {self.hosts!r}")
        links.parse_rate(self.link)
        check_share("cpu", self.cpu)
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= 64:
            raise ValueError(f"threads must be a whole number from 1 to 64, got {self.threads!r}")

    @property
    def blas_threads(self) -> int:
        """Threads a host's BLAS may use: the cores its share amounts to (at least 1; 1 uncapped, as Dask's nanny
        sets). Left alone, OpenBLAS starts a thread per core of the machine, and on a quarter-core host the
        second spins on the host's quota: a fully connected layer cut in 8 computed 10x slower than its share."""
        return 1 if self.cpu is None else max(1, math.ceil(self.cpu))


@dataclass
class ClusterState:
    """A running emulated cluster as ``dbkit emulate status`` reads it back."""

    spec: ClusterSpec
    address: str
    hosts: list[str]  # each worker's address, host 1 first
    pids: dict[str, int] = field(default_factory=dict)  # "scheduler", "host-1", ... -> process id
    logs: str = str(LOGS)
    reaper: int = 0  # the process that removes the cluster if its owner is killed (0: none, ``emulate up``)

    def save(self) -> None:
        STATE.parent.mkdir(parents=True, exist_ok=True)
        STATE.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls) -> ClusterState | None:
        try:
            raw = json.loads(STATE.read_text())
            return cls(ClusterSpec(**raw["spec"]), raw["address"], list(raw["hosts"]), dict(raw["pids"]),
                       raw.get("logs", str(LOGS)), int(raw.get("reaper", 0)))
        except (FileNotFoundError, KeyError, TypeError, ValueError):
            return None


BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # what Dask's nanny sets


def _launch(group: str, space: str, command: list[str], log: Path, blas_threads: int | None = None) -> subprocess.Popen:
    """``command`` in CPU group ``group`` and namespace ``space``, in a session of its own (a Ctrl-C at the
    terminal reaches the driver, which stops it), its output to ``log``; with ``blas_threads``, its BLAS
    limited to that many threads."""
    env = None if blas_threads is None else {**os.environ, **dict.fromkeys(BLAS_THREADS, str(blas_threads))}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "dbkit.emulate.enter", group, space, "--", *command],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a cluster's scheduler or worker, as ``status`` shows it). A process that
    has ended but whose parent has not reaped it (a zombie: its owner was killed) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # the state is the field after the command's closing parenthesis
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def tear_down() -> None:
    """Stop every process of an emulated cluster and remove its groups, namespaces, links and state: after a
    ``down``, a finished ``Cluster`` or a crashed run."""
    cpu_groups.stop_all()
    links.remove()
    STATE.unlink(missing_ok=True)


class ClusterUp(RuntimeError):
    """An emulated cluster is up already: a second one is refused, and the first left running."""


def up_now() -> ClusterState | None:
    """The emulated cluster that is up now (its hosts exist and its scheduler runs), or ``None``: none, or only
    a crashed one's leftovers (which the next ``start`` clears)."""
    state = ClusterState.load()
    if state is None or not links.existing()[0] or not running(state.pids.get("scheduler", -1)):
        return None
    return state


def leftovers() -> list[str]:
    """What of an emulated cluster exists on this machine now (namespaces, links, CPU groups)."""
    spaces, made = links.existing()
    return spaces + made + cpu_groups.existing()


class Cluster:
    """An emulated cluster of ``hosts`` machines; see the module's docstring. Nothing is built until
    ``start()`` (or ``with``)."""

    def __init__(self, hosts: int = 4, link: str = "100mbit", cpu: float | None = 0.25, threads: int = 2,
                 timeout: float = 90.0, progress: Callable[[str], None] | None = None) -> None:
        self.spec = ClusterSpec(hosts, link, cpu, threads)
        self.timeout = timeout
        self.progress = progress  # called with a line at each stage of start() (a notebook prints them)
        self.state: ClusterState | None = None
        self._reaper: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        if self.state is None:
            raise RuntimeError("the emulated cluster is not started")
        return self.state.address

    @property
    def hosts(self) -> list[links.HostLink]:
        return [links.HostLink(k) for k in range(1, self.spec.hosts + 1)]

    def start(self) -> Cluster:
        why = missing()
        if why:
            raise EmulationUnavailable(why)
        if up_now() is not None:  # never take down a cluster that is running: it may be another's
            raise ClusterUp("an emulated cluster is already up (dbkit emulate status); stop it first with "
                            "dbkit emulate down")
        tear_down()  # a crashed run's leftovers first
        # a kernel that is killed runs no exit hook: this process removes the hosts then (dbkit.emulate.reaper)
        self._reaper = subprocess.Popen([sys.executable, "-m", "dbkit.emulate.reaper", str(os.getpid())],
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self.state = self._build()
            self.state.reaper = self._reaper.pid
        except BaseException:
            tear_down()
            self._stop_reaper()
            raise
        self.state.save()
        atexit.register(self.close)  # a notebook's kernel that ends takes its hosts with it
        return self

    def _stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.terminate()
            self._reaper.wait()
            self._reaper = None

    def _build(self) -> ClusterState:
        spec = self.spec
        made = links.build(spec.hosts, links.parse_rate(spec.link))
        self._say(f"{spec.hosts} hosts built ({made[0].address} to {made[-1].address}, {spec.link} links); "
                  "starting a Dask scheduler and a worker on each")
        LOGS.mkdir(parents=True, exist_ok=True)
        address = f"tcp://{links.BRIDGE_ADDRESS}:{SCHEDULER_PORT}"
        cpu_groups.create(SCHEDULER_GROUP, None)
        pids = {"scheduler": _launch(SCHEDULER_GROUP, "-", [
            sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", links.BRIDGE_ADDRESS,
            "--port", str(SCHEDULER_PORT), "--no-dashboard"], LOGS / "scheduler.log").pid}
        for h in made:
            group = f"{links.PREFIX}-h{h.index}"
            cpu_groups.create(group, spec.cpu)
            pids[f"host-{h.index}"] = _launch(group, h.netns, [
                sys.executable, "-m", "distributed.cli.dask_worker", address, "--host", h.address,
                "--name", f"host-{h.index}", "--nthreads", str(spec.threads), "--no-nanny", "--no-dashboard",
                "--memory-limit", "0", "--local-directory", str(LOGS / f"host-{h.index}")],
                LOGS / f"host-{h.index}.log", spec.blas_threads).pid
        self._wait_for_workers(address, spec.hosts)
        self._say(f"the emulated cluster is up: {spec.hosts} workers at {address}")
        return ClusterState(spec, address, [h.address for h in made], pids)

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _wait_for_workers(self, address: str, n: int) -> None:
        from ..runtime.dask.cluster import Cluster as DaskCluster
        from ..runtime.dask.scheduler import ClusterError

        deadline = time.monotonic() + self.timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                with DaskCluster(scheduler=address, timeout=5) as client:
                    while True:  # in slices, saying how many joined (a quarter-core host starts slowly)
                        try:
                            client.wait_for_workers(n, timeout=min(5.0, max(1.0, deadline - time.monotonic())))
                            return
                        except ClusterError:
                            if time.monotonic() >= deadline:
                                raise
                            self._say(f"{len(client.workers())} of {n} workers joined")
            except (OSError, TimeoutError, ClusterError) as e:
                last = e
                time.sleep(0.5)
        raise TimeoutError(f"the emulated cluster's {n} workers did not all join {address} within "
                           f"{self.timeout:.0f} s (logs in {LOGS}): {last}")

    def workers(self) -> list[str]:
        """The Dask workers' addresses in host order: ``workers()[0]`` is host 1's (198.18.0.1)."""
        from ..runtime.dask.cluster import Cluster as DaskCluster

        with DaskCluster(scheduler=self.address, timeout=10) as client:
            found = client.workers()
        return sorted(found, key=lambda w: int(w.split("//")[-1].split(":")[0].rsplit(".", 1)[-1]))

    def set_link(self, host: int, up: bool) -> None:
        """Take host ``host``'s link down (a network partition) or bring it back up."""
        links.set_link(links.HostLink(host), up)

    def set_cpu(self, host: int, share: float | None) -> None:
        """Give host ``host`` ``share`` of a core from now on (a straggler: less than the others; ``None``: no
        cap). Its worker keeps running; ``spec.cpu`` still says what the hosts were built with."""
        if isinstance(host, bool) or not isinstance(host, int) or not 1 <= host <= self.spec.hosts:
            raise ValueError(f"host must be one of 1..{self.spec.hosts}, got {host!r}")
        check_share("share", share)
        if self.state is None:
            raise RuntimeError("the emulated cluster is not started")
        cpu_groups.set_share(f"{links.PREFIX}-h{host}", share)

    def detach(self) -> None:
        """Leave the cluster running after this process exits (``dbkit emulate up``): ``dbkit emulate down`` or
        the next ``tear_down()`` removes it. This object no longer closes it."""
        atexit.unregister(self.close)
        self._stop_reaper()
        if self.state is not None:
            self.state.reaper = 0
            self.state.save()
        self.state = None

    def close(self) -> None:
        """Stop every process and remove the hosts, links and groups (also at the interpreter's exit)."""
        atexit.unregister(self.close)
        if self.state is not None:
            tear_down()  # the reaper still watches: if this process is killed halfway, it finishes the job
            self.state = None
        self._stop_reaper()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
