"""fa system: this machine as the report's section 3a wants it, read from the machine itself."""
import json
import os

from helpers import fa
from fa_cli.programs import system


def test_the_machine_as_the_os_reports_it():
    spec = system.describe()
    assert spec["cores"] == os.cpu_count() and spec["cpu"]
    with open("/proc/meminfo") as f:
        kib = int(f.readline().split()[1])
    assert abs(spec["memory_gib"] - kib / 2**20) < 0.1
    assert spec["disk"]["total_gib"] >= spec["disk"]["free_gib"] > 0
    assert system.summary(spec).startswith(f"{spec['host']}: {spec['cpu']}, {spec['cores']} cores")


def test_fa_system_json_is_what_records_carry(tmp_path):
    proc = fa("system", "--json", cwd=tmp_path)
    assert proc.returncode == 0
    spec = json.loads(proc.stdout)
    assert set(spec) >= {"host", "cpu", "cores", "memory_gib", "disk", "gpus", "software"}
    assert spec["cores"] == os.cpu_count()
