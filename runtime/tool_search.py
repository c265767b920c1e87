"""The client side of the hosted APIs' tool search: answer a model's tool-search call, made in a
request that defers hundreds of tools, with the tools the Selector picks among them.

- Anthropic Messages: the request's tools carry ``defer_loading: true`` and one non-deferred
  custom tool (``search_tools`` by default) is the search; the model calls it with ``tool_use`` and
  the answer is a ``tool_result`` whose content is one ``{"type": "tool_reference", "tool_name"}``
  block per selected tool (the documented custom tool search: the API expands each reference into
  the deferred definition).
- OpenAI Responses: the request's tools hold ``{"type": "tool_search", "execution": "client"}`` and
  function tools (top level or in namespaces) with ``defer_loading: true``; the model emits a
  ``tool_search_call`` item and the answer is a ``tool_search_output`` item (same ``call_id``,
  ``execution: "client"``, ``status: "completed"``) whose ``tools`` are the request's own
  definitions of the selected tools, namespaced tools inside their namespace.

The search query is the call's ``query`` argument (its string arguments joined when it has none);
the request's conversation is the history. Requests, responses, output items and content blocks may
be the SDKs' own objects (an Anthropic ``Message``, an OpenAI ``Response``: read through
``dialogue.as_mapping``, no SDK imported) as well as plain JSON data. The names the answers carry
are the request's own (already the API's names: a catalog sent through ``magicselector.formats``
maps back with ``formats.catalog_name``). Each deferred catalog is indexed once and kept, by the
hash of its definitions, for the requests that send it again.
"""
from __future__ import annotations

import collections
import json
import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Protocol, Sequence

from .catalog import Catalog, Tool, catalog_digest, parse_tool
from .dialogue import as_mapping as _mapping, plain  # a dict, or an SDK object read by its fields
from .errors import InputError

if TYPE_CHECKING:
    from .selector import Selection, Selector

DEFAULT_SEARCH_TOOL = "search_tools"
# The search tool an Anthropic request defines for the model (non-deferred; the API needs one).
ANTHROPIC_SEARCH_TOOL = {
    "name": DEFAULT_SEARCH_TOOL,
    "description": "Search the deferred tools by what you need to do; the matching tools become callable.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string",
                                                                "description": "the task, in a few words"}},
                     "required": ["query"]},
}
# The client-executed tool search of an OpenAI Responses request.
OPENAI_TOOL_SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Search the deferred tools by what you need to do; the matching tools are loaded.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string",
                                                              "description": "the task, in a few words"}},
                   "required": ["query"], "additionalProperties": False},
}


def _query_of(arguments: Any, where: str) -> str:
    """The search text of a tool-search call's arguments (an object or its JSON text)."""
    arguments = _arguments(arguments, where)
    query = arguments.get("query")
    if isinstance(query, str) and query.strip():
        return query
    words = _string_values(arguments)
    if not any(w.strip() for w in words):
        raise InputError(f"{where}: the tool-search call has no query text")
    return " ".join(words)


def _arguments(arguments: Any, where: str) -> Mapping[str, Any]:
    """A call's arguments as an object: an SDK object read by its fields, JSON text decoded (blank: {})."""
    arguments = _mapping(arguments) if not isinstance(arguments, str) and arguments is not None else arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise InputError(f"{where}: arguments are not valid JSON") from None
    if not isinstance(arguments, Mapping):
        raise InputError(f"{where}: arguments must be an object")
    return arguments


def _string_values(arguments: Mapping[str, Any]) -> list[str]:
    """The strings among the arguments' values and in their lists (e.g. {"queries": [...]} or {"paths": [...]})."""
    words: list[str] = []
    for value in arguments.values():
        if isinstance(value, str):
            words.append(value)
        elif isinstance(value, list):
            words += [v for v in value if isinstance(v, str)]
    return words


def _input_history(request: Mapping[str, Any]) -> Any:
    """A Responses request's ``input`` as a history: a string as one user message, else as given."""
    given = request.get("input", [])
    return [{"role": "user", "content": given}] if isinstance(given, str) else given


