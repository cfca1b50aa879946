# Run by the isolation harness's warm runners before the CLI (see conftest.WARM_PRELUDE):
# `stockade run` is cold by nature, so this makes it take the path a session takes --
# parking enabled, the command's sandbox parked ahead of it by identical commands, and
# the command served by that parked sandbox, or a loud failure if it was not.
import stockade.cli as _cli
import stockade.core as _core

_core_init = _core.SandboxCore.__init__


def _warm_core(self, *args, **kwargs):
    _core_init(self, *args, **kwargs)
    self.driver_options["warm_sandboxes"] = 1


_core.SandboxCore.__init__ = _warm_core


def _run_warm(sandbox, cmd, quiet):
    from stockade.command import SandboxCommand

    def parked():
        pool = getattr(sandbox.core._driver, "_warm", None)
        if pool is None:
            return None
        pool.settle(30)
        return pool

    # Twice: the first command creates the audit ledger, whose files the
    # next profile hides, so only the second parks for the command's view.
    for _ in range(2):
        sandbox.execute(SandboxCommand("/bin/true", session_id=cmd.session_id,
                                       capabilities=cmd.capabilities, cwd=cmd.cwd,
                                       timeout=cmd.timeout))
        pool = parked()
    before = ("" if pool is None else
              f" (before it: {pool.parked_count()} parked, {pool.hits} hits, "
              f"{pool.misses} misses, settled {pool.settle(0)})")
    if sandbox.core._driver is None:
        # Nothing was sandboxed (full-access: an unconfined control), so
        # there is nothing to park either.
        return _cli._run_captured(sandbox, cmd, False, quiet)
    hits = pool.hits if pool is not None else 0
    try:
        return _cli._run_captured(sandbox, cmd, False, quiet)
    finally:
        import os

        # STOCKADE_TEST_WARM_EXPECT: "warm" (the default); "any" where being
        # served warm is luck (overlapping writers on one workspace discard
        # what is parked for it, by design); "cold" where a parked sandbox
        # must never be used.
        expect = os.environ.get("STOCKADE_TEST_WARM_EXPECT", "warm")
        served = pool is not None and pool.hits == hits + 1
        if expect != "any" and served != (expect == "warm"):
            import sys

            # After it: a miss counted as unfit is a profile or view that changed
            # since parking; one that is not is a sandbox that died while parked.
            after = ("" if pool is None else
                     f"; after it: {pool.hits} hits, {pool.misses} misses, "
                     f"{sum(pool._misses.values())} unfit")
            sys.stdout.flush()  # the command's output, which os._exit would drop
            sys.stderr.write(f"stockade-warm-harness: expected {expect}, the command was "
                             f"{'served warm' if served else 'started cold'}{before}{after}\n")
            sys.stderr.flush()
            os._exit(97)


_cli._run_passthrough = _run_warm
