"""The one seam between the Windows driver and Windows.

`Win32` is a real class whose methods raise `NotImplementedError`: the driver
is written against it, `CtypesWin32` implements it with ctypes on Windows,
and the tests implement it with a recording fake on any platform. Every
argument crosses as a plain value (paths, SID strings, integers standing for
handles), so a recording of the calls is a complete account of a run.

Nothing here imports ctypes at module level; `CtypesWin32()` on another
platform raises `SandboxUnavailable`.
"""

from __future__ import annotations

import sys

from ...errors import SandboxUnavailable

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .acl import Ace, Label
    from .plan import JobLimits


class Win32Error(Exception):
    """A Win32 call failed: which one, and the error number Windows gave."""

    def __init__(self, function: str, winerror: int, message: str = "") -> None:
        super().__init__(f"{function} failed: error {winerror}"
                         + (f" ({message.strip()})" if message else ""))
        self.function = function
        self.winerror = winerror


class Started:
    """A process created suspended: its id, handles, and the parent's pipe descriptors."""

    __slots__ = ("pid", "process", "stderr_r", "stdin_w", "stdout_r", "thread")

    def __init__(self, pid: int, process: int, thread: int, *, stdin_w: int = -1,
                 stdout_r: int = -1, stderr_r: int = -1) -> None:
        self.pid = pid
        self.process = process
        self.thread = thread
        self.stdin_w = stdin_w
        self.stdout_r = stdout_r
        self.stderr_r = stderr_r


class Win32:
    """What the driver asks of Windows. Handles are integers; failures raise `Win32Error`."""

    # -- AppContainer and tokens
    def create_appcontainer_profile(self, name: str, capabilities: tuple[str, ...]) -> str:
        """CreateAppContainerProfile; returns the profile's SID as a string."""
        raise NotImplementedError

    def delete_appcontainer_profile(self, name: str) -> None:
        raise NotImplementedError

    def derive_appcontainer_sid(self, name: str) -> str:
        """DeriveAppContainerSidFromAppContainerName: Windows' own answer for `name`."""
        raise NotImplementedError

    def create_restricted_token(self, deny_only: tuple[str, ...] = ()) -> int:
        """CreateRestrictedToken(DISABLE_MAX_PRIVILEGE) of this process's token, with
        the groups in `deny_only` made deny-only, set to Low integrity (S-1-16-4096);
        returns the token handle."""
        raise NotImplementedError

    def is_elevated(self) -> bool:
        """Whether this process's token is elevated (TokenElevation)."""
        raise NotImplementedError

    def process_started(self, pid: int) -> int | None:
        """The creation time (GetProcessTimes, 100 ns since 1601) of the running process
        with this id; None when none runs; -1 when one runs that this user may not
        open, which therefore is not one of this user's stockade processes."""
        raise NotImplementedError

    # -- files
    def add_aces(self, path: str, aces: list[Ace]) -> None:
        """SetEntriesInAclW (GRANT/DENY) + SetNamedSecurityInfoW on `path`'s DACL."""
        raise NotImplementedError

    def revoke_sid(self, path: str, sid: str) -> None:
        """Remove every explicit ACE for `sid` from `path`'s DACL (REVOKE_ACCESS)."""
        raise NotImplementedError

    def get_label(self, path: str) -> str:
        """`path`'s mandatory label as SDDL ("" when it has none), to put back later."""
        raise NotImplementedError

    def set_label(self, path: str, label: Label) -> None:
        raise NotImplementedError

    def restore_label(self, path: str, saved: str) -> None:
        raise NotImplementedError

    def make_directory(self, path: str) -> None:
        raise NotImplementedError

    def remove_directory(self, path: str) -> bool:
        """RemoveDirectoryW; False when it is not empty or already gone."""
        raise NotImplementedError

    def remove_tree(self, path: str) -> None:
        """Remove the run's TEMP and what the command left in it, never following a link."""
        raise NotImplementedError

    def is_link(self, path: str) -> bool:
        """Whether `path` is a symlink, junction or other reparse point (not followed)."""
        raise NotImplementedError

    def is_file(self, path: str) -> bool:
        raise NotImplementedError

    def reset_low_labels(self, root: str) -> list[str]:
        """Remove the explicit Low label from every object under `root` that carries
        one (what a Low-integrity process created), never following a link; the paths."""
        raise NotImplementedError

    def first_link_under(self, root: str) -> str:
        """The first reparse point or hard-linked file under `root` ("" for none),
        never following a link."""
        raise NotImplementedError

    # -- jobs and processes
    def create_job(self, limits: JobLimits) -> int:
        """CreateJobObjectW with the extended limits, UI restrictions and a completion
        port for its notifications."""
        raise NotImplementedError

    def create_process(self, application: str, command_line: str, environment: str,
                       cwd: str, *, token: int | None, appcontainer_sid: str | None,
                       capabilities: tuple[str, ...], stdin: int | None,
                       capture: bool, stdio: Mapping[int, int] | None = None) -> Started:
        """CreateProcessW (or CreateProcessAsUserW with `token`), CREATE_SUSPENDED,
        EXTENDED_STARTUPINFO_PRESENT; with `appcontainer_sid`, the
        PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES attribute. Only the stdio
        handles are inherited."""
        raise NotImplementedError

    def assign_to_job(self, job: int, process: int) -> None:
        raise NotImplementedError

    def resume_thread(self, thread: int) -> None:
        raise NotImplementedError

    def wait_process(self, process: int, timeout: float | None) -> int | None:
        """The exit code once the process has ended, None if `timeout` passed first."""
        raise NotImplementedError

    def terminate_job(self, job: int, exit_code: int) -> None:
        raise NotImplementedError

    def job_messages(self, job: int) -> list[int]:
        """The JOB_OBJECT_MSG_* notifications queued since the last call."""
        raise NotImplementedError

    def close_handle(self, handle: int) -> None:
        raise NotImplementedError


