"""planrunner: trace user-space programs from declarative plans."""

__version__ = "0.1.0"
