"""The directory both caches keep their entries in (runtime/compile_cache.py's
programs, `KEY.bpf`; planrunner/run_cache.py's runs, `KEY.run` and `KEY.params`):
bytes by name, trusted only as far as the directory and the file are this user's and
closed to others, written whole (a temporary file renamed), the oldest pruned past
MAX_ENTRIES; and the seal every entry carries (magic, format version, SHA-256 of the
body). What an entry means is its cache's business: nothing here decodes one.

- Entries live in $PLANRUNNER_CACHE_DIR, else $XDG_CACHE_HOME/planrunner/programs
  (when that directory is the user's), else ~/.cache/planrunner/programs with ~ the
  effective user's home (root's is /root, even under a sudo that kept $HOME);
  directories 0700, files 0600. A directory or file not owned by the user, or open to
  others, is not trusted (warning; the run compiles).
- Set PLANRUNNER_CACHE_LOG=1 to see hits, misses and stores on stderr.

Pure stdlib.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import TextIO

from planrunner.sha256 import sha256

_HEADER = struct.Struct("<8sI32s")  # magic, format version, sha256 of the body
MAX_ENTRIES = 128  # entries kept (programs and runs); the oldest (by last use) go first
DIR_ENV = "PLANRUNNER_CACHE_DIR"
LOG_ENV = "PLANRUNNER_CACHE_LOG"


def seal(magic: bytes, version: int, body: bytes) -> bytes:
    """An entry: magic, format version and the body's SHA-256, then the body (both
    cache levels' files)."""
    return _HEADER.pack(magic, version, sha256(body).digest()) + body


def unseal(blob: bytes, magic: bytes, version: int, what: str) -> bytes:
    """The body of an entry sealed with `magic` and `version`; raises ValueError
    saying what is wrong with it (`what`: the kind of entry, for that message)."""
    if len(blob) < _HEADER.size:
        raise ValueError("truncated header")
    got_magic, got_version, digest = _HEADER.unpack_from(blob)
    if got_magic != magic:
        raise ValueError(f"not a planrunner {what}")
    if got_version != version:
        raise ValueError(f"format version {got_version}, expected {version}")
    body = blob[_HEADER.size:]
    if sha256(body).digest() != digest:
        raise ValueError("checksum mismatch")
    return body


# --- the directory --------------------------------------------------------------------

# Paths here are strings: pathlib (with urllib.parse and ipaddress) was ~3 ms of every
# warm run's start.

def _home() -> str:
    """The effective user's home from the password database: under sudo, $HOME may
    still be the invoking user's, and root must not write its cache there."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def default_dir() -> str:
    env = os.environ.get(DIR_ENV)
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = os.path.join(_home(), ".cache")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is ignored
        try:
            mine = os.stat(xdg).st_uid == os.geteuid()
        except OSError:
            mine = False
        if mine:  # another user's (sudo kept the variable): ours instead
            base = xdg
    return os.path.join(base, "planrunner", "programs")


def _makedirs_private(path: str) -> None:
    """mkdir -p with 0700 at every level created (os.makedirs gives the parents the
    umask's mode); a umask can only narrow it."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o077


class EntryStore:
    """Entries of one directory; every failure to read or write is a warning at most,
    never an error of the run."""

    def __init__(self, directory: str | os.PathLike[str], stderr: TextIO) -> None:
        self.dir = os.fspath(directory)
        self.stderr = stderr
        self.log = os.environ.get(LOG_ENV, "") not in ("", "0")

    def note(self, msg: str) -> None:
        if self.log:
            self.stderr.write(f"planrunner: cache: {msg}\n")

    def warn(self, msg: str) -> None:
        self.stderr.write(f"planrunner: warning: {msg}\n")

    def _usable_dir(self, create: bool) -> bool:
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            if not create:
                return False
            try:
                _makedirs_private(self.dir)
                st = os.lstat(self.dir)
            except OSError as exc:
                self.warn(f"cannot create the program cache {self.dir}: {exc.strerror}")
                return False
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or not _private(st):
            self.warn(f"not using the program cache {self.dir}: it must be a directory "
                      "of this user, closed to others (chmod 700)")
            return False
        return True

    def read_entry(self, name: str) -> bytes | None:
        """The bytes of entry `name` when it is a private file of this user in a private
        directory; None when absent or not to be trusted (said on stderr)."""
        path = os.path.join(self.dir, name)
        if not self._usable_dir(create=False):
            return None
        try:  # the entry is opened in the directory checked, not one put there since
            dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not _private(os.fstat(dfd)):
                self.warn(f"not using the program cache {self.dir}: it must be a directory "
                          "of this user, closed to others (chmod 700)")
                return None
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.warn(f"cannot read the cache entry {path}: {exc.strerror}; compiling")
            return None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _private(st):
                self.warn(f"ignoring the cache entry {path}: not a private file of this "
                          "user; compiling")
                return None
            with os.fdopen(fd, "rb", closefd=False) as fh:
                blob = fh.read()
        finally:
            os.close(fd)
        try:
            os.utime(path)  # last use, for pruning
        except OSError:
            pass
        return blob

    def write_entry(self, name: str, data: bytes) -> None:
        if not self._usable_dir(create=True):
            return
        import tempfile  # noqa: PLC0415 - cold runs only (warm ones skip its 1.6 ms import)

        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".part")  # 0600
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, os.path.join(self.dir, name))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            self.warn(f"cannot write the program cache {self.dir}: {exc.strerror}")
            return
        self.note(f"stored {name[:16]} ({len(data)} bytes)")
        self._prune()

    def discard_entry(self, name: str, why: str) -> None:
        self.warn(f"compiled-program cache entry {os.path.join(self.dir, name)} {why}; removed, "
                  "compiling again")
        self.remove_entry(name)

    def remove_entry(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.dir, name))
        except OSError:
            pass

    def _prune(self) -> None:
        try:
            entries = [(e.stat().st_mtime_ns, e.path) for e in os.scandir(self.dir)
                       if e.name.endswith((".bpf", ".run")) and not e.name.startswith(".")]
        except OSError:
            return
        entries.sort()
        for _mtime, path in entries[:max(0, len(entries) - MAX_ENTRIES)]:
            try:
                os.unlink(path)
            except OSError:
                pass
