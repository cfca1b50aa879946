"""Credentials under the Landlock backend: no rule, no read, by any spelling.

Hidden paths are not covered by a mount here; they are simply the paths
that get no Landlock rule while everything around them does. So every
spelling (symlinks, `..`, `/proc/self/root`, `/proc/1/root`) resolves to an
inode with no rule, and the isolation suite's tests run unchanged -- except
the ssh-agent grant, which this backend refuses (no unix connect at all).
"""

from __future__ import annotations

import pytest

from isolation import test_iso_secrets as iso
from isolation.conftest import HIDDEN_DECOYS, Box, Listener, text

pytestmark = pytest.mark.isolation

agent = iso.agent


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_hidden_credentials_unreadable_by_any_spelling(box: Box, mode: str) -> None:
    iso.test_hidden_credentials_unreadable_by_any_spelling(box, mode)


def test_control_without_hiding_the_same_reads_find_every_secret(box: Box) -> None:
    iso.test_control_without_hiding_the_same_reads_find_every_secret(box)


def test_hidden_credentials_cannot_be_replaced_or_added(box: Box) -> None:
    iso.test_hidden_credentials_cannot_be_replaced_or_added(box)


@pytest.mark.xfail(strict=True, reason=(
    "granted sockets cannot work under the landlock backend: Landlock cannot tell one unix "
    "socket from another, so every connect() is refused and a configured granted_sockets "
    "makes the run fail with SandboxUnavailable (exit 125) rather than run without it"))
def test_ssh_key_hidden_when_agent_socket_granted(box: Box,
                                                  agent: tuple[Listener, str]) -> None:
    iso.test_ssh_key_hidden_when_agent_socket_granted(box, agent)


def test_granted_socket_is_refused_by_name(box: Box, agent: tuple[Listener, str]) -> None:
    """What happens instead of the grant: one line saying why, exit 125, nothing ran."""
    _listener, sock = agent
    cfg = box.write(box.state / "agent.toml", '[sandbox]\ngranted_sockets = ["ssh-agent"]\n')
    res = box.sh("echo RAN", options=["--config", str(cfg)], env=box.env(SSH_AUTH_SOCK=sock))
    assert res.returncode == 125, text(res)
    assert b"RAN" not in res.stdout
    assert "granted_sockets" in text(res) and "bubblewrap" in text(res), text(res)


def test_control_ssh_key_readable_when_hiding_is_off(box: Box,
                                                    agent: tuple[Listener, str]) -> None:
    iso.test_control_ssh_key_readable_when_hiding_is_off(box, agent)


def test_ssh_private_keys_hidden_without_the_agent_config_still_works(box: Box) -> None:
    iso.test_ssh_private_keys_hidden_without_the_agent_config_still_works(box)


def test_control_ssh_private_keys_readable_without_hiding(box: Box) -> None:
    iso.test_control_ssh_private_keys_readable_without_hiding(box)


@pytest.mark.parametrize("rel", iso.MORE_STORES)
def test_more_credential_stores_unreadable(box: Box, rel: str) -> None:
    iso.test_more_credential_stores_unreadable(box, rel)


def test_a_store_kept_elsewhere_stays_hidden_around_a_writable_path_in_it(box: Box) -> None:
    iso.test_a_store_kept_elsewhere_stays_hidden_around_a_writable_path_in_it(box)


def test_a_cache_over_its_whole_area_does_not_show_the_area(box: Box) -> None:
    iso.test_a_cache_over_its_whole_area_does_not_show_the_area(box)


def test_an_area_linked_to_another_shows_none_of_its_logins(box: Box) -> None:
    iso.test_an_area_linked_to_another_shows_none_of_its_logins(box)


def test_a_cache_linked_into_a_store_does_not_show_the_store(box: Box) -> None:
    iso.test_a_cache_linked_into_a_store_does_not_show_the_store(box)


@pytest.mark.parametrize("layout", iso.LINKED_INTO_A_STORE)
def test_a_link_never_puts_a_stores_directory_back_in_view(box: Box, layout: str) -> None:
    iso.test_a_link_never_puts_a_stores_directory_back_in_view(box, layout)


def test_control_more_credential_stores_readable_without_hiding(box: Box) -> None:
    iso.test_control_more_credential_stores_readable_without_hiding(box)


def test_root_only_host_secrets_unreadable(box: Box) -> None:
    iso.test_root_only_host_secrets_unreadable(box)


def test_secret_environment_not_inherited(box: Box) -> None:
    iso.test_secret_environment_not_inherited(box)


def test_variables_that_only_look_secret_pass(box: Box) -> None:
    iso.test_variables_that_only_look_secret_pass(box)


def test_session_keyring_secrets_unreadable(box: Box) -> None:
    iso.test_session_keyring_secrets_unreadable(box)


def test_control_keyring_secret_readable_unconfined(box: Box) -> None:
    iso.test_control_keyring_secret_readable_unconfined(box)


def test_hidden_names_listable_contents_never(box: Box) -> None:
    """The documented trade: names inside a hidden directory can be listed (READ_DIR on
    $HOME reaches them), file contents cannot -- by any route, `find` and `tar` included."""
    res = box.sh('ls -a "$HOME/.aws"; find "$HOME" -type f -exec cat {} + 2>/dev/null; '
                 'tar cf - -C "$HOME" . 2>/dev/null | strings | grep DECOY; true')
    out = text(res)
    assert "credentials" in out, out  # the name shows ...
    leaked = [rel for rel in HIDDEN_DECOYS if box.markers[rel] in out]
    assert leaked == [], leaked  # ... what is in it does not


def test_other_users_homes_and_stockade_state_unreadable(box: Box) -> None:
    """Not credentials by name, but outside the host read scope: other homes, stockade's
    own ledger and state."""
    box.sh("true")  # one record in the ledger, so there is something to read
    assert list((box.state / "data" / "stockade").glob("ledger.db*"))
    script = (f'cat "{box.state}"/data/stockade/ledger.db* 2>/dev/null | strings | '
              'grep -c argv; cat /root/.bashrc /root/.profile 2>/dev/null; '
              'ls /root /home 2>/dev/null; true')
    res = box.sh(script, mode="workspace-write")
    assert res.stdout.decode().strip() == "0", text(res)
    # Control: unconfined, the ledger is read (the test could fail).
    res = box.sh(script, mode="full-access")
    assert int(res.stdout.decode().split()[0]) > 0, text(res)


def test_a_workspace_in_stockades_root_does_not_show_its_neighbours(box: Box) -> None:
    # Their names show (READ_DIR on a split directory reaches beneath it, as
    # the backend's documentation says); their contents do not.
    iso.test_a_workspace_in_stockades_root_does_not_show_its_neighbours(box, names_hidden=False)
