"""Every node's records, written into the caller's ledger as they arrive.

Records ride back on the reply of the call that produced them (and on a
final drain at close), so a command's record is in the caller's ledger by
the time its result is: nothing polls, and a reader of `stockade audit`
never sees a result whose record is still on its way.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from . import _local

if TYPE_CHECKING:
    from ..command import SandboxCommand
    from ..ledger import Ledger


class AuditStream:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._lock = threading.Lock()

    def write(self, node_id: str, records: list[_local.Record]) -> None:
        if records:
            with self._lock:
                _local.write_records(self.ledger, node_id, records)

    def lost(self, node_id: str, command: SandboxCommand, message: str) -> None:
        with self._lock:
            _local.lost_record(self.ledger, node_id, command, message)

    def close(self) -> None:
        with self._lock:
            self.ledger.close()
