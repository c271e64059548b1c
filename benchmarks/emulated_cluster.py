"""What an emulated cluster holds (issue #47's first targets), through ``dbkit.emulate.Cluster`` as a user builds it:

- each shaped link's rate: a bulk transfer from host 1 to host 2 (raw TCP, one process a side, in the hosts'
  namespaces and CPU groups) against the set rate, and the same transfer over this machine's loopback (no
  shaping: the ceiling);
- flows sharing a link: ``k`` hosts sending to one host at once (as replicas push to one shard), and one host
  sending to ``k`` at once (as a shard answers them), for ``k`` in ``--flows``: the rate they carry together
  against the set rate (the simulator's ``shared_links`` rests on it: a link shared by several TCP flows
  carries what one flow does);
- the CPU shares: the same fixed computation on 1 host and on all ``hosts`` at once; the speed-up against
  ``hosts`` (eight hosts at a quarter of a core should give at least 6x one of them, using both cores).

    python benchmarks/emulated_cluster.py [--hosts 8] [--link 100mbit] [--cpu 0.25] [--megabytes 40] [--rounds 3]
        [--flows 1,4,7] [--json F]

Needs root (``dbkit emulate``'s requirements); elsewhere it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import write_json

RECEIVE_MANY = """
import socket, sys, threading, time
servers = [socket.create_server((sys.argv[1], int(sys.argv[2]) + i)) for i in range(int(sys.argv[3]))]
counts, first, last = [0] * len(servers), [], []
def run(i):
    c, _ = servers[i].accept()
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        now = time.perf_counter()
        if not first:
            first.append(now)
        counts[i] += len(b); last.append(now)
threads = [threading.Thread(target=run, args=(i,)) for i in range(len(servers))]
[t.start() for t in threads]; [t.join() for t in threads]
print(sum(counts), first[0], max(last))
"""
SEND_MANY = """
import socket, sys, threading, time
def run(i, address):
    for _ in range(100):
        try:
            s = socket.create_connection((address, int(sys.argv[2]) + i)); break
        except OSError:
            time.sleep(0.05)
    buf = b"x" * (1 << 20)
    for _ in range(int(sys.argv[3])):
        s.sendall(buf)
    s.close()
threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(sys.argv[1].split(","))]
[t.start() for t in threads]; [t.join() for t in threads]
"""
WORK = """
import sys, time
begin, end, n = float(sys.argv[1]), float(sys.argv[2]), 0
time.sleep(max(0.0, begin - time.time()))
while time.time() < end:
    x = 0
    for i in range(10_000):
        x += i * i
    n += 1
