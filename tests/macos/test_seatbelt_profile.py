"""The profile as text: well-formed, inside the known subset, commented, escaped.

Plus mutation checks on the evaluator itself: a profile with one safeguard
removed must change its answers, or the evaluation table proves nothing.
"""

from __future__ import annotations

import itertools
import re

import pytest
from macos_fakes import HOME, PROXY_PORT, SCRATCH, WS, mac_profile, policy
from sbpl_eval import KNOWN_FILTERS, KNOWN_OPERATIONS, Policy, Request, SBPLError, parse

from stockade.capabilities import NetworkPolicy, SandboxCapabilities
from stockade.drivers.macos.sbpl import (
    ancestors,
    canonical_macos_path,
    data_volume_alias,
    name_regex,
    quote,
    regex_literal,
)
from stockade.drivers.macos.seatbelt import seatbelt_profile
from stockade.errors import ConfigError, InvalidCommand, SandboxUnavailable

NETWORKS = {
    "none": (NetworkPolicy.none(), ()),
    "hosts": (NetworkPolicy.allow_hosts(["example.com"]), (PROXY_PORT,)),
    "all": (NetworkPolicy.allow_all(), ()),
}
VARIANTS = list(itertools.product(("read-only", "workspace-write", "full-access"),
                                  ("host", "strict"), sorted(NETWORKS)))


def _text(mode: str, scope: str, net: str) -> tuple[str, dict[str, str]]:
    network, ports = NETWORKS[net]
    prof = mac_profile(mode, scope=scope, network=network)
    return seatbelt_profile(prof, proxy_ports=ports, scratch=SCRATCH)


# -- form ------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "scope", "net"), VARIANTS)
def test_every_variant_parses_inside_the_known_subset(mode: str, scope: str, net: str) -> None:
    text, params = _text(mode, scope, net)
    forms = parse(text)  # raises on any imbalance
    assert [str(x) for x in forms[0]] == ["version", "1"]
    assert [str(x) for x in forms[1]] == ["deny", "default"]
    p = Policy(text, params)  # raises on an unknown operation or filter
    assert p.operations() <= KNOWN_OPERATIONS
    assert p.filter_heads() <= KNOWN_FILTERS
    assert "#" not in text.replace("; ", "")  # no raw-string syntax anywhere


@pytest.mark.parametrize(("mode", "scope", "net"), VARIANTS)
def test_every_rule_sits_in_a_commented_block(mode: str, scope: str, net: str) -> None:
    text, _ = _text(mode, scope, net)
    for block in text.split("\n\n"):
        rules = [ln for ln in block.splitlines() if ln.startswith("(")]
        rules = [r for r in rules if not r.startswith(("(version", "(deny default"))]
        if rules:
            assert any(ln.startswith(";") for ln in block.splitlines()), block


def test_paths_travel_as_parameters_except_inside_regexes() -> None:
    text, params = _text("workspace-write", "host", "none")
    assert params["WORKSPACE"] == WS
    for line in text.splitlines():
        if line.lstrip().startswith(";"):
            continue
        if HOME in line or WS in line:
            raise AssertionError(f"a variable path is spelled outside a regex: {line}")


def test_sandbox_rejects_unbalanced_and_unknown_text() -> None:
    with pytest.raises(SBPLError):
        parse("(version 1)(deny default")
    with pytest.raises(SBPLError):
        Policy("(version 1)(deny default)(allow file-teleport)", {})
    with pytest.raises(SBPLError):
        Policy("(version 1)(deny default)(allow file-read* (vnode-colour \"red\"))", {})
    with pytest.raises(SBPLError):
        text = '(version 1)(deny default)(allow file-read* (subpath (param "NOPE")))'
        Policy(text, {}).read("/x")


# -- canonical paths and escaping ------------------------------------------------------------


@pytest.mark.parametrize(("given", "seen"), [
    ("/tmp", "/private/tmp"),
    ("/tmp/x/y", "/private/tmp/x/y"),
    ("/var/folders/ab/T/", "/private/var/folders/ab/T"),
    ("/etc/hosts", "/private/etc/hosts"),
    ("/private/tmp/x", "/private/tmp/x"),
    ("/tmpfoo/x", "/tmpfoo/x"),
    ("/variable", "/variable"),
    ("//Users//dev/./work/", "/Users/dev/work"),
    ("/", "/"),
    ("/Users/dev", "/Users/dev"),
])
def test_canonical_macos_path(given: str, seen: str) -> None:
    assert canonical_macos_path(given) == seen


@pytest.mark.parametrize("bad", ["relative/path", "/a/../b", "/a\x00b"])
def test_canonical_macos_path_refuses_what_it_cannot_know(bad: str) -> None:
    with pytest.raises(InvalidCommand):
        canonical_macos_path(bad)