# -- the real thing --------------------------------------------------------------

_INFINITE = 0xFFFFFFFF
_WAIT_TIMEOUT = 0x102
_SE_FILE_OBJECT = 1
_DACL_SECURITY_INFORMATION = 0x4
_LABEL_SECURITY_INFORMATION = 0x10
_GRANT_ACCESS, _DENY_ACCESS, _REVOKE_ACCESS = 1, 3, 4
_TRUSTEE_IS_SID = 0
_SE_GROUP_ENABLED = 0x4
_SE_GROUP_INTEGRITY = 0x20
_DISABLE_MAX_PRIVILEGE = 0x1
_TOKEN_INTEGRITY_LEVEL = 25
_TOKEN_ACCESS = 0x0001 | 0x0002 | 0x0008 | 0x0080  # ASSIGN_PRIMARY|DUPLICATE|QUERY|ADJUST_DEFAULT
_CREATE_SUSPENDED = 0x4
_CREATE_UNICODE_ENVIRONMENT = 0x400
_EXTENDED_STARTUPINFO_PRESENT = 0x80000
_CREATE_NO_WINDOW = 0x08000000
_STARTF_USESTDHANDLES = 0x100
_HANDLE_FLAG_INHERIT = 0x1
_PROC_THREAD_ATTRIBUTE_HANDLE_LIST = 0x20002
_PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES = 0x20009
_JOB_BASIC_UI_RESTRICTIONS = 4
_JOB_ASSOCIATE_COMPLETION_PORT = 7
_JOB_EXTENDED_LIMIT_INFORMATION = 9
_FACILITY_WIN32 = 7
_TOKEN_QUERY = 0x0008
_TOKEN_ELEVATION = 20
_PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
_STILL_ACTIVE = 259


