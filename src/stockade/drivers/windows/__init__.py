"""Windows: AppContainer, then a restricted Low-integrity token, inside a job object.

Importable on every platform -- nothing here touches ctypes.WinDLL or a
Windows-only module at import time -- so every decision (which tier, which
ACEs on which path, which job limits, how the command line is quoted) is a
pure function tested on Linux, and the Win32 calls go through one seam
(`win32.Win32`) that the tests replace with a recording fake.
"""