def test_data_volume_alias_and_ancestors() -> None:
    assert data_volume_alias("/Users/dev/.aws") == "/System/Volumes/Data/Users/dev/.aws"
    assert data_volume_alias("/System/Library/x") == ""
    assert data_volume_alias("/System/Volumes/Data/Users/x") == ""
    assert ancestors("/Users/dev/work/proj") == ["/Users/dev/work", "/Users/dev", "/Users"]
    assert ancestors("/Users") == []


WEIRD = ["/Users/dev/my.proj", "/Users/dev/a+b", "/Users/dev/p(1)", "/Users/dev/x[y]z",
         "/Users/dev/^caret$", "/Users/dev/star*q?", "/Users/dev/br{2}|p", 'q"uote\\slash',
         "/Users/dev/ünïcode dir", "/Users/dev/]lead"]


@pytest.mark.parametrize("path", WEIRD)
def test_regex_literal_matches_exactly_that_path(path: str) -> None:
    # Through the same path the profile takes: Scheme string, then the reader, then a regex.
    source = parse(f"(x {quote('^' + regex_literal(path) + '$')})")[0][1]
    rx = re.compile(source)
    assert rx.search(path)
    for variant in (path + "x", "x" + path, path.replace(".", "X"), path[:-1]):
        if variant != path:
            assert not rx.search(variant), variant


@pytest.mark.parametrize("path", WEIRD)
def test_folded_regex_ignores_ascii_case_only(path: str) -> None:
    source = parse(f"(x {quote('^' + regex_literal(path, fold_case=True) + '$')})")[0][1]
    rx = re.compile(source)
    assert rx.search(path) and rx.search(path.upper().replace("Ü", "ü").replace("Ï", "ï"))
    assert not rx.search(path + "/")


def test_regex_literal_refuses_control_characters() -> None:
    with pytest.raises(SandboxUnavailable, match="control character"):
        regex_literal("/Users/dev/new\nline")


@pytest.mark.parametrize(("ws", "lookalike"), [
    ("/Users/dev/a.b", "/Users/dev/aXb"),      # `.` unescaped would match any character
    ("/Users/dev/a+b", "/Users/dev/a+b"),      # `+` unescaped would not match itself
    ("/Users/dev/p(1)", "/Users/dev/p(1)"),    # `(` unescaped is not even a valid regex
    ("/Users/dev/x[y]z", "/Users/dev/xyz"),    # `[y]` unescaped would match `y`
])
def test_workspace_names_with_regex_metacharacters(ws: str, lookalike: str,
                                                   precedence: str) -> None:
    prof = mac_profile(workspace=ws, writable=(lookalike,), extra_fs={lookalike: "dir"})
    p = policy(prof, precedence)
    assert not p.create(f"{ws}/.git/hooks/pre-commit")
    assert not p.write(f"{ws}/.git/config")
    assert not p.create(f"{ws}/.stockade")
    assert not p.rename(f"{ws}/.git", f"{ws}/aside")
    assert p.create(f"{ws}/src/main.py")
    if lookalike != ws:
        # A writable scratch root whose name an unescaped regex would also match.
        assert p.create(f"{lookalike}/.git/hooks/cache-entry")


def test_a_workspace_name_cannot_inject_rules(precedence: str) -> None:
    ws = '/Users/dev/a") (allow file-write* (subpath "/")) ("'
    prof = mac_profile(workspace=ws)
    text, params = seatbelt_profile(prof, scratch=SCRATCH)
    p = Policy(text, params, precedence=precedence)
    assert params["WORKSPACE"] == ws
    assert not p.write(f"{HOME}/.bashrc")
    assert not p.create("/private/etc/evil")
    assert not p.create(f"{ws}/.git/hooks/x")
    assert p.create(f"{ws}/ok.txt")


# -- network parameters ----------------------------------------------------------------------


def test_host_allowlist_needs_the_proxy_port() -> None:
    prof = mac_profile(network=NetworkPolicy.allow_hosts(["example.com"]))
    with pytest.raises(SandboxUnavailable, match="proxy"):
        seatbelt_profile(prof)


@pytest.mark.parametrize("port", [0, 65536, -1, True, "443", 8080.0])
def test_proxy_ports_must_be_tcp_ports(port: object) -> None:
    prof = mac_profile(network=NetworkPolicy.allow_hosts(["example.com"]))
    with pytest.raises(ConfigError):
        seatbelt_profile(prof, proxy_ports=(port,))  # type: ignore[arg-type]


