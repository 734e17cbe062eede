"""file_pages.py: the file system a file is on, and the folder in memory fa run draws inputs into."""
import os
from pathlib import Path

import pytest

from fa_cli import file_pages


def test_the_file_system_type_is_read_from_the_mount_table():
    assert file_pages.file_system_type(os.stat("/proc").st_dev) == "proc"
    assert file_pages.file_system_type(os.makedev(4095, 1048575)) is None  # no such device


def shm_is_tmpfs() -> bool:
    shm = Path("/dev/shm")
    return shm.is_dir() and file_pages.file_system_type(os.stat(shm).st_dev) == "tmpfs" and os.access(shm, os.W_OK)


@pytest.mark.skipif(not shm_is_tmpfs(), reason="no writable tmpfs at /dev/shm")
def test_the_memory_folder_is_taken_only_with_room_in_it_and_in_memory():
    assert file_pages.memory_folder_for(1 << 20) == Path("/dev/shm")
    available = file_pages.available_memory()
    assert available > 0
    assert file_pages.memory_folder_for(available // file_pages.MEMORY_SHARE + 1) is None  # too much of the memory
    vfs = os.statvfs("/dev/shm")
    assert file_pages.memory_folder_for(vfs.f_bavail * vfs.f_frsize + 1) is None  # more than it has free


def test_a_folder_on_disk_is_not_a_memory_folder(monkeypatch):
    here = Path(__file__).resolve().parent
    if file_pages.file_system_type(os.stat(here).st_dev) == "tmpfs":
        pytest.skip("this checkout is itself in memory")
    monkeypatch.setattr(file_pages, "MEMORY_FOLDER", here)
    assert file_pages.memory_folder_for(1) is None
    monkeypatch.setattr(file_pages, "MEMORY_FOLDER", here / "no such folder")
    assert file_pages.memory_folder_for(1) is None


def limits(folder: Path, limit: str, usage: str, values: tuple[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / limit).write_text(values[0] + "\n")
    (folder / usage).write_text(values[1] + "\n")


def test_a_memory_limit_over_fa_counts_what_it_leaves_cgroup_v2_and_v1(tmp_path, monkeypatch):
    """A Slurm job's cgroup caps the memory fa's drawn inputs may take: each limit over the process
    (its own and its parents') leaves its limit less its usage; "max" is no limit."""
    monkeypatch.setattr(file_pages, "CGROUP_ROOT", tmp_path)
    limits(tmp_path / "slurm", "memory.max", "memory.current", ("8000000000", "1000000000"))
    limits(tmp_path / "slurm" / "job_7", "memory.max", "memory.current", ("max", "900000000"))
    assert file_pages.cgroup_memory_left("0::/slurm/job_7\n") == [7_000_000_000]
    limits(tmp_path / "memory" / "job_8", "memory.limit_in_bytes", "memory.usage_in_bytes", ("4000000000", "3000000000"))
    limits(tmp_path / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", (str(1 << 62), "5"))  # unlimited
    assert file_pages.cgroup_memory_left("4:memory:/job_8\n3:cpuset:/\n") == [1_000_000_000]
    assert file_pages.cgroup_memory_left("0::/not/there\n") == []
    monkeypatch.setattr(file_pages, "cgroup_memory_left", lambda: [123])
    assert file_pages.available_memory() == 123  # the tighter of the two
