"""The curated rules: commands with essentially no legitimate use in a workspace.

Each regex is RE2 syntax (no look-around, no back-references) and is matched
anywhere in the normalised scan target (see `normalize.py`): quotes are gone,
`\\` is both deleted and read as `/`, paths are collapsed, Windows paths use
`/`. A rule therefore says what the command *is*, never how it was spelt.

`block` is reserved for commands whose only outcome is destroying the
machine or its recovery paths; everything an administrator might
legitimately type now and then is `warn`, which allows and audits. The OS
sandbox is the real boundary: these rules exist so the obvious disasters
never reach it.
"""

from __future__ import annotations

BLOCK = "block"
WARN = "warn"
ACTIONS = (BLOCK, WARN)


class Rule:
    """One named regex with its tier. `source` is "default" or the config file it came from."""

    __slots__ = ("action", "description", "name", "platform", "regex", "source")

    def __init__(self, name: str, regex: str, action: str, description: str, *,
                 platform: str = "", source: str = "default") -> None:
        if action not in ACTIONS:
            raise ValueError(f"rule {name!r}: action must be one of {', '.join(ACTIONS)}, "
                             f"got {action!r}")
        self.name = name
        self.regex = regex
        self.action = action
        self.description = description
        self.platform = platform
        self.source = source

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "action": self.action, "description": self.description,
                "platform": self.platform, "source": self.source, "regex": self.regex}

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, action={self.action!r}, source={self.source!r})"


# ---- fragments -------------------------------------------------------------
# Where a command word can start: the beginning, a shell separator or group,
# or the `/` of a path such as `/bin/rm`.
_AT = r"(?:^|[\s;&|(){}!/])"
# The same for Windows, where cmd's `@` (no echo) may prefix a command.
_WAT = r"(?:^|[\s;&|(){}!/@])"
# The rest of one simple command. Stopping at `;`, `&`, `|` keeps a rule
# from pairing `rm` in one command with `/` in the next.
_ARGS = r"(?:[^\n;&|]*\s)?"
# Stricter than `_AT`, for words that are also common in prose (`reboot`,
# `init`): the start of a command, after a separator, a prefix such as
# `sudo`, or the `-c`/`/c` of a shell asked to run it.
_COMMAND_POSITION = (r"(?:^|[\n;&|(){}!]|\b(?:sudo|doas|exec|nohup|command|xargs|time|nice)\s+"
                     r"(?:-\S+\s+)*|\s[-/]c\s+)\s*")
_REST = r"[^\n;&|]*"
_END = r"(?:$|[\s;&|)])"

# GNU rm accepts options anywhere and any unambiguous prefix of a long one.
_RM_RECURSIVE = r"(?:-[a-zA-Z]*[rR][a-zA-Z]*|--r[a-z-]*)"
_SYSTEM_DIRS = (r"(?:bin|boot|dev|etc|home|lib|lib32|lib64|libx32|opt|proc|root|run|sbin|snap|srv"
                r"|sys|usr|var|Applications|Library|System|Users|Volumes|private|cores)")
# A system directory itself or one level below it (`/etc`, `/usr/local`,
# `/home/me`): deeper paths such as `/var/lib/apt/lists/*` are routine.
_SYSTEM_PATH = r"/" + _SYSTEM_DIRS + r"(?:/[^\s/;&|)]*)?/?\*?"
_HOME_ROOT = r"(?:~|\$HOME|\$\{HOME\})/?\*?"

_DISK = (r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|a?da\d|disk\d|rdisk\d"
         r"|disk/by-|md\d|md/|dm-\d|mapper/|loop\d|sr\d|fd\d|nbd\d|zd\d|mtdblock\d|mtd\d"
         r"|ram\d|root\b|block/|cciss/)")
