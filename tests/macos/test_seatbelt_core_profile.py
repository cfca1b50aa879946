"""The Seatbelt profile of what `SandboxCore.make_profile` really builds on a Mac.

Each test here failed against the profile before its fix: the described
machine never passed the core's private directories or a session's TMPDIR,
and the denials and omissions below were invisible to it.
"""

from __future__ import annotations

import os
import sys
from functools import cache

import pytest
from mac_host import RUN_LATER, SECRETS, TOOLING, C, MacHost
from sbpl_eval import disk_key, same_name

from stockade.profile import HOLD, PIN


@pytest.fixture
def mac(tmp_path: object) -> MacHost:
    return MacHost(str(tmp_path))


# -- M1: the session's own TMPDIR ---------------------------------------------------------


def test_a_session_command_uses_its_own_tmpdir(mac: MacHost, precedence: str) -> None:
    with mac.core() as core:
        profile = mac.profile(core)
        other = mac.profile(core, session="s2")
        assert profile.session_tmp and profile.session_tmp.startswith(core.state_dir)
        p = mac.policy(profile, precedence)
        tmp = C(profile.session_tmp)
        assert p.create(f"{tmp}/x") and p.write(f"{tmp}/x") and p.read(f"{tmp}/x")
        assert p.unlink(f"{tmp}/x")
        # The state directory around it stays hidden: another session's TMPDIR,
        # the ledger's directory.
        assert other.session_tmp
        assert not p.read(f"{C(other.session_tmp)}/x")
        assert not p.create(f"{C(other.session_tmp)}/x")
        assert not p.read(f"{C(core.state_dir)}/trusted.json")


def test_a_read_only_session_command_uses_its_own_tmpdir(mac: MacHost, precedence: str) -> None:
    with mac.core() as core:
        profile = mac.profile(core, "read-only")
        p = mac.policy(profile, precedence)
        assert profile.session_tmp
        assert p.create(f"{C(profile.session_tmp)}/x")


def test_the_session_cache_layers_are_writable(mac: MacHost, precedence: str) -> None:
    env = {**mac.env, "GOCACHE": os.path.join(mac.home, "Library/Caches/go-build")}
    mac.env = env
    with mac.core() as core:
        profile = mac.profile(core)
        gocache = profile.env.get("GOCACHE", "")
        assert gocache.startswith(core.state_dir), profile.env
        assert mac.policy(profile, precedence).create(f"{C(gocache)}/00/new-d")


# -- M2: ~/Library --------------------------------------------------------------------------


@pytest.mark.parametrize("rel", SECRETS)
def test_secrets_under_library_are_unreadable(mac: MacHost, rel: str, precedence: str) -> None:
    with mac.core() as core:
        p = mac.policy(mac.profile(core), precedence)
        assert not p.read(C(os.path.join(mac.home, rel)))


@pytest.mark.parametrize("rel", TOOLING)
def test_what_builds_read_under_library_stays_readable(mac: MacHost, rel: str,
                                                       precedence: str) -> None:
    with mac.core() as core:
        p = mac.policy(mac.profile(core), precedence)
        assert p.read(C(os.path.join(mac.home, rel)))


def test_a_keychain_made_after_the_profile_is_hidden_too(mac: MacHost) -> None:
    with mac.core() as core:
        p = mac.policy(mac.profile(core))
        assert not p.read(C(f"{mac.home}/Library/Keychains/new.keychain-db"))


# -- M4: a writable home ------------------------------------------------------------------


@pytest.mark.parametrize("unreadable", [None, "none"])
@pytest.mark.parametrize("rel", [*RUN_LATER, "Library/LaunchAgents/new.plist",
                                 "Library/Application Support/Code/User/tasks.json"])
def test_what_macos_runs_later_is_protected_in_a_writable_home(
        mac: MacHost, rel: str, unreadable: str | None, precedence: str) -> None:
    with mac.core(allow_home_workspace=True, unreadable=unreadable) as core:
        profile = mac.profile(core, workspace=mac.home)
        assert profile.workspace_writable
        p = mac.policy(profile, precedence)
        target = C(os.path.join(mac.home, rel))
        assert not p.create(target) and not p.write(target)
        # The control: the home is writable otherwise.
        assert p.create(C(f"{mac.home}/notes.txt"))


# -- M6: other commands' scratch -------------------------------------------------------------


