"""Fixtures for the proxy tests; the machinery lives in proxy_testkit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from proxy_testkit import Backends, BackgroundLoop, TlsMaterial, make_tls


@pytest.fixture(scope="session")
def bg_loop() -> Iterator[BackgroundLoop]:
    bg = BackgroundLoop()
    yield bg
    bg.close()


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def backends(bg_loop: BackgroundLoop, tls: TlsMaterial) -> Iterator[Backends]:
    b = Backends(bg_loop, tls)
    yield b
    with contextlib.suppress(Exception):
        b.close()
