"""Issue #48, defect 4: profile files are read with bounds. A FIFO hung for ever, ``/dev/zero`` read until
``MemoryError``, a billion machines took 8 GB in 90 s, ``cores: 1e12`` gave ``MemoryError``, a bandwidth of 1e-300
or a latency of 1e300 ran (or spun) for ever, a host load above its cores and ``fig3 --batch 1e12`` were accepted,
and a malformed ``measured`` table failed deep inside with no file or field named. Each is now refused in one
line naming the file and the field, with exit 2, before anything is built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from dbkit.runtime.sim.profile import SECTIONS, ProfileError, from_dict
from dbkit.runtime.sim.profile import load as load_profile
from dbkit.runtime.sim.profile_ranges import MAY_BE_ZERO, field_range


def dbkit(*args: str) -> subprocess.CompletedProcess:
    """The command line in a process of its own; the timeout only keeps a regression from hanging the run."""
    return subprocess.run([sys.executable, "-m", "dbkit", *args], capture_output=True, text=True, timeout=120)


def _changed(section: str, **values) -> dict:
    d = load_profile("here").to_dict()
    d[section].update(values)
    return d


CASES = {
    "a billion machines": (_changed("machine", machines=1_000_000_000), "machine.machines must be in [0, 100000]"),
    "10^12 cores": (_changed("machine", cores=10**12), "machine.cores must be in [1, 4096]"),
    "a link of 1e-300 bytes a second": (_changed("machine", bandwidth=1e-300), "machine.bandwidth must be in"),
    "a latency of 1e300 s": (_changed("machine", latency=1e300), "machine.latency must be in [0, 10]"),
    "a host busier than its cores": (_changed("machine", host_cores=2, host_load=3),
                                     "machine.host_load must be below machine.host_cores"),
    "a load with no shared host": (_changed("machine", host_cores=0, host_load=0.5), "machine.host_load is 0.5"),
    "a step of a day": (_changed("compute", step_seconds=86400.0), "compute.step_seconds must be in [0, 3600]"),
    "measured gradients a string": ({**load_profile("here").to_dict(), "measured": {"gradients": "a"}},
                                    "measured.gradients must map model keys to numbers"),
    "a measured gradient line of text": ({**load_profile("here").to_dict(), "measured": {"gradients": {"m:1": "a"}}},
                                         "measured.gradients.m:1 must be a list of 2 finite numbers"),
    "a wire table row short": ({**load_profile("here").to_dict(), "measured": {"wire_cpu": [[1300, 1e-4]]}},
                               "measured.wire_cpu[0] must be a list of 4 finite numbers"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_profile_out_of_range_is_refused_in_one_line_naming_file_and_field(case, tmp_path):
    d, says = CASES[case]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match=r"profile .*p\.json: " + says.replace("[", r"\[").replace(".", r"\.")):
        load_profile(str(path))
    out = dbkit("simulate", "downpour", "--steps", "10", "--profile", str(path))
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and str(path) in out.stderr and says in out.stderr


@pytest.mark.parametrize("what", ["a FIFO", "a device", "a folder", "a file of 2 MB"])
def test_only_a_regular_file_of_a_profiles_size_is_read(what, tmp_path):
    path = {"a device": Path("/dev/zero"), "a folder": tmp_path}.get(what, tmp_path / "p.json")
    if what == "a FIFO":
        os.mkfifo(path)  # nothing ever writes it: opening it to read would wait for ever
    elif what == "a file of 2 MB":
        path.write_text(" " * 2**21 + json.dumps(load_profile("here").to_dict()))
    with pytest.raises(ProfileError, match="not a regular file" if what != "a file of 2 MB" else "more than a profile"):
        load_profile(str(path))
    out = dbkit("simulate", "downpour", "--steps", "10", "--profile", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and str(path) in out.stderr, out.stderr


def test_fig3_refuses_a_batch_of_a_trillion():
    out = dbkit("simulate", "fig3", "--batch", str(10**12), "--quiet")
    assert out.returncode == 2 and "batch must be a whole number in [1, 1,000,000]" in out.stderr, out.stderr


def test_every_field_has_a_range_the_shipped_profiles_keep_and_its_ends_are_taken():
    """Each field's bounds are accepted and a step beyond either is refused, field by field."""
    for name in ("here", "distbelief-2012"):
        load_profile(name)  # (reading checks every field)
    base = load_profile("distbelief-2012").to_dict()
    for section, kind in SECTIONS.items():
        for f in fields(kind):
            low, high = field_range(f.name)
            if f.name == "host_load":  # below the host's cores, of at most 4096
                high -= 1
            whole = f.type in ("int", int)
            for value, ok in ((high, True), (high * 1.5 + 1, False), (0, f.name in MAY_BE_ZERO), (-1, False)):
                d = json.loads(json.dumps(base))
                d[section][f.name] = int(value) if whole else float(value)
                if f.name == "host_load":
                    d["machine"]["host_cores"] = 4096
                if ok:
                    from_dict(d, "t")
                else:
                    with pytest.raises(ProfileError, match=f"{section}.{f.name}"):
                        from_dict(d, "t")
            if low > 0 and not whole:
                d = json.loads(json.dumps(base))
                d[section][f.name] = low / 10
                with pytest.raises(ProfileError, match=f"{section}.{f.name} must be in"):
                    from_dict(d, "t")
