"""The Win32 structures' layouts against the documented Windows x64 sizes and offsets.

The structures are built from fixed-width types, so on a 64-bit Linux they
have the layout Windows x64 gives them; a field in the wrong place or of
the wrong width shows up here without Windows.
"""

from __future__ import annotations

import ctypes

import pytest

from stockade.drivers.windows.win32 import structures

pytestmark = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8,
                                reason="the documented sizes are the x64 ones")

S = structures()


@pytest.mark.parametrize(("name", "size"), [
    ("SID_AND_ATTRIBUTES", 16),
    ("SECURITY_CAPABILITIES", 24),
    ("TOKEN_MANDATORY_LABEL", 16),
    ("STARTUPINFOW", 104),
    ("STARTUPINFOEXW", 112),
    ("PROCESS_INFORMATION", 24),
    ("SECURITY_ATTRIBUTES", 24),
    ("JOBOBJECT_BASIC_LIMIT_INFORMATION", 64),
    ("IO_COUNTERS", 48),
    ("JOBOBJECT_EXTENDED_LIMIT_INFORMATION", 144),
    ("JOBOBJECT_BASIC_UI_RESTRICTIONS", 4),
    ("JOBOBJECT_ASSOCIATE_COMPLETION_PORT", 16),
    ("TRUSTEE_W", 32),
    ("EXPLICIT_ACCESS_W", 48),
])
def test_sizes(name: str, size: int) -> None:
    assert ctypes.sizeof(getattr(S, name)) == size


@pytest.mark.parametrize(("name", "field", "offset"), [
    ("JOBOBJECT_BASIC_LIMIT_INFORMATION", "LimitFlags", 16),
    ("JOBOBJECT_BASIC_LIMIT_INFORMATION", "ActiveProcessLimit", 40),
    ("JOBOBJECT_EXTENDED_LIMIT_INFORMATION", "IoInfo", 64),
    ("JOBOBJECT_EXTENDED_LIMIT_INFORMATION", "ProcessMemoryLimit", 112),
    ("STARTUPINFOW", "dwFlags", 60),
    ("STARTUPINFOW", "hStdInput", 80),
    ("STARTUPINFOEXW", "lpAttributeList", 104),
    ("SECURITY_CAPABILITIES", "CapabilityCount", 16),
    ("EXPLICIT_ACCESS_W", "Trustee", 16),
    ("TRUSTEE_W", "ptstrName", 24),
])
def test_offsets(name: str, field: str, offset: int) -> None:
    assert getattr(getattr(S, name), field).offset == offset