class CtypesWin32(Win32):
    """`Win32` through ctypes: kernel32, advapi32 and userenv. Windows only."""

    def __init__(self) -> None:
        if sys.platform != "win32":
            raise SandboxUnavailable(
                f"the windows backend needs Windows, and this is {sys.platform}. "
                'On Linux use backend = "bubblewrap", on macOS backend = "seatbelt"')
        self._api: Any = _load()
        self._ports: dict[int, int] = {}

    # -- shared pieces
    def _check(self, ok: object, function: str) -> None:
        if not ok:
            import ctypes

            code = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
            raise Win32Error(function, code, ctypes.FormatError(code))  # type: ignore[attr-defined,unused-ignore]

    def _hresult(self, hr: int, function: str) -> None:
        if hr < 0 or hr > 0x7FFFFFFF:
            hr &= 0xFFFFFFFF
            code = hr & 0xFFFF if (hr >> 16) & 0x1FFF == _FACILITY_WIN32 else hr
            raise Win32Error(function, code)

    def _sid(self, text: str) -> Any:
        import ctypes

        a = self._api
        psid = ctypes.c_void_p()
        self._check(a.ConvertStringSidToSidW(text, ctypes.byref(psid)), "ConvertStringSidToSidW")
        return psid

    def _free(self, pointer: Any) -> None:
        import ctypes

        if pointer:
            self._api.LocalFree(ctypes.cast(pointer, ctypes.c_void_p))

    # -- AppContainer and tokens
    def create_appcontainer_profile(self, name: str, capabilities: tuple[str, ...]) -> str:
        import ctypes

        a = self._api
        sids = [self._sid(c) for c in capabilities]
        try:
            caps = (a.SID_AND_ATTRIBUTES * max(len(sids), 1))()
            for i, sid in enumerate(sids):
                caps[i].Sid = sid
                caps[i].Attributes = _SE_GROUP_ENABLED
            out = ctypes.c_void_p()
            hr = a.CreateAppContainerProfile(name, name, "stockade: one sandboxed command",
                                             caps if sids else None, len(sids),
                                             ctypes.byref(out))
            self._hresult(hr, "CreateAppContainerProfile")
            try:
                return self._sid_text(out)
            finally:
                a.FreeSid(out)
        finally:
            for sid in sids:
                self._free(sid)

    def _sid_text(self, psid: Any) -> str:
        import ctypes

        text = ctypes.c_wchar_p()
        self._check(self._api.ConvertSidToStringSidW(psid, ctypes.byref(text)),
                    "ConvertSidToStringSidW")
        try:
            return str(text.value)
        finally:
            self._free(text)

    def delete_appcontainer_profile(self, name: str) -> None:
        self._hresult(self._api.DeleteAppContainerProfile(name), "DeleteAppContainerProfile")

    def derive_appcontainer_sid(self, name: str) -> str:
        import ctypes

        out = ctypes.c_void_p()
        self._hresult(self._api.DeriveAppContainerSidFromAppContainerName(
            name, ctypes.byref(out)), "DeriveAppContainerSidFromAppContainerName")
        try:
            return self._sid_text(out)
        finally:
            self._api.FreeSid(out)

    def create_restricted_token(self, deny_only: tuple[str, ...] = ()) -> int:
        import ctypes

        a = self._api
        own = ctypes.c_void_p()
        self._check(a.OpenProcessToken(a.GetCurrentProcess(), _TOKEN_ACCESS, ctypes.byref(own)),
                    "OpenProcessToken")
        disabled = [self._sid(sid) for sid in deny_only]
        try:
            restricted = ctypes.c_void_p()
            groups = (a.SID_AND_ATTRIBUTES * max(len(disabled), 1))()
            for i, sid in enumerate(disabled):
                groups[i].Sid = sid
            self._check(a.CreateRestrictedToken(own, _DISABLE_MAX_PRIVILEGE, len(disabled),
                                                groups if disabled else None, 0, None,
                                                0, None, ctypes.byref(restricted)),
                        "CreateRestrictedToken")
        finally:
            a.CloseHandle(own)
            for sid in disabled:
                self._free(sid)
        low = self._sid("S-1-16-4096")
        try:
            label = a.TOKEN_MANDATORY_LABEL()
            label.Label.Sid = low
            label.Label.Attributes = _SE_GROUP_INTEGRITY
            size = ctypes.sizeof(label) + a.GetLengthSid(low)
            if not a.SetTokenInformation(restricted, _TOKEN_INTEGRITY_LEVEL,
                                         ctypes.byref(label), size):
                code = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
                a.CloseHandle(restricted)
                raise Win32Error("SetTokenInformation", code)
        finally:
            self._free(low)
        return int(restricted.value or 0)

    def is_elevated(self) -> bool:
        import ctypes

        a = self._api
        own = ctypes.c_void_p()
        self._check(a.OpenProcessToken(a.GetCurrentProcess(), _TOKEN_QUERY, ctypes.byref(own)),
                    "OpenProcessToken")
        try:
            value = ctypes.c_uint32()
            size = ctypes.c_uint32()
            self._check(a.GetTokenInformation(own, _TOKEN_ELEVATION, ctypes.byref(value),
                                              ctypes.sizeof(value), ctypes.byref(size)),
                        "GetTokenInformation")
            return bool(value.value)
        finally:
            a.CloseHandle(own)

    def process_started(self, pid: int) -> int | None:
        import ctypes

        a = self._api
        handle = a.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
        if not handle:
            # Refused is a process that exists; any other failure, one that does not.
            return -1 if ctypes.get_last_error() == 5 else None  # type: ignore[attr-defined,unused-ignore]
        try:
            code = ctypes.c_ulong()
            if a.GetExitCodeProcess(handle, ctypes.byref(code)) and \
                    int(code.value) != _STILL_ACTIVE:
                return None
            created, exited, kernel, user = (ctypes.c_uint64() for _ in range(4))
            self._check(a.GetProcessTimes(handle, ctypes.byref(created), ctypes.byref(exited),
                                          ctypes.byref(kernel), ctypes.byref(user)),
                        "GetProcessTimes")
            return int(created.value)
        finally:
            a.CloseHandle(handle)

    # -- files
    def _set_dacl(self, path: str, entries: list[tuple[str, int, int, int]]) -> None:
        import ctypes

        a = self._api
        dacl = ctypes.c_void_p()
        sd = ctypes.c_void_p()
        err = a.GetNamedSecurityInfoW(path, _SE_FILE_OBJECT, _DACL_SECURITY_INFORMATION, None,
                                      None, ctypes.byref(dacl), None, ctypes.byref(sd))
        if err:
            raise Win32Error("GetNamedSecurityInfoW", err)
        sids = [self._sid(sid) for sid, _, _, _ in entries]
        try:
            explicit = (a.EXPLICIT_ACCESS_W * len(entries))()
            for i, (_sid, mode, mask, inherit) in enumerate(entries):
                explicit[i].grfAccessPermissions = mask
                explicit[i].grfAccessMode = mode
                explicit[i].grfInheritance = inherit
                explicit[i].Trustee.TrusteeForm = _TRUSTEE_IS_SID
                explicit[i].Trustee.ptstrName = sids[i]
            new = ctypes.c_void_p()
            err = a.SetEntriesInAclW(len(entries), explicit, dacl, ctypes.byref(new))
            if err:
                raise Win32Error("SetEntriesInAclW", err)
            try:
                err = a.SetNamedSecurityInfoW(path, _SE_FILE_OBJECT, _DACL_SECURITY_INFORMATION,
                                              None, None, new, None)
                if err:
                    raise Win32Error("SetNamedSecurityInfoW", err)
            finally:
                self._free(new)
        finally:
            for sid in sids:
                self._free(sid)
            self._free(sd)

    def add_aces(self, path: str, aces: list[Ace]) -> None:
        self._set_dacl(path, [(ace.sid, _DENY_ACCESS if ace.access == "deny" else _GRANT_ACCESS,
                               ace.mask, ace.inherit) for ace in aces])

    def revoke_sid(self, path: str, sid: str) -> None:
        self._set_dacl(path, [(sid, _REVOKE_ACCESS, 0, 0)])

    def get_label(self, path: str) -> str:
        import ctypes

        a = self._api
        sacl = ctypes.c_void_p()
        sd = ctypes.c_void_p()
        err = a.GetNamedSecurityInfoW(path, _SE_FILE_OBJECT, _LABEL_SECURITY_INFORMATION, None,
                                      None, None, ctypes.byref(sacl), ctypes.byref(sd))
        if err:
            raise Win32Error("GetNamedSecurityInfoW", err)
        try:
            text = ctypes.c_wchar_p()
            self._check(a.ConvertSecurityDescriptorToStringSecurityDescriptorW(
                sd, 1, _LABEL_SECURITY_INFORMATION, ctypes.byref(text), None),
                "ConvertSecurityDescriptorToStringSecurityDescriptorW")
            try:
                return str(text.value or "")
            finally:
                self._free(text)
        finally:
            self._free(sd)

    def _set_sacl_sddl(self, path: str, sddl: str) -> None:
        import ctypes

        a = self._api
        sd = ctypes.c_void_p()
        self._check(a.ConvertStringSecurityDescriptorToSecurityDescriptorW(
            sddl, 1, ctypes.byref(sd), None),
            "ConvertStringSecurityDescriptorToSecurityDescriptorW")
        try:
            present = ctypes.c_int()
            sacl = ctypes.c_void_p()
            defaulted = ctypes.c_int()
            self._check(a.GetSecurityDescriptorSacl(sd, ctypes.byref(present), ctypes.byref(sacl),
                                                    ctypes.byref(defaulted)),
                        "GetSecurityDescriptorSacl")
            empty = None
            if not present.value or not sacl.value:
                # No label to put back: an empty SACL removes the one set.
                empty = ctypes.create_string_buffer(64)
                self._check(a.InitializeAcl(empty, 64, 2), "InitializeAcl")
            err = a.SetNamedSecurityInfoW(path, _SE_FILE_OBJECT, _LABEL_SECURITY_INFORMATION,
                                          None, None, None, empty if empty is not None else sacl)
            if err:
                raise Win32Error("SetNamedSecurityInfoW", err)
        finally:
            self._free(sd)

    def set_label(self, path: str, label: Label) -> None:
        rights = "".join(r for bit, r in ((1, "NW"), (2, "NR"), (4, "NX")) if label.policy & bit)
        flags = ("OI" if label.inherit & 1 else "") + ("CI" if label.inherit & 2 else "")
        level = "LW" if label.level == "S-1-16-4096" else "ME"
        self._set_sacl_sddl(path, f"S:(ML;{flags};{rights};;;{level})")

    def restore_label(self, path: str, saved: str) -> None:
        self._set_sacl_sddl(path, saved if saved.startswith("S:") else "S:")

    def make_directory(self, path: str) -> None:
        self._check(self._api.CreateDirectoryW(path, None), "CreateDirectoryW")

    def remove_directory(self, path: str) -> bool:
        return bool(self._api.RemoveDirectoryW(path))

    def remove_tree(self, path: str) -> None:
        import shutil

        # rmtree does not descend into a junction or symlink (it unlinks the
        # link): a command that left one to C:\Users\me in its TEMP must not
        # get the home emptied on its behalf.
        shutil.rmtree(path, ignore_errors=True)

    def is_link(self, path: str) -> bool:
        from .acl import lstat_is_link

        return lstat_is_link(path)

    def is_file(self, path: str) -> bool:
        import os

        return os.path.isfile(path)

    def reset_low_labels(self, root: str) -> list[str]:
        from .acl import explicit_low_label, walk_no_links

        done: list[str] = []
        for path in walk_no_links(root):
            if explicit_low_label(self.get_label(path)):
                self.restore_label(path, "")
                done.append(path)
        return done

    def first_link_under(self, root: str) -> str:
        from .acl import first_link_under

        return first_link_under(root)

    # -- jobs and processes
    def create_job(self, limits: JobLimits) -> int:
        import ctypes

        a = self._api
        job = a.CreateJobObjectW(None, None)
        self._check(job, "CreateJobObjectW")
        try:
            info = a.JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
            info.BasicLimitInformation.LimitFlags = limits.limit_flags
            info.BasicLimitInformation.ActiveProcessLimit = limits.active_processes
            info.ProcessMemoryLimit = limits.process_memory
            self._check(a.SetInformationJobObject(job, _JOB_EXTENDED_LIMIT_INFORMATION,
                                                  ctypes.byref(info), ctypes.sizeof(info)),
                        "SetInformationJobObject")
            ui = a.JOBOBJECT_BASIC_UI_RESTRICTIONS(limits.ui_restrictions)
            self._check(a.SetInformationJobObject(job, _JOB_BASIC_UI_RESTRICTIONS,
                                                  ctypes.byref(ui), ctypes.sizeof(ui)),
                        "SetInformationJobObject")
            port = a.CreateIoCompletionPort(ctypes.c_void_p(-1), None, 0, 1)
            self._check(port, "CreateIoCompletionPort")
            self._ports[int(job)] = int(port)
            assoc = a.JOBOBJECT_ASSOCIATE_COMPLETION_PORT(None, port)
            self._check(a.SetInformationJobObject(job, _JOB_ASSOCIATE_COMPLETION_PORT,
                                                  ctypes.byref(assoc), ctypes.sizeof(assoc)),
                        "SetInformationJobObject")
        except BaseException:
            self.close_handle(int(job))
            raise
        return int(job)

    def _pipe(self) -> tuple[int, int]:
        import ctypes

        a = self._api
        sa = a.SECURITY_ATTRIBUTES(ctypes.sizeof(a.SECURITY_ATTRIBUTES), None, True)
        r, w = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(a.CreatePipe(ctypes.byref(r), ctypes.byref(w), ctypes.byref(sa), 0),
                    "CreatePipe")
        return int(r.value or 0), int(w.value or 0)

    def create_process(self, application: str, command_line: str, environment: str,
                       cwd: str, *, token: int | None, appcontainer_sid: str | None,
                       capabilities: tuple[str, ...], stdin: int | None,
                       capture: bool, stdio: Mapping[int, int] | None = None) -> Started:
        if sys.platform != "win32":
            raise SandboxUnavailable("CreateProcessW exists only on Windows")
        import msvcrt
        import os

        a = self._api
        parent: dict[str, int] = {}
        owned: list[int] = []
        to_free: list[Any] = []
        try:
            std = self._std_handles(stdin, capture, stdio, parent, owned)
            child = list(dict.fromkeys(h for h in std if h))
            pi = self._start_suspended(application, command_line, environment, cwd, token,
                                       appcontainer_sid, capabilities, std, child, to_free)
            fds = {}
            for name, handle in parent.items():
                mode = os.O_WRONLY if name == "stdin_w" else os.O_RDONLY
                fds[name] = msvcrt.open_osfhandle(handle, mode | os.O_BINARY)
            parent.clear()
            return Started(int(pi.dwProcessId), int(pi.hProcess), int(pi.hThread), **fds)
        finally:
            for handle in owned:
                a.CloseHandle(handle)
            for handle in parent.values():
                a.CloseHandle(handle)
            for pointer in to_free:
                self._free(pointer)

    def _std_handles(self, stdin: int | None, capture: bool, stdio: Mapping[int, int] | None,
                     parent: dict[str, int], owned: list[int]) -> tuple[int, int, int]:
        """The child's stdin, stdout and stderr, inheritable; each pipe end goes into
        `parent` (ours) or `owned` (the child's, closed once it started) as it is made,
        so that a failure part-way leaks none."""
        if sys.platform != "win32":
            raise SandboxUnavailable("CreateProcessW exists only on Windows")
        import msvcrt

        a = self._api
        if stdin is None:
            r, w = self._pipe()
            a.SetHandleInformation(w, _HANDLE_FLAG_INHERIT, 0)
            parent["stdin_w"], h_in = w, r
            owned.append(r)
        else:
            h_in = msvcrt.get_osfhandle(stdin)
            a.SetHandleInformation(h_in, _HANDLE_FLAG_INHERIT, _HANDLE_FLAG_INHERIT)
        if capture:
            r1, w1 = self._pipe()
            r2, w2 = self._pipe()
            for h in (r1, r2):
                a.SetHandleInformation(h, _HANDLE_FLAG_INHERIT, 0)
            parent["stdout_r"], parent["stderr_r"] = r1, r2
            h_out, h_err = w1, w2
            owned += [w1, w2]
        else:
            # A caller's terminal or pipe on 1 and 2 (`stdio`), else ours.
            place = stdio or {}
            h_out = (msvcrt.get_osfhandle(place[1]) if 1 in place
                     else a.GetStdHandle(-11))
            h_err = (msvcrt.get_osfhandle(place[2]) if 2 in place
                     else a.GetStdHandle(-12))
            # The handle list admits only inheritable handles.
            for h in (h_out, h_err):
                if h:
                    a.SetHandleInformation(h, _HANDLE_FLAG_INHERIT, _HANDLE_FLAG_INHERIT)
        return h_in, h_out, h_err

    def _start_suspended(self, application: str, command_line: str, environment: str,
                         cwd: str, token: int | None, appcontainer_sid: str | None,
                         capabilities: tuple[str, ...], std: tuple[int, int, int],
                         child: list[int], to_free: list[Any]) -> Any:
        """CreateProcess(AsUser)W, suspended, inheriting only `child`: its
        PROCESS_INFORMATION. Every buffer the attribute list points to is a local
        here, alive until the list is deleted, so that none is freed under it."""
        import ctypes

        a = self._api
        count = 2 if appcontainer_sid else 1
        size = ctypes.c_size_t()
        a.InitializeProcThreadAttributeList(None, count, 0, ctypes.byref(size))
        attrs = ctypes.create_string_buffer(size.value)
        self._check(a.InitializeProcThreadAttributeList(attrs, count, 0, ctypes.byref(size)),
                    "InitializeProcThreadAttributeList")
        try:
            handles = (ctypes.c_void_p * len(child))(*child)
            self._check(a.UpdateProcThreadAttribute(
                attrs, 0, _PROC_THREAD_ATTRIBUTE_HANDLE_LIST, handles,
                ctypes.sizeof(handles), None, None), "UpdateProcThreadAttribute")
            if appcontainer_sid:
                container = self._sid(appcontainer_sid)
                to_free.append(container)
                sids = [self._sid(c) for c in capabilities]
                to_free += sids
                caps = (a.SID_AND_ATTRIBUTES * max(len(sids), 1))()
                for i, sid in enumerate(sids):
                    caps[i].Sid = sid
                    caps[i].Attributes = _SE_GROUP_ENABLED
                security = a.SECURITY_CAPABILITIES(container, caps if sids else None,
                                                   len(sids), 0)
                self._check(a.UpdateProcThreadAttribute(
                    attrs, 0, _PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
                    ctypes.byref(security), ctypes.sizeof(security), None, None),
                    "UpdateProcThreadAttribute")
            info = a.STARTUPINFOEXW()
            info.StartupInfo.cb = ctypes.sizeof(info)
            info.StartupInfo.dwFlags = _STARTF_USESTDHANDLES
            info.StartupInfo.hStdInput, info.StartupInfo.hStdOutput = std[0], std[1]
            info.StartupInfo.hStdError = std[2]
            info.lpAttributeList = ctypes.cast(attrs, ctypes.c_void_p)
            pi = a.PROCESS_INFORMATION()
            line = ctypes.create_unicode_buffer(command_line)
            env = ctypes.create_unicode_buffer(environment, len(environment) + 1)
            flags = (_CREATE_SUSPENDED | _CREATE_UNICODE_ENVIRONMENT
                     | _EXTENDED_STARTUPINFO_PRESENT | _CREATE_NO_WINDOW)
            if token is not None:
                ok = a.CreateProcessAsUserW(token, application, line, None, None, True, flags,
                                            env, cwd, ctypes.byref(info), ctypes.byref(pi))
                self._check(ok, "CreateProcessAsUserW")
            else:
                ok = a.CreateProcessW(application, line, None, None, True, flags, env, cwd,
                                      ctypes.byref(info), ctypes.byref(pi))
                self._check(ok, "CreateProcessW")
        finally:
            a.DeleteProcThreadAttributeList(attrs)
        return pi

    def assign_to_job(self, job: int, process: int) -> None:
        self._check(self._api.AssignProcessToJobObject(job, process), "AssignProcessToJobObject")

    def resume_thread(self, thread: int) -> None:
        if self._api.ResumeThread(thread) == 0xFFFFFFFF:
            self._check(False, "ResumeThread")

    def wait_process(self, process: int, timeout: float | None) -> int | None:
        import ctypes

        a = self._api
        ms = _INFINITE if timeout is None else max(int(timeout * 1000), 0)
        if a.WaitForSingleObject(process, ms) == _WAIT_TIMEOUT:
            return None
        code = ctypes.c_ulong()
        self._check(a.GetExitCodeProcess(process, ctypes.byref(code)), "GetExitCodeProcess")
        return int(code.value)

    def terminate_job(self, job: int, exit_code: int) -> None:
        self._check(self._api.TerminateJobObject(job, exit_code), "TerminateJobObject")

    def job_messages(self, job: int) -> list[int]:
        import ctypes

        a = self._api
        port = self._ports.get(job)
        out: list[int] = []
        if port is None:
            return out
        code = ctypes.c_ulong()
        key = ctypes.c_size_t()
        overlapped = ctypes.c_void_p()
        while a.GetQueuedCompletionStatus(port, ctypes.byref(code), ctypes.byref(key),
                                          ctypes.byref(overlapped), 0):
            out.append(int(code.value))
        return out

    def close_handle(self, handle: int) -> None:
        port = self._ports.pop(handle, None)
        if port is not None:
            self._api.CloseHandle(port)
        self._api.CloseHandle(handle)