def test_another_commands_scratch_directory_is_unreadable(mac: MacHost, precedence: str) -> None:
    with mac.core() as core:
        profile = mac.profile(core, ephemeral_tmp=True)
        assert profile.session_tmp is None
        base = C(mac.tmpdir)
        mine, theirs = f"{base}/stockade-mine1", f"{base}/stockade-theirs"
        p = mac.policy(profile, precedence, scratch=mine)
        assert p.create(f"{mine}/x") and p.read(f"{mine}/x")
        assert not p.read(f"{theirs}/output.txt")
        assert not p.create(f"{theirs}/planted")
        assert not p.read(f"/System/Volumes/Data{theirs}/output.txt")
        # The control: the rest of TMPDIR is the host's, readable as before.
        assert p.read(f"{base}/com.apple.something")


def test_a_workspace_named_like_a_scratch_directory_is_still_the_commands(
        mac: MacHost, precedence: str) -> None:
    """The deny of other commands' `stockade-*` directories in TMPDIR once took a
    workspace a person had put there under such a name (the on-host suite's own)."""
    ws = os.path.join(mac.tmpdir, "stockade-proj")
    os.makedirs(ws)
    with mac.core() as core:
        profile = mac.profile(core, workspace=ws, ephemeral_tmp=True)
        base = C(mac.tmpdir)
        p = mac.policy(profile, precedence, scratch=f"{base}/stockade-mine1")
        assert p.create(C(f"{ws}/x")) and p.read(C(f"{ws}/x"))
        assert not p.read(f"{base}/stockade-theirs/output.txt")  # still denied


# -- M3: every spelling the file system treats as the same name ---------------------------


@cache
def _folds_to_ascii() -> dict[str, tuple[str, ...]]:
    """{ascii text: code points whose disk key is that text}, from every code point."""
    out: dict[str, list[str]] = {}
    for cp in range(0x80, sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        key = disk_key(chr(cp))
        if key and key.isascii() and key.isalpha() and len(key) <= 3:
            out.setdefault(key, []).append(chr(cp))
    return {k: tuple(v) for k, v in out.items()}


_IGNORABLE = ("\u200c", "\u200d", "\u200e", "\u202a", "\u206a", "\ufeff")


def _spellings(name: str) -> list[str]:
    """Other spellings of `name` that APFS or HFS+ treat as `name` (the oracle's own)."""
    table = _folds_to_ascii()
    out: list[str] = [name.upper(), name.swapcase()]
    low = name.lower()
    for size in (1, 2, 3):
        for i in range(len(low) - size + 1):
            for other in table.get(low[i:i + size], ()):
                out.append(name[:i] + other + name[i + size:])
    for i in range(len(name) + 1):
        for mark in _IGNORABLE[:2] if i not in (0, len(name)) else _IGNORABLE:
            out.append(name[:i] + mark + name[i:])
    out = [s for s in dict.fromkeys(out) if s != name]
    assert all(same_name(s, name) for s in out)
    return out


def test_the_oracle_knows_the_spellings_it_is_asked_about() -> None:
    assert same_name(".\u017ftockade", ".stockade")
    assert same_name("hoo\u212as", "hooks")
    assert same_name(".g\u200cit", ".git")
    assert same_name("\ufb06ockade.toml", "stockade.toml")
    assert not same_name(".stockadf", ".stockade")


def test_no_spelling_of_a_protected_name_can_be_created(mac: MacHost) -> None:
    with mac.core() as core:
        profile = mac.profile(core)
        p = mac.policy(profile)
        guarded = [item.path for item in profile.protected
                   if item.kind not in (PIN, HOLD) and item.path.startswith(mac.ws + "/")]
        assert f"{mac.ws}/.stockade" in guarded and f"{mac.ws}/.git/hooks" in guarded
        missed = []
        for path in guarded:
            parent, name = os.path.split(C(path))
            for spelling in _spellings(name):
                if p.create(f"{parent}/{spelling}") or p.create(f"{parent}/{spelling}/x"):
                    missed.append(f"{parent}/{spelling}")
        assert not missed, missed[:10]
        # Controls: a name that only looks alike is an ordinary file.
        assert p.create(C(f"{mac.ws}/.stockadf"))
        assert p.create(C(f"{mac.ws}/stockade.tom"))


@pytest.mark.parametrize("spelling", [".\u017ftockade", "\u017ftockade.toml",
                                      ".g\u200cit/hooks/pre-commit", ".git/hoo\u212as/pre-commit",
                                      ".\ufb06ockade", ".git/hooks\ufeff/x", ".GIT/config"])
def test_the_issue_spellings_are_refused(mac: MacHost, spelling: str, precedence: str) -> None:
    with mac.core() as core:
        p = mac.policy(mac.profile(core), precedence)
        assert not p.create(f"{C(mac.ws)}/{spelling}")