_AUTH_FILE = r"/etc/(?:passwd|shadow|gshadow|group|sudoers(?:\.d/[^\s;&|)]*)?)(?:$|[\s;&|)])"
_AUTHORIZED_KEYS = r"\S*(?:\.ssh/|administrators_)authorized_keys2?"

_WIN_DELETE = r"(?:remove-item|ri|rm|rmdir|rd|del|erase)"
_WIN_RECURSE = r"(?:/s\b|-r[a-z]*)"
_HIVES = (r"(?:hklm|hkcu|hkcr|hku|hkcc|hkey_local_machine|hkey_current_user|hkey_classes_root"
          r"|hkey_users|hkey_current_config)")
# A drive root or a registry hive root.
_WIN_ROOT = (r"(?:[a-z]:/|%systemdrive%/?|\$env:systemdrive/?|" + _HIVES + r":/?"
             r"|registry::" + _HIVES + r"/?)\*?(?:\.\*)?")
# cmd's `rd /s /q \` is the root of the current drive. `rm` is left out:
# `rm -r /` is already the POSIX rule, and one command should name one rule.
_WIN_CURRENT_ROOT_DELETE = r"(?:remove-item|ri|rmdir|rd|del|erase)"
_WIN_SYSTEM = (r"(?:[a-z]:/(?:windows|program\sfiles(?:\s\(x86\))?|progra~[12]|programdata|users"
               r"|boot|recovery|system\svolume\sinformation|\$recycle\.bin)"
               r"|%(?:systemroot|windir|programfiles(?:\(x86\))?|programw6432|programdata"
               r"|allusersprofile|userprofile|public)%"
               r"|\$env:(?:systemroot|windir|programfiles(?:\(x86\))?|programdata|allusersprofile"
               r"|userprofile))(?:/[^\s/;&|]*)?/?\*?")


def _either_order(head: str, first: str, second: str, end: str = "") -> str:
    """`head` then `first` and `second` in either order within one command."""
    return (r"(?:" + head + r"\s" + _ARGS + first + r"\s" + _ARGS + second + end
            + r"|" + head + r"\s" + _ARGS + second + r"\s" + _ARGS + first + r")")


_POSIX_BLOCK = (
    Rule(
        "fork-bomb",
        r"(?:" + _AT + r"(?:function\s+[\w.:+-]+\s*(?:\(\s*\))?|[\w.:+-]+\s*\(\s*\))\s*\{\s*"
        r"[\w.:+-]+\s*\|\s*[\w.:+-]+\s*&"
        r"|(?:\$0|\$\{0\})\s*\|\s*(?:\$0|\$\{0\})\s*&|%0\s*\|\s*%0)",
        BLOCK,
        "fork bomb: a function that pipes into itself in the background until the process "
        "table is full",
        platform="posix",
    ),
    Rule(
        "rm-no-preserve-root",
        _AT + r"rm\s" + _ARGS + r"--n[a-z-]*" + _END,
        BLOCK,
        "rm --no-preserve-root, an option that exists only to delete the filesystem root",
        platform="posix",
    ),
    Rule(
        "rm-root-recursive",
        _either_order(_AT + r"rm", _RM_RECURSIVE, r"/(?:\*/?)?", _END),
        BLOCK,
        "recursive delete of the filesystem root",
        platform="posix",
    ),
    Rule(
        "dd-to-disk",
        _AT + r"dd\s" + _ARGS + r"of=" + _DISK,
        BLOCK,
        "dd writing straight onto a disk device",
        platform="posix",
    ),
    Rule(
        "mkfs-device",
        _AT + r"(?:mkfs(?:\.\w+)?|mke2fs|mkswap|mkntfs|mkdosfs|mkexfatfs|newfs(?:_\w+)?)\s"
        + _REST + r"/dev/",
        BLOCK,
        "creating a filesystem on a device, which erases what was on it",
        platform="posix",
    ),
    Rule(
        "redirect-to-block-device",
        r"(?:>[>|]?\s*" + _DISK + r"|" + _AT + r"tee\s" + _ARGS + _DISK
        + r"|" + _AT + r"cp\s" + _REST + r"\s" + _DISK + r"[\w/.:-]*\s*(?:$|[\n;&|)]))",
        BLOCK,
        "output redirected, tee'd or copied onto a disk device",
        platform="posix",
    ),
    Rule(
        "wipe-device",
        _AT + r"(?:wipefs|blkdiscard|shred)\s" + _REST + r"/dev/",
        BLOCK,
        "wipefs, blkdiscard or shred aimed at a device",
        platform="posix",
    ),
)