print(n)
"""


def on_host(k: int | None, code: str, *args: str) -> list[str]:
    """``python -c code args`` on emulated host ``k`` (its namespace and CPU group), or on this machine."""
    command = [sys.executable, "-c", code, *args]
    return command if k is None else [sys.executable, "-m", "dbkit.emulate.enter", f"dbkit-h{k}", f"dbkit-h{k}",
                                      "--", *command]


def transfer(megabytes: int, sender: int | None, receiver: int | None, address: str) -> float:
    """Bits per second of a bulk TCP transfer of ``megabytes`` MiB, as the receiver counts them."""
    rx = subprocess.Popen(on_host(receiver, RECEIVE_MANY, address, "5001", "1"), stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    subprocess.run(on_host(sender, SEND_MANY, address, "5001", str(megabytes)), check=True, timeout=600)
    out, _ = rx.communicate(timeout=60)
    n, first, last = out.split()
    return int(n) * 8 / (float(last) - float(first))


def flows(k: int, megabytes: int, into_one: bool) -> float:
    """Bits per second that ``k`` bulk TCP flows of ``megabytes`` MiB each carry together, from hosts 2..k+1 into
    host 1 (``into_one``) or from host 1 out to hosts 2..k+1, counted by the receivers from the first byte to the
    last."""
    others = [2 + i for i in range(k)]
    if into_one:
        receivers = [subprocess.Popen(on_host(1, RECEIVE_MANY, "198.18.0.1", "6000", str(k)), stdout=subprocess.PIPE,
                                      text=True)]
        time.sleep(0.5)
        senders = [subprocess.Popen(on_host(h, SEND_MANY, "198.18.0.1", str(6000 + i), str(megabytes)))
                   for i, h in enumerate(others)]
    else:
        receivers = [subprocess.Popen(on_host(h, RECEIVE_MANY, f"198.18.0.{h}", str(7000 + i), "1"),
                                      stdout=subprocess.PIPE, text=True) for i, h in enumerate(others)]
        time.sleep(0.5)
        senders = [subprocess.Popen(on_host(1, SEND_MANY, ",".join(f"198.18.0.{h}" for h in others), "7000",
                                            str(megabytes)))]
    for p in senders:
        p.wait(timeout=600)
    outs = [r.communicate(timeout=60)[0].split() for r in receivers]
    total = sum(int(o[0]) for o in outs)
    # each receiver's clock is this machine's (namespaces share it): from the first byte anywhere to the last
    return total * 8 / (max(float(o[2]) for o in outs) - min(float(o[1]) for o in outs))


def computation(hosts: list[int | None], seconds: float = 8.0) -> float:
    """Rounds of a fixed pure-Python loop per second that ``hosts`` run together, counted by each over the same
    ``seconds`` of wall time (after every process has started: start-up is not counted)."""
    begin = time.time() + 4.0
    procs = [subprocess.Popen(on_host(k, WORK, str(begin), str(begin + seconds)), stdout=subprocess.PIPE, text=True)
             for k in hosts]
    return sum(int(p.communicate(timeout=120)[0]) for p in procs) / seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--link", default="100mbit")
    ap.add_argument("--cpu", type=float, default=0.25)
    ap.add_argument("--megabytes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of one host and of every host")
    ap.add_argument("--flows", default="1,4,7", help="numbers of flows sharing one host's link")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from dbkit.emulate import Cluster, missing, parse_rate

    ks = [int(k) for k in args.flows.split(",") if k.strip().isdigit()]
    if not ks or len(ks) != len(args.flows.split(",")) or any(not 1 <= k < args.hosts for k in ks):
        print(f"emulated_cluster: --flows takes whole numbers in [1, {args.hosts - 1}] (hosts - 1), got "
              f"{args.flows!r}", file=sys.stderr)
        return 2
    why = missing()
    if why:
        print(f"emulated_cluster: {why}", file=sys.stderr)
        return 2
    loopback = transfer(args.megabytes, None, None, "127.0.0.1")
    bare_one, bare_all = computation([None]), computation([None] * args.hosts)  # type: ignore[list-item]
    with Cluster(hosts=args.hosts, link=args.link, cpu=args.cpu):
        rate = transfer(args.megabytes, 1, 2, "198.18.0.2")
        per_flow = max(1, args.megabytes // 4)
        shared = [(k, flows(k, per_flow, True), flows(k, per_flow, False)) for k in ks]
        rounds = [(computation([1]), computation(list(range(1, args.hosts + 1)))) for _ in range(args.rounds)]
    one, every = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
    set_rate = parse_rate(args.link)
    speedup = statistics.median(r[1] / r[0] for r in rounds)
    print(f"link {args.link}: a {args.megabytes} MiB transfer from host 1 to host 2 at {rate / 1e6:.1f} Mbit/s = "
          f"{rate / set_rate:.3f} of the set rate (loopback, unshaped: {loopback / 1e6:,.0f} Mbit/s)")
    for k, into, out in shared:
        print(f"{k} flow{'s' if k > 1 else ''} of {per_flow} MiB sharing host 1's link: into it {into / 1e6:.1f} "
              f"Mbit/s ({into / set_rate:.3f} of the set rate), out of it {out / 1e6:.1f} ({out / set_rate:.3f})")
    print(f"CPU: one host at {args.cpu} core {one:,.0f} rounds/s; {args.hosts} hosts at once {every:,.0f} rounds/s: "
          f"{speedup:.2f}x one host (of {args.hosts}x; median of {args.rounds} alternating rounds, each "
          f"{', '.join(f'{b / a:.2f}' for a, b in rounds)}); this machine with no groups: one process {bare_one:,.0f}, "
          f"{args.hosts} at once {bare_all:,.0f} rounds/s ({bare_all / bare_one:.2f}x)")
    write_json(args.json, "emulated_cluster", {"hosts": args.hosts, "link": args.link, "cpu": args.cpu,
                           "megabytes": args.megabytes, "rate_bits": rate, "set_rate_bits": set_rate,
                           "rate_of_set": rate / set_rate, "loopback_bits": loopback,
                           "shared_link_bits": [{"flows": k, "into_one": into, "out_of_one": out}
                                                for k, into, out in shared], "one_host_rounds": one,
                           "all_hosts_rounds": every, "speedup": speedup, "bare_one_rounds": bare_one,
                           "bare_all_rounds": bare_all, "rounds": rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
