"""Emulated hosts' links: a bridge, a network namespace per host and a shaped veth pair joining them.

Every name starts with ``dbkit``: namespaces ``dbkit-h1`` ..., the bridge ``dbkit-br``, each host's veth end
on the bridge ``dbkit-v1`` ... (inside its namespace the other end is ``eth0``). Addresses come from
198.18.0.0/24, the range RFC 2544 sets aside for benchmarking networks: host ``k`` is 198.18.0.``k``, the
bridge (where the scheduler and the driver sit) 198.18.0.254. The hosts have no default route and the bridge
no uplink, so nothing is routed off the machine.

A link is shaped in both directions by a token bucket (``tbf``) on each end's egress: the bridge end's
shapes what reaches the host, the host end's what it sends. This kernel has no ``netem``, so a link's
latency is its own (tens of microseconds) plus what the queue adds.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def off_the_event_loop(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` on a thread of its own when the calling thread runs an asyncio event loop (a notebook's kernel):
    pyroute2's synchronous calls drive an event loop of their own, which cannot start inside a running one."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return fn(*args, **kwargs)
        with ThreadPoolExecutor(1, thread_name_prefix="dbkit-emulate-netlink") as pool:
            return pool.submit(fn, *args, **kwargs).result()

    return wrapper

PREFIX = "dbkit"
BRIDGE = f"{PREFIX}-br"
SUBNET = "198.18.0"
PREFIXLEN = 24
BRIDGE_ADDRESS = f"{SUBNET}.254"
MAX_HOSTS = 200
BURST_BYTES = 128_000  # the bucket's depth: about 10 ms at 100 Mbit/s, ample for a 1500-byte MTU
QUEUE_LATENCY_US = 50_000  # how long a packet may wait in the bucket's queue before it is dropped

_UNITS = {"": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bps": 8, "kbps": 8 * 10**3,
          "mbps": 8 * 10**6, "gbps": 8 * 10**9}


def parse_rate(text: str | float) -> int:
    """A link rate in bits per second, from ``tc``'s spelling (``"100mbit"``, ``"1gbit"``, ``"12mbps"``
    for bytes) or a number of bits per second. Between 64 kbit/s and 100 Gbit/s, or ``ValueError``."""
    if isinstance(text, bool):
        raise ValueError(f"a link rate is a number or a tc rate like '100mbit', got {text!r}")
    if isinstance(text, (int, float)):
        bits = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"a link rate is like '100mbit', '1gbit' or '12mbps' (bytes), got {text!r}")
        bits = float(m.group(1)) * _UNITS[unit]
    if not 64e3 <= bits <= 100e9:
        raise ValueError(f"a link rate must be between 64kbit and 100gbit, got {text!r}")
    return int(bits)


@dataclass(frozen=True)
class HostLink:
    """Host ``index``: its namespace, its address and the bridge end of its link."""

    index: int

    @property
    def netns(self) -> str:
        return f"{PREFIX}-h{self.index}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}"

    @property
    def outer(self) -> str:
        return f"{PREFIX}-v{self.index}"

    @property
    def inner(self) -> str:
        return f"{PREFIX}-p{self.index}"  # renamed eth0 once inside its namespace


def _shape(ipr, index: int, rate_bits: int) -> None:
    """A token bucket at ``rate_bits`` on link ``index``'s egress (replacing any qdisc there)."""
    ipr.tc("replace", "tbf", index=index, handle="1:", rate=f"{rate_bits}bit", burst=BURST_BYTES,
           latency=QUEUE_LATENCY_US)


