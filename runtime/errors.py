"""Errors raised by magicselector. Every error says what is wrong and with which input."""


class MagicSelectorError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(MagicSelectorError, ValueError):
    """A query, history or argument that cannot be used as given."""


class CatalogError(MagicSelectorError, ValueError):
    """A tool catalog that is malformed (names the file and the entry)."""


class BundleError(MagicSelectorError):
    """A bundle that is missing, incomplete or does not match its manifest."""


class ModelError(MagicSelectorError):
    """A model file (e.g. the decomposer's GGUF) that is missing, truncated, altered or unloadable."""


class UnknownToolError(MagicSelectorError, KeyError):
    """A tool id that the catalog or index does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "unknown tool"