def _anthropic_deferred(tool: Any, where: str) -> Tool | None:
    """One Anthropic request tool as a catalog Tool when it is a deferred custom tool, else None."""
    t = _mapping(tool)
    if t is None:
        raise InputError(f"{where}: a tool must be an object")
    if t.get("defer_loading") is not True or t.get("type", "custom") != "custom":
        return None
    return parse_tool({k: t[k] for k in ("name", "description", "input_schema") if k in t}, where=where,
                      check_schemas=True)


def _openai_deferred(defn: Any, where: str, namespace: Mapping[str, Any] | None) -> Tool | None:
    """One Responses function tool (in ``namespace``, or top level) as a catalog Tool when it is
    deferred (itself or by its namespace), else None; a namespaced tool's id is ``namespace.name``."""
    deferred = defn.get("defer_loading") is True or (namespace is not None and namespace.get("defer_loading") is True)
    if defn.get("type") != "function" or not deferred:
        return None
    tool = parse_tool({k: defn[k] for k in ("name", "description", "parameters") if k in defn},
                      where=where, check_schemas=True)
    return tool if namespace is None else _in_namespace(tool, namespace["name"])


def _in_namespace(tool: Tool, namespace: str) -> Tool:
    """A namespaced function: its id ``namespace.name``, its domain the namespace."""
    return Tool(id=f"{namespace}.{tool.name}", name=tool.name, description=tool.description,
                parameters=tool.parameters, domain=namespace)


def _request_functions(tools: list[Any]) -> Iterator[tuple[Any, str, Mapping[str, Any] | None]]:
    """(definition, where, namespace) of every function a Responses request's tools define, in
    order: the top level ones (namespace None) and those inside namespaces (a malformed namespace
    refused when it is reached)."""
    for i, t in enumerate(tools):
        if not (isinstance(t, Mapping) and t.get("type") == "namespace"):
            yield t, f"request.tools[{i}]", None
            continue
        if not isinstance(t.get("name"), str) or not isinstance(t.get("tools"), (list, tuple)):
            raise InputError(f"request.tools[{i}]: a namespace needs a 'name' and a 'tools' list")
        yield from ((member, f"request.tools[{i}].tools[{j}]", t) for j, member in enumerate(t["tools"]))


def _field(value: Any, key: str) -> Any:
    """``value[key]`` of a mapping or of an SDK object read as one; None where ``value`` is neither."""
    fields = _mapping(value)  # a name of its own: None where the value is no mapping
    return fields.get(key) if fields is not None else None


def _is_client_search_call(item: Mapping[str, Any]) -> bool:
    return item.get("type") == "tool_search_call" and item.get("execution", "client") == "client"


def _deferred_functions(tools: list[Any]) -> tuple[list[Tool], dict[str, tuple[str | None, dict[str, Any]]]]:
    """A Responses request's deferred functions as Tools, and per tool id its namespace (or None)
    and its definition as the request gives it."""
    found: list[Tool] = []
    origin: dict[str, tuple[str | None, dict[str, Any]]] = {}
    for defn, where, namespace in _request_functions(tools):
        defn = _mapping(defn)
        if defn is None:
            raise InputError(f"{where}: a tool must be an object")
        tool = _openai_deferred(defn, where, namespace)
        if tool is not None:
            found.append(tool)
            origin[tool.id] = (namespace["name"] if namespace is not None else None, dict(defn))
    return found, origin


def _search_call(call: Any) -> Mapping[str, Any]:
    """A client-executed ``tool_search_call`` item read as a mapping; anything else refused."""
    item = _mapping(call)  # None where it is no mapping
    if not isinstance(item, Mapping) or item.get("type") != "tool_search_call":
        raise InputError("call: expected a {\"type\": \"tool_search_call\", \"call_id\", \"arguments\"} item")
    if item.get("execution", "client") != "client":
        raise InputError("call: a server-executed tool_search_call needs no answer from the client")
    return item


def _tool_use(tool_use: Any) -> Mapping[str, Any]:
    """A ``tool_use`` block (with its id) read as a mapping; anything else refused."""
    block = _mapping(tool_use)  # None where it is no mapping
    if not isinstance(block, Mapping) or block.get("type") != "tool_use" or not isinstance(block.get("id"), str):
        raise InputError("tool_use: expected a {\"type\": \"tool_use\", \"id\", \"name\", \"input\"} block")
    return block


