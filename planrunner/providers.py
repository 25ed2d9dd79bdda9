"""The arguments of the well-known USDT providers: names and plan types, from their probe
definitions (CPython's Include/pydtrace.d, Ruby's probes.d, PHP's Zend/zend_dtrace.d,
HotSpot's hotspot.d, PostgreSQL's src/backend/utils/probes.d, MySQL/MariaDB's
probes_mysql.d), checked against the operands of the builds of this Debian
(`planrunner list -vv`: python3.11, libruby-3.1, php8.2, OpenJDK 17's libjvm.so,
PostgreSQL 15).

`known_args(provider, probe, count)` -> the arguments, or None when the probe is not in
the table or its note has another number of operands (another version: the operands
then say more than a guess). `planrunner new` names and types a probe's arguments from
here; the bundled plans declare the same names and types (tests/unit/test_providers.py).

A type is the plan's: `string` for a `char *` (read up to its NUL), `pointer` for an
address or id that is no text, an integer type matching the operand's size; None where
the size differs between builds (a C `long` written as a 4-byte operand here): the
operand's own type then. A `char *` that comes with its length (HotSpot's) is a string
of that length.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProviderArg:
    name: str
    type: str | None  # None: typed from the operand (its size differs between builds)
    length: str | None = None  # the argument holding a string's length (`arg3`)


def _args(text: str) -> tuple[ProviderArg, ...]:
    """`"file:string, func:string, line:int32"` -> ProviderArgs; `class:string/arg3` is a
    string whose length is argument 3; `size` alone is typed from its operand."""
    out = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, _, rest = item.partition(":")
        typ, _, length = rest.partition("/")
        out.append(ProviderArg(name, typ or None, f"arg{length}" if length else None))
    return tuple(out)


_CALL = "file:string, func:string, line:int32"
_RB_METHOD = "class:string, method:string, file:string, line:int32"
_RB_AT = "file:string, line:int32"
_PHP_FUNC = "func:string, file:string, line:int32, class:string, scope:string"
_PHP_REQUEST = "file:string, uri:string, method:string"
_JAVA_METHOD = ("java_tid:uint64, class:string/3, class_len:int32, method:string/5, "
                "method_len:int32, signature:string/7, signature_len:int32")
_JAVA_THREAD = ("name:string/2, name_len:int32, java_tid:uint64, native_tid:uint64, "
                "daemon:bool")
_JAVA_MONITOR = "java_tid:uint64, monitor:pointer, class:string/4, class_len:int32"
_JAVA_CLASS_INIT = "class:string/2, class_len:int32, loader:pointer, thread_type:int32"
_JAVA_COMPILE = ("compiler:string/2, compiler_len:uint64, class:string/4, class_len:int32, "
                 "method:string/6, method_len:int32, signature:string/8, signature_len:int32")
_JAVA_COMPILED = ("class:string/2, class_len:int32, method:string/4, method_len:int32, "
                  "signature:string/6, signature_len:int32")
_JAVA_POOL = ("manager:string/2, manager_len:uint64, pool:string/4, pool_len:uint64, "
              "initial:uint64, used:uint64, committed:uint64, max:uint64")
_JAVA_VMOP = "op:string/2, op_len:uint64, mode:int32"
_PG_BLOCK = "fork:int32, block:uint32, tablespace:uint32, database:uint32, relation:uint32"
_PG_LOCK = "database:uint32, relation:uint32, field3:uint32, field4:uint16, locktype:uint8, " \
           "mode:int32"
_PG_LWLOCK = "tranche:string, mode:uint32"

_TABLE: dict[str, dict[str, str]] = {
    "python": {
        "function__entry": _CALL, "function__return": _CALL, "line": _CALL,
        "gc__start": "generation:int32", "gc__done": "collected:int64",
        "import__find__load__start": "module:string",
        "import__find__load__done": "module:string, found:int32",
        "audit": "event:string, args:pointer",
    },
    "ruby": {
        "method__entry": _RB_METHOD, "method__return": _RB_METHOD,
        "cmethod__entry": _RB_METHOD, "cmethod__return": _RB_METHOD,
        "require__entry": f"required:string, {_RB_AT}",
        "require__return": f"required:string, {_RB_AT}",
        "find__require__entry": f"required:string, {_RB_AT}",
        "find__require__return": f"required:string, {_RB_AT}",
        "load__entry": f"loaded:string, {_RB_AT}", "load__return": f"loaded:string, {_RB_AT}",
        "raise": f"class:string, {_RB_AT}", "object__create": f"class:string, {_RB_AT}",
        "array__create": f"size, {_RB_AT}", "hash__create": f"size, {_RB_AT}",
        "string__create": f"size, {_RB_AT}", "symbol__create": f"symbol:string, {_RB_AT}",
        "parse__begin": _RB_AT, "parse__end": _RB_AT,
        "gc__mark__begin": "", "gc__mark__end": "", "gc__sweep__begin": "",
        "gc__sweep__end": "",
    },
    "php": {
        "function__entry": _PHP_FUNC, "function__return": _PHP_FUNC,
        "execute__entry": "file:string, line:int32", "execute__return": "file:string, line:int32",
        "compile__file__entry": "file:string, translated:string",
        "compile__file__return": "file:string, translated:string",
        "request__startup": _PHP_REQUEST, "request__shutdown": _PHP_REQUEST,
        "error": "message:string, file:string, line:int32",
        "exception__thrown": "class:string", "exception__caught": "class:string",
    },
    "hotspot": {
        "method__entry": _JAVA_METHOD, "method__return": _JAVA_METHOD,
        "object__alloc": "java_tid:uint64, class:string/3, class_len:int32, size",
        "class__loaded": "class:string/2, class_len:int32, loader:pointer, shared:bool",
        "class__unloaded": "class:string/2, class_len:int32, loader:pointer, shared:bool",
        "class__initialization__required": _JAVA_CLASS_INIT,
        **{f"class__initialization__{step}": f"{_JAVA_CLASS_INIT}, wait:bool"
           for step in ("clinit", "concurrent", "end", "erroneous", "error", "recursive",
                        "super__failed")},
        "thread__start": _JAVA_THREAD, "thread__stop": _JAVA_THREAD,
        "gc__begin": "full:bool", "gc__end": "",
        "mem__pool__gc__begin": _JAVA_POOL, "mem__pool__gc__end": _JAVA_POOL,
        "monitor__contended__enter": _JAVA_MONITOR, "monitor__contended__entered": _JAVA_MONITOR,
        "monitor__contended__exit": _JAVA_MONITOR, "monitor__notify": _JAVA_MONITOR,
        "monitor__notifyAll": _JAVA_MONITOR, "monitor__waited": _JAVA_MONITOR,
        "monitor__wait": f"{_JAVA_MONITOR}, timeout:int64",
        "method__compile__begin": _JAVA_COMPILE,
        "method__compile__end": f"{_JAVA_COMPILE}, success:bool",
        "compiled__method__load": f"{_JAVA_COMPILED}, code:pointer, code_size:int32",
        "compiled__method__unload": _JAVA_COMPILED,
        "thread__park__begin": "parker:pointer, absolute:int32, time:int64",
        "thread__park__end": "parker:pointer", "thread__unpark": "parker:pointer",
        "thread__sleep__begin": "millis:int64", "thread__sleep__end": "timed_out:int32",
        "thread__yield": "", "vmops__request": _JAVA_VMOP, "vmops__begin": _JAVA_VMOP,
        "vmops__end": _JAVA_VMOP, "vm__init__begin": "", "vm__init__end": "",
        "vm__shutdown": "",
    },
    "postgresql": {
        "query__start": "query:string", "query__done": "query:string",
        "query__parse__start": "query:string", "query__parse__done": "query:string",
        "query__rewrite__start": "query:string", "query__rewrite__done": "query:string",
        "query__plan__start": "", "query__plan__done": "", "query__execute__start": "",
        "query__execute__done": "", "statement__status": "status:string",
        "transaction__start": "lxid:uint32", "transaction__commit": "lxid:uint32",
        "transaction__abort": "lxid:uint32",
        "lock__wait__start": _PG_LOCK, "lock__wait__done": _PG_LOCK, "deadlock__found": "",
        **{f"lwlock__{what}": _PG_LWLOCK
           for what in ("acquire", "acquire__or__wait", "acquire__or__wait__fail",
                        "condacquire", "condacquire__fail", "wait__start", "wait__done")},
        "lwlock__release": "tranche:string",
        "sort__start": "sort_type:int32, unique:int32, nkeys:int32, work_mem:int32, "
                       "random_access:int32, parallel:int32",
        "sort__done": "external:int32, space:int64",
        "buffer__read__start": f"{_PG_BLOCK}, backend:int32, extend:bool",
        "buffer__read__done": f"{_PG_BLOCK}, backend:int32, extend:bool, found:bool",
        "buffer__flush__start": _PG_BLOCK, "buffer__flush__done": _PG_BLOCK,
        "buffer__write__dirty__start": _PG_BLOCK, "buffer__write__dirty__done": _PG_BLOCK,
        "buffer__checkpoint__start": "flags:int32", "buffer__checkpoint__sync__start": "",
        "buffer__checkpoint__done": "", "buffer__sync__start": "total:int32, to_write:int32",
        "buffer__sync__written": "buffer:int32",
        "buffer__sync__done": "total:int32, written:int32, to_write:int32",
        "checkpoint__start": "flags:int32",
        "checkpoint__done": "written:int32, total:int32, wal_added:int32, "
                            "wal_removed:int32, wal_recycled:int32",
        **{f"{what}__checkpoint__{step}": "shutdown:int32"
           for what in ("clog", "subtrans", "multixact") for step in ("start", "done")},
        "twophase__checkpoint__start": "", "twophase__checkpoint__done": "",
        "smgr__md__read__start": f"{_PG_BLOCK}, backend:int32",
        "smgr__md__read__done": f"{_PG_BLOCK}, backend:int32, bytes:int32, requested:int32",
        "smgr__md__write__start": f"{_PG_BLOCK}, backend:int32",
        "smgr__md__write__done": f"{_PG_BLOCK}, backend:int32, bytes:int32, requested:int32",
        "wal__insert": "rmgr:uint8, info:uint8", "wal__switch": "",
        "wal__buffer__write__dirty__start": "", "wal__buffer__write__dirty__done": "",
    },
    "mysql": {  # MariaDB's too
        "query__start": "query:string, connection:uint64, db:string, user:string, "
                        "host:string",
        "query__done": "status:int32",
        "query__parse__start": "query:string", "query__parse__done": "status:int32",
        "connection__start": "connection:uint64, user:string, host:string",
        "connection__done": "status:int32, connection:uint64",
        "command__start": "connection:uint64, command:int32, user:string, host:string",
        "command__done": "status:int32",
    },
}

PROVIDERS: dict[str, dict[str, tuple[ProviderArg, ...]]] = {
    provider: {probe: _args(text) for probe, text in probes.items()}
    for provider, probes in _TABLE.items()}


def known_args(provider: str, probe: str, count: int) -> tuple[ProviderArg, ...] | None:
    """The arguments of `provider:probe` when the table has it with `count` of them."""
    args = PROVIDERS.get(provider, {}).get(probe)
    return args if args is not None and len(args) == count else None
