"""``LiveCatalog``: a Selector's mutable part (catalog, dense index, lexical index, version) under one lock, its run-time changes and its saving as a bundle."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .catalog import Catalog, Tool, check_tool, check_tool_id, tool_text
from .dialogue import check_text
from .errors import BundleError, InputError
from .stages.index import ToolIndex
from .stages.lexical import LexicalIndex

if TYPE_CHECKING:
    from .bundle import Bundle


class LiveCatalog:
    """The catalog a Selector searches and the indexes built from it, changed at run time under one
    lock (``add``, ``remove``) so that no turn reads a catalog and an index that disagree.
    Selectors made by ``with_config`` share one, so a tool added through any of
    them is seen by all. ``version`` counts the changes (``Selection.catalog_version``)."""

    def __init__(self, catalog: Catalog, index: ToolIndex, lexical: LexicalIndex | None) -> None:
        missing = [i for i in catalog.ids if i not in index]  # ids only: a packed catalog decodes no tool
        if missing or len(index) != len(catalog):
            raise BundleError(f"index and catalog disagree ({len(index)} vs {len(catalog)} tools; "
                              f"e.g. {missing[:3]} not indexed)")
        self.catalog = catalog
        self.index = index
        self.lexical = lexical  # built from the catalog on first use when None (``lexical_index``)
        # BM25's parameters, kept for a rebuild (``lexical_index``) after the index was dropped
        self.lexical_params: dict[str, Any] = lexical.params if lexical is not None else {}
        self.version = 0
        self.lock = threading.RLock()
        # (tool id, format) -> (the Tool, its definition's tokens): a hit only for the same Tool object,
        # so a tool replaced under the same id is counted afresh
        self.tokens: dict[tuple[str, str], tuple[Tool, int]] = {}

    def lexical_index(self) -> LexicalIndex:
        """The BM25 index of the catalog's tool texts (the bundle's, else built now, once)."""
        with self.lock:
            if self.lexical is None:
                self.lexical = LexicalIndex.from_catalog(self.catalog, **self.lexical_params)
            return self.lexical

    def add(self, tool: Tool | dict[str, Any], embed: Callable[[list[str]], np.ndarray]) -> None:
        """Add a tool (a Tool or an MCP / benchmark dict, checked), or replace the one with its id;
        ``embed`` gives its vector, outside the lock."""
        tool = check_tool(tool, self.catalog)  # bounded and checked: else InputError
        for name in ("id", "name", "description"):
            if not isinstance(getattr(tool, name), str):
                raise InputError(f"tool {tool.id!r}: {name} must be a string")
            check_text(getattr(tool, name), f"tool {tool.id!r}: {name}")
        vec = embed([tool_text(tool)])
        with self.lock:
            check_tool(tool, self.catalog)  # the name again, under the lock: a racing add may have taken it
            catalog = self.catalog.with_tool(tool)
            replaced = self.index.vectors([tool.id]) if tool.id in self.index else None
            self.index.add([tool.id], vec)  # all or nothing: a refused add changes no index
            try:
                if self.lexical is not None:
                    self.lexical.add(tool.id, tool_text(tool))
            except BaseException:
                self._undo_index(tool.id, replaced)
                raise
            self.catalog = catalog
            self.version += 1

    def remove(self, tool_id: str) -> None:
        """Remove the tool with this id (UnknownToolError naming it when there is none)."""
        check_tool_id(tool_id)  # a non-string id is an InputError, not a TypeError from a dict lookup
        with self.lock:
            catalog = self.catalog.without(tool_id)  # raises UnknownToolError with the id
            removed = self.index.vectors([tool_id])
            self.index.remove(tool_id)
            try:
                if self.lexical is not None:
                    self.lexical.remove(tool_id)
            except BaseException:
                self._undo_index(tool_id, removed)
                raise
            self.catalog = catalog
            self.version += 1

    def _undo_index(self, tool_id: str, vector: np.ndarray | None) -> None:
        """Put the dense index back as it was before a change to ``tool_id`` whose lexical half
        failed (the tool's earlier vector, or none), so that a failed change loses nothing; the
        lexical index may be half-changed, so it is dropped and built again from the catalog, with
        the same parameters, on first use."""
        if vector is None:
            self.index.remove(tool_id)
        else:
            self.index.add([tool_id], vector)
        self.lexical = None

    def schema_tokens(self, tool: Tool, format: str) -> int:
        """The tokens of ``tool``'s definition in ``format`` (``tokens.schema_tokens``), cached per Tool."""
        from .formats import tool_definition
        from .tokens import schema_tokens

        hit = self.tokens.get((tool.id, format))
        if hit is not None and hit[0] is tool:
            return hit[1]
        count = schema_tokens(tool_definition(tool, format))
        self.tokens[(tool.id, format)] = (tool, count)
        return count

    def save(self, bundle: Bundle, path: str | Path, signing_key: Any = None, release: int | None = None
             ) -> dict[str, Any]:
        """This catalog as it is now, its index and its lexical index written as a bundle at ``path``
        with the models and probes of ``bundle`` (``bundle_writer.rewrite_bundle``: built aside and
        swapped into place); returns the manifest."""
        from .bundle_writer import rewrite_bundle

        def snapshot(write: Callable[[Catalog, ToolIndex, LexicalIndex | None], dict[str, Any]]) -> dict[str, Any]:
            with self.lock:  # catalog, index and lexical index as one state
                return write(self.catalog, self.index, self.lexical)

        return rewrite_bundle(bundle, path, snapshot=snapshot, signing_key=signing_key, release=release)