_POSIX_WARN = (
    Rule(
        "rm-system-path",
        _either_order(_AT + r"rm", _RM_RECURSIVE, _SYSTEM_PATH, _END),
        WARN,
        "recursive delete of a system directory",
        platform="posix",
    ),
    Rule(
        "rm-home-recursive",
        _either_order(_AT + r"rm", _RM_RECURSIVE, _HOME_ROOT, _END),
        WARN,
        "recursive delete of the whole home directory",
        platform="posix",
    ),
    Rule(
        "curl-pipe-shell",
        r"(?:" + _AT + r"(?:curl|wget|fetch)\s[^\n;&]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?"
        r"(?:env\s+(?:\S+=\S*\s+)*)?(?:/\S*/)?(?:ba|da|z|k|c|tc|fi)?sh\b"
        r"|" + _AT + r"(?:(?:ba|da|z|k)?sh|source|\.)\s" + _REST
        + r"[<$]\(\s*(?:curl|wget)\s)",
        WARN,
        "a script downloaded and run by a shell in one step, unseen",
        platform="posix",
    ),
    Rule(
        "chmod-777-system",
        _AT + r"chmod\s" + _ARGS + r"(?:0?777|[ugoa]*\+rwx|(?:a|ugo)=rwx)\s" + _ARGS
        + r"/(?:" + _SYSTEM_DIRS + r"(?:/[^\s;&|)]*)?)?\*?" + _END,
        WARN,
        "world-writable permissions on the root or a system path",
        platform="posix",
    ),
    Rule(
        "write-auth-files",
        r"(?:>[>|]?\s*" + _AUTH_FILE + r"|" + _AT + r"tee\s" + _ARGS + _AUTH_FILE
        + r"|" + _AT + r"(?:sed|perl)\s" + _REST + r"\s-[a-zA-Z]*i" + _REST + r"\s" + _AUTH_FILE
        + r"|" + _AT + r"(?:cp|mv|install|ln|rsync)\s" + _REST + r"\s/etc/(?:passwd|shadow"
        r"|gshadow|group|sudoers)\s*(?:$|[\n;&|)])|of=" + _AUTH_FILE + r")",
        WARN,
        "a write to /etc/passwd, shadow, group or sudoers",
        platform="posix",
    ),
    Rule(
        "reverse-shell",
        r"(?:/dev/(?:tcp|udp)/[^\s/]+/\d"
        r"|" + _AT + r"(?:nc|ncat|netcat)\s" + _ARGS + r"-[ec]\s*\S*(?:sh|bash|cmd|powershell)\b"
        r"|" + _AT + r"socat\s" + _REST + r"exec:\S*sh\b)",
        WARN,
        "a shell wired to a network socket (/dev/tcp, nc -e, socat exec:)",
        platform="posix",
    ),
    Rule(
        "host-shutdown",
        r"(?:" + _COMMAND_POSITION + r"(?:/\S*/)?(?:shutdown|reboot|halt|poweroff)(?:\.exe)?"
        + _END + r"|\bsystemctl\s+(?:-\S+\s+)*(?:poweroff|reboot|halt|kexec|soft-reboot)\b"
        r"|" + _COMMAND_POSITION + r"(?:tel)?init\s+[06]\b|/proc/sysrq-trigger\b"
        r"|(?i:\b(?:stop|restart)-computer\b))",
        WARN,
        "shutting down or rebooting the host (shutdown, reboot, init 0, sysrq)",
        platform="posix",
    ),
    Rule(
        "sudo-password-stdin",
        _AT + r"sudo(?:\s+(?:-[ugpCDrtUTch]\s*[^\s-]\S*|--[a-z-]+=\S+|-[a-zA-Z]+|--[a-z-]+))*"
        r"\s+(?:-[a-zA-Z]*[SAs][a-zA-Z]*|--(?:stdin|askpass|shell))" + _END,
        WARN,
        "sudo reading a password from stdin or an askpass helper, or starting a root shell",
        platform="posix",
    ),
    Rule(
        "ssh-authorized-keys-write",
        r"(?:>[>|]?\s*" + _AUTHORIZED_KEYS + r"|" + _AT + r"tee\s" + _ARGS + _AUTHORIZED_KEYS
        + r"|" + _AT + r"(?:cp|mv|install|ln|rsync|scp)\s" + _REST + r"\s" + _AUTHORIZED_KEYS
        + r"\s*(?:$|[\n;&|)])|" + _AT + r"(?:sed|perl)\s" + _REST + r"\s-[a-zA-Z]*i" + _REST
        + _AUTHORIZED_KEYS + r")",
        WARN,
        "a write to an SSH authorized_keys file, which grants login to whoever holds the key",
        platform="posix",
    ),
)

