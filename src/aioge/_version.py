"""aioge's version, in a leaf module: code inside the package reads it from here, never from
the package root (which imports the session and everything under it)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