def _has_client_search(tools: list[Any]) -> bool:
    return any(isinstance(t, Mapping) and t.get("type") == "tool_search" and t.get("execution") == "client"
               for t in tools)


class AnthropicMessage(Protocol):
    """What ``answer_anthropic`` reads of a Messages API response given as an object (the SDK's
    ``Message``): its content blocks, each a mapping or an object with ``type``, ``id``, ``name``, ``input``."""

    @property
    def content(self) -> Sequence[Any]: ...


class OpenAIResponse(Protocol):
    """What ``answer_openai`` and ``next_openai_input`` read of a Responses API response given as an
    object (the SDK's ``Response``): its output items, each a mapping or an object with ``type`` ..."""

    @property
    def output(self) -> Sequence[Any]: ...

class ToolSearch:
    """Answers tool-search calls with a Selector's picks. Thread-safe; one per process is enough."""

    def __init__(self, selector: "Selector", *, search_tool: str = DEFAULT_SEARCH_TOOL, max_tools: int | None = None,
                 cache_size: int = 8) -> None:
        self.selector = selector
        self.search_tool = search_tool
        self.max_tools = max_tools
        self._cache: collections.OrderedDict[str, "Selector"] = collections.OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def selector_for(self, catalog: Catalog) -> "Selector":
        """A Selector over ``catalog``, built once per distinct catalog (by its definitions' hash)."""
        key = catalog_digest(catalog) + "\x00" + "\x00".join(catalog.ids)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        built = self.selector.with_catalog(catalog)  # outside the lock: embedding takes a while
        with self._lock:
            self._cache[key] = built
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return built

    def _select(self, catalog: Catalog, query: str, history: Any) -> "Selection":
        # the budget, not a slice: a multi-intent turn keeps one tool per sub-task first
        return self.selector_for(catalog).select(query, history, max_tools=self.max_tools)

    def _cap(self, ids: list[str]) -> list[str]:
        return ids[: self.max_tools] if self.max_tools else ids

    # -- Anthropic ----------------------------------------------------------------------------
    def anthropic_catalog(self, request: Mapping[str, Any]) -> Catalog:
        """The request's deferred tools (``defer_loading: true`` client tools) as a catalog."""
        tools = _field(request, "tools")
        if not isinstance(tools, (list, tuple)):
            raise InputError("request.tools: an Anthropic request needs a 'tools' list")
        deferred = [tool for i, t in enumerate(tools) if (tool := _anthropic_deferred(t, f"request.tools[{i}]"))]
        if not deferred:
            raise InputError("request.tools: no tool has \"defer_loading\": true; nothing to search")
        return Catalog(deferred, source="request.tools")

    def anthropic_result(self, request: Mapping[str, Any], tool_use: Mapping[str, Any],
                         history: Any = None) -> dict[str, Any]:
        """The ``tool_result`` block answering one ``tool_use`` of the search tool."""
        request, block = _mapping(request) or request, _tool_use(tool_use)
        query = _query_of(block.get("input", {}), f"tool_use {block['id']}.input")
        catalog = self.anthropic_catalog(request)
        history = request.get("messages") if history is None else history
        selection = self._select(catalog, query, history)
        refs = [{"type": "tool_reference", "tool_name": catalog.get(i).name} for i in self._cap(selection.ids)]
        return {"type": "tool_result", "tool_use_id": block["id"], "content": refs}

    def answer_anthropic(self, request: Mapping[str, Any], response: Mapping[str, Any] | AnthropicMessage
                         ) -> dict[str, Any]:
        """The user message answering every call of the search tool in a Messages API response
        (a ``tool_result`` block per ``tool_use``). ``response`` may be the SDK's ``Message``."""
        request, content = _mapping(request) or request, _field(response, "content")
        if not isinstance(content, (list, tuple)):
            raise InputError("response.content: an Anthropic response needs a 'content' list")
        calls = [b for b in map(_mapping, content) if b is not None and self._is_search_use(b)]
        if not calls:
            raise InputError(f"response.content: no tool_use of the search tool {self.search_tool!r}")
        history = [*(request.get("messages") or []), {"role": "assistant", "content": list(content)}]
        return {"role": "user", "content": [self.anthropic_result(request, c, history) for c in calls]}

    def _is_search_use(self, block: Mapping[str, Any]) -> bool:
        return block.get("type") == "tool_use" and block.get("name") == self.search_tool

    # -- OpenAI Responses ---------------------------------------------------------------------
    def openai_catalog(self, request: Mapping[str, Any]
                       ) -> tuple[Catalog, dict[str, tuple[str | None, dict[str, Any]]]]:
        """The request's deferred function tools as a catalog, and per tool id its namespace (or
        None) and its definition as the request gives it."""
        given = _field(request, "tools")
        if not isinstance(given, (list, tuple)):
            raise InputError("request.tools: a Responses request needs a 'tools' list")
        tools = [_mapping(t) or t for t in given]
        if not _has_client_search(tools):
            raise InputError("request.tools: no {\"type\": \"tool_search\", \"execution\": \"client\"} tool")
        found, origin = _deferred_functions(tools)
        if not found:
            raise InputError("request.tools: no function tool has \"defer_loading\": true; nothing to search")
        return Catalog(found, source="request.tools"), origin

    def openai_output(self, request: Mapping[str, Any], call: Mapping[str, Any], history: Any = None) -> dict[str, Any]:
        """The ``tool_search_output`` item answering one client-executed ``tool_search_call``."""
        request, item = _mapping(request) or request, _search_call(call)
        query = _query_of(item.get("arguments", {}), f"tool_search_call {item.get('call_id')}.arguments")
        catalog, origin = self.openai_catalog(request)
        if history is None:
            history = _input_history(request)
        selection = self._select(catalog, query, history)
        spaces = {t["name"]: t for t in map(_mapping, request["tools"]) if t is not None and t.get("type") == "namespace"}
        return {"type": "tool_search_output", "call_id": item.get("call_id"), "execution": "client",
                "status": "completed", "tools": _output_tools(self._cap(selection.ids), origin, spaces)}

    def answer_openai(self, request: Mapping[str, Any], response: Mapping[str, Any] | OpenAIResponse
                      ) -> list[dict[str, Any]]:
        """The ``tool_search_output`` items answering every client-executed ``tool_search_call`` of a
        Responses API response (``response`` may be the SDK's ``Response``)."""
        request, output = _mapping(request) or request, _field(response, "output")
        if not isinstance(output, (list, tuple)):
            raise InputError("response.output: a Responses API response needs an 'output' list")
        calls = [o for o in map(_mapping, output) if o is not None and _is_client_search_call(o)]
        if not calls:
            raise InputError("response.output: no client-executed tool_search_call")
        history = [*_input_history(request), *output]
        return [self.openai_output(request, c, history) for c in calls]


def next_openai_input(request: Mapping[str, Any], response: Mapping[str, Any] | OpenAIResponse,
                      outputs: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The ``input`` of the follow-up Responses request when the conversation is sent in full (no
    ``previous_response_id``): the request's input, the response's output items, the answers.
    SDK objects among them (the ``Response``'s output items) come back as plain JSON data."""
    request, response = _mapping(request) or {}, _mapping(response) or {}
    prior = list(_input_history(request))
    return [plain(item) for item in (*prior, *response.get("output", []), *outputs)]


def _output_tools(ids: list[str], origin: dict[str, tuple[str | None, dict[str, Any]]],
                  spaces: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The request's own definitions of the selected tools, namespaced ones inside their namespace
    (one entry per namespace, where its first selected tool ranks)."""
    tools: list[dict[str, Any]] = []
    namespaces: dict[str, dict[str, Any]] = {}
    for tool_id in ids:
        space, defn = origin[tool_id]
        if space is None:
            tools.append(defn)
            continue
        if space not in namespaces:
            namespaces[space] = {"type": "namespace", "name": space,
                                 "description": spaces[space].get("description", ""), "tools": []}
            tools.append(namespaces[space])
        namespaces[space]["tools"].append(defn)
    return tools