_WINDOWS_BLOCK = (
    Rule(
        "format-drive",
        r"(?i)(?:" + _WAT + r"format(?:\.com)?\s+(?:/\S+\s+)*[a-z]:|\bformat-volume\b)",
        BLOCK,
        "formatting a drive (format X:, Format-Volume)",
        platform="windows",
    ),
    Rule(
        "drive-root-delete",
        r"(?i)(?:" + _either_order(_WAT + _WIN_DELETE, _WIN_RECURSE, _WIN_ROOT, _END)
        + r"|" + _either_order(_WAT + _WIN_CURRENT_ROOT_DELETE, _WIN_RECURSE, r"/\*?(?:\.\*)?",
                               _END)
        + r"|" + _WAT + r"(?:gci|get-childitem|ls|dir)\s" + _ARGS + _WIN_ROOT + r"\s[^\n;&]*"
        r"\|\s*(?:%\s*\{\s*)?(?:remove-item|ri|rm|del|erase)\b)",
        BLOCK,
        "recursive delete of a drive or registry hive root",
        platform="windows",
    ),
    Rule(
        "shadow-copy-delete",
        r"(?i)(?:vssadmin(?:\.exe)?\s" + _REST + r"\b(?:delete\s+shadows|resize\s+shadowstorage)\b"
        r"|wmic(?:\.exe)?\s" + _REST + r"\bshadowcopy\b" + _REST + r"\bdelete\b"
        r"|\bwin32_shadowcopy\b[^\n]*(?:\.delete\(|\bremove-(?:ciminstance|wmiobject)\b)"
        r"|\bdelete\s+shadows\s+(?:all|oldest|volume|set|id|exposed)\b)",
        BLOCK,
        "destroying Volume Shadow Copies, the restore points ransomware deletes first",
        platform="windows",
    ),
    Rule(
        "backup-catalog-delete",
        r"(?i)wbadmin(?:\.exe)?\s" + _REST + r"\bdelete\s+(?:catalog|systemstatebackup|backup)\b",
        BLOCK,
        "destroying the Windows Backup catalog or its backups",
        platform="windows",
    ),
    Rule(
        "raw-disk-wipe",
        r"(?i)(?:\bsel(?:e(?:c(?:t)?)?)?\s+dis(?:k)?(?:\s+|\s*=\s*)\d+(?:[^\n]*\n){0,8}[^\n]*\bclean\b"
        r"|\bclear-disk\b|\bremove-partition\b"
        r"|(?:of=|>[>|]?\s*)/*(?:\./)?physicaldrive\d)",
        BLOCK,
        "wiping a raw disk (diskpart clean, Clear-Disk, writes to \\\\.\\PhysicalDriveN)",
        platform="windows",
    ),
    Rule(
        "bcdedit-delete",
        r"(?i)bcdedit(?:\.exe)?\s" + _REST + r"/delete\b",
        BLOCK,
        "deleting boot configuration entries, which leaves the machine unbootable",
        platform="windows",
    ),
    Rule(
        "boot-recovery-disable",
        r"(?i)bcdedit(?:\.exe)?\s" + _REST + r"(?:\brecoveryenabled\s+(?:no|off|false|0)\b"
        r"|\bbootstatuspolicy\s+ignoreallfailures\b)",
        BLOCK,
        "disabling Windows boot recovery",
        platform="windows",
    ),
    Rule(
        "reg-delete-hive",
        r"(?i)" + _WAT + r"reg(?:\.exe)?\s+delete\s+" + _ARGS + _HIVES
        + r"(?:/(?:software|system|sam|security))?/?\*?" + _END,
        BLOCK,
        "deleting a whole registry hive",
        platform="windows",
    ),
)

