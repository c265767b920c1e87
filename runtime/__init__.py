"""magicselector: on-device tool selection for phone assistants.

    from magicselector import Selector
    selector = Selector.from_bundle()            # the default bundle, built and cached on first use
    selection = selector.select("turn on bluetooth and play some jazz")
    print([t.name for t in selection.tools], selection.k, selection.timings_ms)
"""
import os as _os

# OpenMP runtimes read their wait policy once, when they load: usearch's (numkong's libgomp) loads
# with the index, llama.cpp's with the LLM decomposer. Spinning workers slow the 2-thread LLM by an
# order of magnitude on a busy phone-class CPU (docs/bench/decomposition.md), so ask for passive
# waits before either loads, unless the user chose a policy.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .bundle import Bundle, default_bundle_dir  # noqa: E402
from .catalog import Catalog, Tool, load_catalog, load_catalogs, load_phone_catalog, mcp_catalog, tool_text
from .config import InputLimits, LLMDecomposerConfig, SelectorConfig
from .default_bundle import ensure_default_bundle
from .errors import BundleError, CatalogError, InputError, MagicSelectorError, UnknownToolError
from .selector import Ranking, SelectedTool, Selection, Selector
from .stages.cut import Cut, CutConfig, CutRule

__version__ = "0.1.0"

__all__ = [
    "Bundle", "BundleError", "Catalog", "CatalogError", "Cut", "CutConfig", "CutRule", "InputError", "InputLimits",
    "LLMDecomposerConfig", "MagicSelectorError", "Ranking", "SelectedTool", "Selection", "Selector",
    "SelectorConfig", "Tool", "UnknownToolError", "default_bundle_dir", "ensure_default_bundle", "load_catalog",
    "load_catalogs", "load_phone_catalog", "mcp_catalog", "tool_text",
]
