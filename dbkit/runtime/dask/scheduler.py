"""Refuse at once a scheduler address where no Dask scheduler answers, and the errors a cluster raises."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster could not be started or reached."""


class SchedulerAddressError(ClusterError, ValueError):
    """Nothing at a scheduler address answers as a Dask scheduler (bad input: the CLI exits 2)."""


def probe_scheduler(address: str, timeout: float = 3.0) -> None:
    """Refuse within ``timeout`` seconds an address where no Dask scheduler listens.

    Dask's client would retry a refused connection for its whole connect timeout
    (10 s), and on a port that answers but is not Dask (a web server) it waits,
    or reads the reply as a frame length ("Unable to allocate 3.07 EiB"). A Dask
    scheduler greets a new connection at once with a framed handshake whose first
    8 bytes are its length (little-endian); that is what is checked. Only
    ``tcp://`` (and bare ``host:port``) addresses are probed: TLS waits for the
    client to speak first.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme != "tcp":
        return
    host, port = parse_host_port(location)
    import socket

    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError as e:
        raise SchedulerAddressError(f"nothing listens at {address} (connection refused): is the Dask scheduler "
                                    "running there, on that port (its default is 8786)?") from e
    except OSError as e:
        raise SchedulerAddressError(f"cannot reach {address} within {timeout:g}s ({e})") from e
    with conn:
        try:
            head = b""
            while len(head) < 8:
                more = conn.recv(8 - len(head))
                if not more:
                    break
                head += more
        except OSError:  # socket.timeout included
            pass
    length = int.from_bytes(head, "little") if len(head) == 8 else 0
    if not 0 < length <= 2**20:
        said = f"it sent {head!r}" if head else f"it sent nothing within {timeout:g}s"
        raise SchedulerAddressError(f"{address} answers but is not a Dask scheduler ({said}); check the port "
                                    "(a scheduler listens on 8786 by default; 8787 is its dashboard)")