@off_the_event_loop
def build(hosts: int, rate_bits: int) -> list[HostLink]:
    """The bridge and ``hosts`` namespaces, each with a shaped link to it; ``RuntimeError`` naming what
    failed (and nothing left half-built: ``remove`` runs first and after a failure)."""
    from pyroute2 import IPRoute, NetNS, netns

    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be between 1 and {MAX_HOSTS}, got {hosts!r}")
    remove()
    made = [HostLink(k) for k in range(1, hosts + 1)]
    try:
        with IPRoute() as ipr:
            _refuse_taken_subnet(ipr)
            ipr.link("add", ifname=BRIDGE, kind="bridge")
            br = ipr.link_lookup(ifname=BRIDGE)[0]
            ipr.addr("add", index=br, address=BRIDGE_ADDRESS, prefixlen=PREFIXLEN)
            ipr.link("set", index=br, state="up")
            for h in made:
                netns.create(h.netns)
                ipr.link("add", ifname=h.outer, kind="veth", peer=h.inner)
                outer, inner = ipr.link_lookup(ifname=h.outer)[0], ipr.link_lookup(ifname=h.inner)[0]
                ipr.link("set", index=inner, net_ns_fd=h.netns)
                ipr.link("set", index=outer, master=br, state="up")
                _shape(ipr, outer, rate_bits)
                ns = NetNS(h.netns)
                try:
                    eth = ns.link_lookup(ifname=h.inner)[0]
                    ns.link("set", index=eth, ifname="eth0")
                    ns.addr("add", index=eth, address=h.address, prefixlen=PREFIXLEN)
                    ns.link("set", index=eth, state="up")
                    ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
                    _shape(ns, eth, rate_bits)
                finally:
                    ns.close()
    except Exception as e:
        remove()
        raise RuntimeError(f"could not build the emulated hosts' links: {type(e).__name__}: {e}") from e
    return made


def _refuse_taken_subnet(ipr) -> None:
    """Refuse to build on a machine where 198.18.0.0/24 is already in use (by anything but dbkit)."""
    for a in ipr.get_addr(family=2):
        address = a.get_attr("IFA_ADDRESS") or ""
        if address.startswith(SUBNET + "."):
            raise RuntimeError(f"{SUBNET}.0/{PREFIXLEN} is already in use on this machine ({address}); "
                               "an emulated cluster needs it to itself")


@off_the_event_loop
def set_link(host: HostLink, up: bool) -> None:
    """Take ``host``'s link down (a network partition: the host keeps running, unreachable) or up again.

    Bringing it up also forgets what either end learnt about the other's hardware address while it was down:
    an address lookup still unanswered when the link came back would otherwise fail the next connection with
    "No route to host" (an ARP entry left ``FAILED``), as if the cable were still out."""
    from pyroute2 import IPRoute, NetNS

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=host.outer)
        if not found:
            raise ValueError(f"no emulated host {host.index} (no link {host.outer})")
        ipr.link("set", index=found[0], state="up" if up else "down")
        if up:
            bridge = ipr.link_lookup(ifname=BRIDGE)
            if bridge:
                _forget_neighbour(ipr, bridge[0], host.address)
    if up:
        ns = NetNS(host.netns)
        try:
            _forget_neighbour(ns, ns.link_lookup(ifname="eth0")[0], None)
        finally:
            ns.close()


def _forget_neighbour(ipr, index: int, address: str | None) -> None:
    """Delete link ``index``'s neighbour entries (only ``address``'s, unless ``None``)."""
    from pyroute2 import NetlinkError

    for entry in ipr.get_neighbours(ifindex=index):
        dst = entry.get_attr("NDA_DST")
        if dst and (address is None or dst == address):
            try:
                ipr.neigh("del", ifindex=index, dst=dst)
            except NetlinkError:  # an entry that expired meanwhile is already forgotten
                pass


@off_the_event_loop
def existing() -> tuple[list[str], list[str]]:
    """The dbkit namespaces and links on this machine now (left by a run that crashed, or a running one)."""
    from pyroute2 import IPRoute, netns

    spaces = sorted(n for n in netns.listnetns() if n.startswith(PREFIX + "-"))
    with IPRoute() as ipr:
        links = sorted(name for name in (link.get_attr("IFLA_IFNAME") for link in ipr.get_links())
                       if name and name.startswith(PREFIX + "-"))
    return spaces, links


@off_the_event_loop
def remove() -> None:
    """Remove every dbkit namespace and link (a veth end goes with its namespace or its peer)."""
    from pyroute2 import IPRoute, netns

    spaces, links = existing()
    for name in spaces:
        netns.remove(name)
    with IPRoute() as ipr:
        for name in links:
            for index in ipr.link_lookup(ifname=name):
                try:
                    ipr.link("del", index=index)
                except Exception:  # noqa: BLE001 - its peer's removal took it already
                    pass
