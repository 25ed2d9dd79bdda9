"""planrunner: trace user-space programs from declarative plans."""

from planrunner import dataclass_cache

__version__ = "0.1.0"

# before any class of the package is made: their methods' code is kept between runs
dataclass_cache.install()
