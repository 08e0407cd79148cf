"""The version of every rljob distribution (operator, SDK, kubectl plugin, bed): one number, so
the four always install in step. `rljob` itself is a namespace package the four share."""

__version__ = "0.1.0"
