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
