"""macOS: Seatbelt through /usr/bin/sandbox-exec.

Importable on every platform -- nothing here touches a macOS-only module at
import time -- so the profile generator is tested on Linux. The registry
(`drivers/registry.py`) names `seatbelt:SeatbeltDriver`; this package exports
nothing.
"""