def test_proxy_ports_are_ignored_unless_the_policy_is_hosts() -> None:
    text, _ = seatbelt_profile(mac_profile(), proxy_ports=(PROXY_PORT,), scratch=SCRATCH)
    assert str(PROXY_PORT) not in text


def test_several_proxy_ports_each_allowed(precedence: str) -> None:
    prof = mac_profile(network=NetworkPolicy.allow_hosts(["example.com"]))
    p = policy(prof, precedence, proxy_ports=(1080, 3128))
    assert p.connect("127.0.0.1", 1080) and p.connect("127.0.0.1", 3128)
    assert not p.connect("127.0.0.1", 3129)


def test_without_scratch_nothing_but_the_workspace_is_writable(precedence: str) -> None:
    p = policy(mac_profile("read-only"), precedence, scratch=None)
    assert not p.create(f"{SCRATCH}/x")
    assert not p.create(f"{WS}/x")
    assert p.write("/dev/null")


# -- the evaluator has teeth --------------------------------------------------------------------


def _mutated(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_mutation_without_the_protected_exclusion_is_caught() -> None:
    text, params = seatbelt_profile(mac_profile(), scratch=SCRATCH)
    broken = Policy(_mutated(text, "(require-not", "(require-any"), params)
    assert broken.create(f"{WS}/.git/hooks/pre-commit")


def test_mutation_without_hidden_denies_is_caught() -> None:
    text, params = seatbelt_profile(mac_profile(), scratch=SCRATCH)
    cut = text.index("\n; Hidden credentials")
    assert Policy(text[:cut], params).read(f"{HOME}/.aws/credentials")


def test_mutation_with_unfolded_case_is_caught() -> None:
    text, params = seatbelt_profile(mac_profile(), scratch=SCRATCH)
    path = f"{WS}/.stockade"
    spelled = name_regex(path, len(WS))
    ascii_only = _mutated(text, spelled, regex_literal(path, fold_case=True))
    assert Policy(ascii_only, params).create(f"{WS}/.\u017ftockade")
    assert not Policy(ascii_only, params).create(f"{WS}/.STOCKADE")
    unfolded = _mutated(text, spelled, regex_literal(path))
    assert Policy(unfolded, params).create(f"{WS}/.STOCKADE")
    assert not Policy(unfolded, params).create(f"{WS}/.stockade")


def test_precedence_is_really_modelled() -> None:
    """A deny placed first is overridden under last-match but not under deny-wins."""
    text, params = seatbelt_profile(mac_profile(), scratch=SCRATCH)
    cut = text.index("\n; Hidden credentials")
    hidden = text[cut:]
    head, rules = text[:cut].split("(deny default)\n", 1)
    reordered = head + "(deny default)\n" + hidden + rules
    secret = f"{HOME}/.aws/credentials"
    assert Policy(reordered, params, precedence="last-match").read(secret)
    assert not Policy(reordered, params, precedence="deny-wins").read(secret)
    assert not Policy(text, params, precedence="last-match").read(secret)


def test_spawn_subprocess_false_leaves_process_fork_denied(precedence: str) -> None:
    for spawn in (True, False):
        caps = SandboxCapabilities(fs_write=(WS,), spawn_subprocess=spawn)
        text, params = seatbelt_profile(mac_profile(capabilities=caps), scratch=SCRATCH)
        p = Policy(text, params, precedence=precedence)
        assert p.allows(Request("process-fork")) is spawn
        assert p.execute("/bin/ls")  # exec (the command replacing itself) stays allowed



@pytest.mark.parametrize("prec", ["last-match", "deny-wins"])
@pytest.mark.parametrize("target", [
    "Python/3.12/lib/python/site-packages/evil.pth",  # runs in every python3
    "Application Support/pip/pip.conf",               # the next pip install's index
    "Application Support/go/env",                     # GOFLAGS=-toolexec=...
    "Frameworks/x.framework/x",
])
def test_a_home_workspace_cannot_write_the_code_shown_back_from_library(
        prec: str, target: str) -> None:
    """~/Library is hidden and these come back for toolchains to read; with the home
    as the workspace they fell to its write allow."""
    from macos_fakes import HOME, mac_profile, policy

    lib = f"{HOME}/Library"
    extra = {f"{lib}/Python/3.12/lib/python/site-packages": "dir",
             f"{lib}/Application Support/pip": "dir", f"{lib}/Frameworks": "dir",
             f"{lib}/Application Support/go": "dir"}
    pol = policy(mac_profile("workspace-write", workspace=HOME, extra_fs=extra), prec)
    path = f"{lib}/{target}"
    assert not pol.write(path) and not pol.create(path), path
    assert pol.read(f"{lib}/Python/3.12/lib/python/site-packages")  # still read