def structures() -> Any:
    """The structures the Win32 calls take, in fixed-width types (importable anywhere).

    DWORD is spelt c_uint32, not wintypes.DWORD (c_ulong, 8 bytes on Linux),
    so the layouts built here are the Windows x64 ones on any 64-bit host
    and the tests check their sizes and offsets against the documented ones.
    """
    import ctypes
    from types import SimpleNamespace

    P = ctypes.c_void_p
    DWORD, WORD, BOOL = ctypes.c_uint32, ctypes.c_uint16, ctypes.c_int32
    ns = SimpleNamespace()

    class SID_AND_ATTRIBUTES(ctypes.Structure):
        _fields_ = [("Sid", P), ("Attributes", DWORD)]

    class SECURITY_CAPABILITIES(ctypes.Structure):
        _fields_ = [("AppContainerSid", P), ("Capabilities", ctypes.POINTER(SID_AND_ATTRIBUTES)),
                    ("CapabilityCount", DWORD), ("Reserved", DWORD)]

    class TOKEN_MANDATORY_LABEL(ctypes.Structure):
        _fields_ = [("Label", SID_AND_ATTRIBUTES)]

    W = ctypes.c_wchar_p

    class STARTUPINFOW(ctypes.Structure):
        _fields_ = [("cb", DWORD), ("lpReserved", W), ("lpDesktop", W), ("lpTitle", W),
                    ("dwX", DWORD), ("dwY", DWORD),
                    ("dwXSize", DWORD), ("dwYSize", DWORD), ("dwXCountChars", DWORD),
                    ("dwYCountChars", DWORD), ("dwFillAttribute", DWORD),
                    ("dwFlags", DWORD), ("wShowWindow", WORD), ("cbReserved2", WORD),
                    ("lpReserved2", P), ("hStdInput", P), ("hStdOutput", P),
                    ("hStdError", P)]

    class STARTUPINFOEXW(ctypes.Structure):
        _fields_ = [("StartupInfo", STARTUPINFOW), ("lpAttributeList", P)]

    class PROCESS_INFORMATION(ctypes.Structure):
        _fields_ = [("hProcess", P), ("hThread", P), ("dwProcessId", DWORD),
                    ("dwThreadId", DWORD)]

    class SECURITY_ATTRIBUTES(ctypes.Structure):
        _fields_ = [("nLength", DWORD), ("lpSecurityDescriptor", P), ("bInheritHandle", BOOL)]

    class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):
        _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64),
                    ("PerJobUserTimeLimit", ctypes.c_int64), ("LimitFlags", DWORD),
                    ("MinimumWorkingSetSize", ctypes.c_size_t),
                    ("MaximumWorkingSetSize", ctypes.c_size_t),
                    ("ActiveProcessLimit", DWORD), ("Affinity", ctypes.c_size_t),
                    ("PriorityClass", DWORD), ("SchedulingClass", DWORD)]

    class IO_COUNTERS(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in (
            "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
            "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]

    class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", JOBOBJECT_BASIC_LIMIT_INFORMATION),
                    ("IoInfo", IO_COUNTERS), ("ProcessMemoryLimit", ctypes.c_size_t),
                    ("JobMemoryLimit", ctypes.c_size_t),
                    ("PeakProcessMemoryUsed", ctypes.c_size_t),
                    ("PeakJobMemoryUsed", ctypes.c_size_t)]

    class JOBOBJECT_BASIC_UI_RESTRICTIONS(ctypes.Structure):
        _fields_ = [("UIRestrictionsClass", DWORD)]

    class JOBOBJECT_ASSOCIATE_COMPLETION_PORT(ctypes.Structure):
        _fields_ = [("CompletionKey", P), ("CompletionPort", P)]

    class TRUSTEE_W(ctypes.Structure):
        _fields_ = [("pMultipleTrustee", P), ("MultipleTrusteeOperation", DWORD),
                    ("TrusteeForm", DWORD), ("TrusteeType", DWORD), ("ptstrName", P)]

    class EXPLICIT_ACCESS_W(ctypes.Structure):
        _fields_ = [("grfAccessPermissions", DWORD), ("grfAccessMode", DWORD),
                    ("grfInheritance", DWORD), ("Trustee", TRUSTEE_W)]

    for struct in (SID_AND_ATTRIBUTES, SECURITY_CAPABILITIES, TOKEN_MANDATORY_LABEL,
                   STARTUPINFOW, STARTUPINFOEXW, PROCESS_INFORMATION, SECURITY_ATTRIBUTES,
                   JOBOBJECT_BASIC_LIMIT_INFORMATION, IO_COUNTERS,
                   JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOBOBJECT_BASIC_UI_RESTRICTIONS,
                   JOBOBJECT_ASSOCIATE_COMPLETION_PORT, TRUSTEE_W, EXPLICIT_ACCESS_W):
        setattr(ns, struct.__name__, struct)
    return ns



_API: Any = None


def _load() -> Any:
    """The DLL functions with their prototypes, and the structures they take (once)."""
    global _API
    if _API is not None:
        return _API
    if sys.platform != "win32":
        raise SandboxUnavailable("the Win32 API exists only on Windows")
    import ctypes
    from ctypes import wintypes as w
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    adv = ctypes.WinDLL("advapi32", use_last_error=True)
    uenv = ctypes.WinDLL("userenv", use_last_error=True)
    P = ctypes.c_void_p
    ns = structures()

    def proto(dll: Any, name: str, restype: Any, *argtypes: Any) -> None:
        fn = getattr(dll, name)
        fn.restype = restype
        fn.argtypes = list(argtypes)
        setattr(ns, name, fn)

    B, D, H, S = w.BOOL, w.DWORD, w.HANDLE, w.LPCWSTR
    PP = ctypes.POINTER(P)
    proto(k32, "CloseHandle", B, H)
    proto(k32, "LocalFree", P, P)
    proto(k32, "GetCurrentProcess", H)
    proto(k32, "GetStdHandle", H, D)
    proto(k32, "SetHandleInformation", B, H, D, D)
    proto(k32, "CreatePipe", B, ctypes.POINTER(H), ctypes.POINTER(H), P, D)
    proto(k32, "CreateDirectoryW", B, S, P)
    proto(k32, "RemoveDirectoryW", B, S)
    proto(k32, "InitializeProcThreadAttributeList", B, P, D, D, ctypes.POINTER(ctypes.c_size_t))
    proto(k32, "UpdateProcThreadAttribute", B, P, D, ctypes.c_size_t, P, ctypes.c_size_t, P, P)
    proto(k32, "DeleteProcThreadAttributeList", None, P)
    proto(k32, "CreateProcessW", B, S, w.LPWSTR, P, P, B, D, P, S, P, P)
    proto(adv, "CreateProcessAsUserW", B, H, S, w.LPWSTR, P, P, B, D, P, S, P, P)
    proto(k32, "ResumeThread", D, H)
    proto(k32, "WaitForSingleObject", D, H, D)
    proto(k32, "GetExitCodeProcess", B, H, ctypes.POINTER(w.DWORD))
    proto(k32, "CreateJobObjectW", H, P, S)
    proto(k32, "SetInformationJobObject", B, H, ctypes.c_int, P, D)
    proto(k32, "AssignProcessToJobObject", B, H, H)
    proto(k32, "TerminateJobObject", B, H, ctypes.c_uint)
    proto(k32, "CreateIoCompletionPort", H, H, H, ctypes.c_size_t, D)
    proto(k32, "GetQueuedCompletionStatus", B, H, ctypes.POINTER(w.DWORD),
          ctypes.POINTER(ctypes.c_size_t), PP, D)
    proto(adv, "OpenProcessToken", B, H, D, ctypes.POINTER(H))
    proto(adv, "CreateRestrictedToken", B, H, D, D, P, D, P, D, P, ctypes.POINTER(H))
    proto(adv, "SetTokenInformation", B, H, ctypes.c_int, P, D)
    proto(adv, "GetTokenInformation", B, H, ctypes.c_int, P, D, ctypes.POINTER(D))
    proto(k32, "OpenProcess", H, D, B, D)
    proto(k32, "GetProcessTimes", B, H, P, P, P, P)
    proto(adv, "GetLengthSid", D, P)
    proto(adv, "FreeSid", P, P)
    proto(adv, "ConvertStringSidToSidW", B, S, PP)
    proto(adv, "ConvertSidToStringSidW", B, P, ctypes.POINTER(w.LPWSTR))
    proto(adv, "GetNamedSecurityInfoW", D, S, ctypes.c_int, D, PP, PP, PP, PP, PP)
    proto(adv, "SetNamedSecurityInfoW", D, w.LPWSTR, ctypes.c_int, D, P, P, P, P)
    proto(adv, "SetEntriesInAclW", D, w.ULONG, P, P, PP)
    proto(adv, "InitializeAcl", B, P, D, D)
    proto(adv, "GetSecurityDescriptorSacl", B, P, ctypes.POINTER(B), PP, ctypes.POINTER(B))
    proto(adv, "ConvertSecurityDescriptorToStringSecurityDescriptorW", B, P, D, D,
          ctypes.POINTER(w.LPWSTR), P)
    proto(adv, "ConvertStringSecurityDescriptorToSecurityDescriptorW", B, S, D, PP, P)
    proto(uenv, "CreateAppContainerProfile", ctypes.c_long, S, S, S, P, D, PP)
    proto(uenv, "DeleteAppContainerProfile", ctypes.c_long, S)
    proto(uenv, "DeriveAppContainerSidFromAppContainerName", ctypes.c_long, S, PP)
    _API = ns
    return ns
