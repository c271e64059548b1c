"""The control panel's two costs: from a slider move to the change applied on the running replicas and
shown in the status line, and what refreshing the plots takes from training.

    python benchmarks/panel_latency.py [--moves 10] [--seconds 6] [--rounds 3] [--json out.json]

A 3-replica Downpour job (mlp on digits, Adagrad, 2 shards) on a 2-worker LocalCluster. Latency: the
``n_push`` slider is set as a browser message sets it (``set_state``), then the clock runs until every
live replica's figures show the new rate and until the status line says it was applied. Cost: examples
per second over ``--seconds`` windows with the panel's refresh thread drawing at its usual 2 Hz and with it
halted, alternated ``--rounds`` times in the same run; also the time of one frame.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import write_json


def _rate(job, seconds: float) -> float:
    before, t0 = sum(r.examples for r in job.replicas()), time.perf_counter()
    time.sleep(seconds)
    return (sum(r.examples for r in job.replicas()) - before) / (time.perf_counter() - t0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--moves", type=int, default=10)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    import dbkit
    from dbkit.runtime.dask import Cluster
    from dbkit.widgets import Panel

    with Cluster(n_workers=2) as cluster:
        job = dbkit.DownpourSGD("mlp", "digits", replicas=3, shards=2, optimizer="adagrad", lr=0.05,
                                seconds=3600, client=cluster.client)
        job.start()
        panel = Panel(job)
        time.sleep(2.0)
        applied, shown = [], []
        slider = panel.controls["n_push"]
        for i in range(args.moves):
            value = 2 + i % 2 * 2  # 2, 4, 2, ...
            t0 = time.perf_counter()
            slider.set_state({"value": value})
            while not all(r.n_push == value for r in job.replicas() if r.live):
                time.sleep(0.002)
            applied.append(time.perf_counter() - t0)
            while f"n_push={value} applied" not in panel.status.value:
                time.sleep(0.002)
            shown.append(time.perf_counter() - t0)
            time.sleep(0.5)
        panel.wait_idle()
        with_panel, without = [], []
        for _ in range(args.rounds):
            with_panel.append(_rate(job, args.seconds))
            panel.stop_refresh()  # the job trains on, nothing draws
            without.append(_rate(job, args.seconds))
            panel.start_refresh()
        panel.stop_refresh()  # matplotlib and FreeType are not thread-safe: only this thread draws from here on
        frame = []
        for _ in range(10):
            t0 = time.perf_counter()
            panel.figure.draw(panel.run, panel.past)
            frame.append(time.perf_counter() - t0)
        job.stop()
        panel.close()

    cost = 1 - statistics.median(with_panel) / statistics.median(without)
    out = {"moves": args.moves, "applied_s": applied, "shown_s": shown,
           "applied_median_s": statistics.median(applied), "shown_median_s": statistics.median(shown),
           "shown_max_s": max(shown), "examples_per_second_with_panel": with_panel,
           "examples_per_second_without": without, "refresh_cost": cost,
           "frame_ms_median": 1000 * statistics.median(frame), "frames": panel.frames,
           "full_draws": panel.figure.full_draws}
    print(f"slider -> applied on every replica: median {out['applied_median_s'] * 1000:.0f} ms, "
          f"max {max(applied) * 1000:.0f} ms")
    print(f"slider -> shown in the status line: median {out['shown_median_s'] * 1000:.0f} ms, "
          f"max {out['shown_max_s'] * 1000:.0f} ms ({args.moves} moves)")
    print(f"examples/s with the panel refreshing: {', '.join(f'{r:,.0f}' for r in with_panel)}")
    print(f"examples/s without:                   {', '.join(f'{r:,.0f}' for r in without)}")
    print(f"refresh cost: {100 * cost:.1f}% of the examples per second (medians); one frame "
          f"{out['frame_ms_median']:.1f} ms; {panel.figure.full_draws} whole-figure draws in {panel.frames} frames")
    write_json(args.json, "panel_latency", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
