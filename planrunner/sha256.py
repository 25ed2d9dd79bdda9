"""SHA-256 without hashlib where possible: hashlib loads OpenSSL, 2-4 ms of a warm run's
start. The caches' keys, checksums and input fingerprints all hash with it."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hashlib import sha256 as sha256
else:
    try:  # the builtin module
        from _sha256 import sha256
    except ImportError:  # Python >= 3.12 names it _sha2; else hashlib's
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256 as sha256

__all__ = ["sha256"]
