"""The command's /dev and /dev/shm are bounded: the argument builder, run by nothing.

tests/isolation/test_iso_devshm.py proves the kernel agrees.
"""

from __future__ import annotations

from test_bwrap_args import profile

from stockade.drivers.linux.bwrap import build_bwrap_args


def test_dev_shm_is_a_tmpfs_of_tmp_size_after_dev() -> None:
    args = build_bwrap_args(profile(tmp_size_mb=64), "b", inner=[])
    dev = args.index("--dev")
    shm = args.index("/dev/shm")
    assert dev < shm and args[shm - 3:shm] == ["--size", str(64 << 20), "--tmpfs"]


def test_dev_shm_size_does_not_wait_for_the_tmp_cap_of_newer_bwrap() -> None:
    # The driver passes tmp_size_mb only for bwrap 0.10+; --size itself is older.
    args = build_bwrap_args(profile(tmp_size_mb=64), "b", inner=[], tmp_size_mb=None)
    shm = args.index("/dev/shm")
    assert args[shm - 3:shm] == ["--size", str(64 << 20), "--tmpfs"]


def test_dev_is_read_only_after_every_mount_inside_it() -> None:
    extra = ["--ro-bind", "/run/proxy.sock", "/dev/stockade-proxy.sock"]
    args = build_bwrap_args(profile(tmp_size_mb=64), "b", inner=["true"], extra_mounts=extra)
    remount = args.index("/dev", args.index("--dev") + 2) - 1
    assert args[remount:remount + 2] == ["--remount-ro", "/dev"]
    assert args.index("/dev/stockade-proxy.sock") < remount < args.index("--")


def test_no_tmp_size_leaves_dev_shm_uncapped_but_dev_still_read_only() -> None:
    args = build_bwrap_args(profile(tmp_size_mb=None), "b", inner=[])
    shm = args.index("/dev/shm")
    assert args[shm - 1] == "--tmpfs" and "--size" not in args[:shm]
    chdir = args.index("--chdir")
    assert args[chdir - 2:chdir] == ["--remount-ro", "/dev"]