_WINDOWS_WARN = (
    Rule(
        "windows-system-path-delete",
        r"(?i)" + _either_order(_WAT + _WIN_DELETE, _WIN_RECURSE, _WIN_SYSTEM, _END),
        WARN,
        "recursive delete of a Windows system location",
        platform="windows",
    ),
    Rule(
        "powershell-encoded-command",
        r"(?i)(?:powershell|pwsh)(?:\.exe)?\b" + _REST + r"\s(?:--?|/)(?:ec|e(?:n(?:c(?:o(?:d(?:e"
        r"(?:d(?:c(?:o(?:m(?:m(?:a(?:n(?:d)?)?)?)?)?)?)?)?)?)?)?)?)?)(?:$|[\s:])",
        WARN,
        "PowerShell run with a base64 -EncodedCommand (decoded and scanned as well)",
        platform="windows",
    ),
    Rule(
        "download-execute-cradle",
        r"(?i)(?:\b(?:iex|invoke-expression)\b[^\n]*\b(?:downloadstring|downloaddata|downloadfile"
        r"|openread|iwr|irm|invoke-webrequest|invoke-restmethod|net\.webclient"
        r"|start-bitstransfer|wget|curl)\b"
        r"|\b(?:downloadstring|downloaddata|openread|iwr|irm|invoke-webrequest|invoke-restmethod"
        r"|wget|curl)\b[^\n]*\|\s*(?:iex|invoke-expression)\b"
        r"|\[scriptblock\]::create\([^\n]*\b(?:downloadstring|iwr|irm|invoke-webrequest"
        r"|invoke-restmethod)\b"
        r"|\bmshta(?:\.exe)?\s+(?:https?:|[a-z]+script:)"
        r"|\bregsvr32(?:\.exe)?\s[^\n]*/i:\s*https?:)",
        WARN,
        "code downloaded and executed in one step (IEX DownloadString, iwr | iex, mshta URL)",
        platform="windows",
    ),
    Rule(
        "defender-disable",
        r"(?i)(?:\b(?:set|add)-mppreference\b" + _REST + r"-(?:disable[a-z]*[\s:]+"
        r"(?:[^$0\s]|\$[^fF\s])|exclusion(?:path|process|extension)\b)"
        r"|\bsc(?:\.exe)?\s+(?:stop|delete|config)\s+windefend\b"
        r"|\breg(?:\.exe)?\s+add\s" + _REST + r"windows\s?defender" + _REST
        + r"disable(?:antispyware|antivirus|realtimemonitoring)"
        r"|\b(?:uninstall|remove|disable)-windows(?:optional)?feature\b" + _REST + r"defender)",
        WARN,
        "turning Microsoft Defender off or excluding paths from it",
        platform="windows",
    ),
    Rule(
        "firewall-disable",
        r"(?i)(?:netsh(?:\.exe)?\s+(?:advfirewall\s+set\s+\S+\s+state\s+off"
        r"|firewall\s+set\s+opmode\s+(?:mode=)?disable)"
        r"|\bset-netfirewallprofile\b" + _REST + r"-enabled[\s:]+\$?(?:false|0)\b"
        r"|\bsc(?:\.exe)?\s+(?:stop|config)\s+mpssvc\b)",
        WARN,
        "turning the Windows firewall off",
        platform="windows",
    ),
    Rule(
        "execution-policy-bypass",
        r"(?i)(?:executionpolicy\b" + _REST + r"\b(?:bypass|unrestricted)\b"
        r"|(?:^|\s)[-/](?:ep|ex[a-z]*)[\s:]+(?:bypass|unrestricted)\b)",
        WARN,
        "PowerShell execution policy set to Bypass or Unrestricted",
        platform="windows",
    ),
    Rule(
        "amsi-tamper",
        r"(?i)\bamsi(?:utils|initfailed|scanbuffer|opensession|context|enable|\.dll)\b",
        WARN,
        "tampering with AMSI, the hook that lets antivirus see PowerShell scripts",
        platform="windows",
    ),
    Rule(
        "event-log-clear",
        r"(?i)(?:wevtutil(?:\.exe)?\s+(?:cl|clear-log)\b|\bclear-eventlog\b|\bremove-eventlog\b"
        r"|fsutil(?:\.exe)?\s+usn\s+deletejournal\b)",
        WARN,
        "clearing Windows event logs or the change journal",
        platform="windows",
    ),
    Rule(
        "local-account-backdoor",
        r"(?i)(?:" + _WAT + r"net1?(?:\.exe)?\s+user\s" + _REST + r"/add\b"
        r"|" + _WAT + r"net1?(?:\.exe)?\s+localgroup\s+(?:administrators|remote\sdesktop\susers)\s"
        + _REST + r"/add\b|\bnew-localuser\b|\badd-localgroupmember\b" + _REST
        + r"\badministrators\b)",
        WARN,
        "creating a local account or adding one to Administrators",
        platform="windows",
    ),
    Rule(
        "autostart-persistence",
        r"(?i)(?:(?:\breg(?:\.exe)?\s+(?:add|import|copy)|\bnew-itemproperty|\bset-itemproperty)\b"
        + _REST + r"/currentversion/(?:run|runonce|runservices|runservicesonce|winlogon"
        r"|policies/explorer/run|image\sfile\sexecution\soptions)\b"
        r"|\bschtasks(?:\.exe)?\s+/create\b|\bregister-scheduledtask\b|\bnew-service\b"
        r"|\bsc(?:\.exe)?\s+create\b|/start\smenu/programs/startup\b|\bshell:startup\b)",
        WARN,
        "making a program start automatically (Run keys, scheduled tasks, services, Startup)",
        platform="windows",
    ),
    Rule(
        "acl-takeover",
        r"(?i)(?:" + _WAT + r"takeown(?:\.exe)?\s"
        r"|\bicacls(?:\.exe)?\s" + _REST + r"/grant(?::r)?\s+(?:\*?s-1-1-0|\*?s-1-5-11"
        r"|\*?s-1-5-32-545|everyone|users|authenticated\s?users):(?:\([a-z,]+\))*\(?f\)?"
        + _END + r")",
        WARN,
        "taking ownership of files or granting Everyone full control",
        platform="windows",
    ),
)

#: Every curated rule, in the order `stockade policy rules` lists them.
DEFAULT_RULES: tuple[Rule, ...] = _POSIX_BLOCK + _WINDOWS_BLOCK + _POSIX_WARN + _WINDOWS_WARN
