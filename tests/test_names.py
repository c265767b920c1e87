"""Tool names on the wire (magicselector.names): every name MCP allows, and the names older servers
send, go out under the APIs' rule through one reversible, deterministic, collision-free mapping."""
import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magicselector import InputError, Tool, UnknownToolError
from magicselector.formats import FORMATS, catalog_name, tool_definitions
from magicselector.names import WIRE_NAME, NameMap, wire_name

API_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's function names; Anthropic's tool names
API_FORMATS = [f for f in FORMATS if f != "mcp"]


def tools(*names):
    return [Tool(id=f"t{i}", name=n, description=f"tool {n}") for i, n in enumerate(names)]


def test_legal_names_go_out_unchanged_and_others_are_mapped_and_back():
    for fmt in API_FORMATS:
        assert wire_name("set_alarm", fmt) == "set_alarm"
        assert wire_name("a" * 64, fmt) == "a" * 64
    assert wire_name("ws__files.read", "mcp") == "ws__files.read"  # MCP takes its own names
    dotted = wire_name("ws__files.read", "openai")
    assert API_RULE.match(dotted) and dotted.startswith("ws__files_read_") and len(dotted) == len("ws__files_read_") + 8
    assert wire_name("ws__files.read", "anthropic") == dotted  # one rule, one name in every API format
    long = wire_name("srv__" + "x" * 123, "openai")  # 128 characters: MCP's longest
    assert API_RULE.match(long) and len(long) == 64 and long.startswith("srv__xxx")
    for odd in ("My Tool", "créer_événement", "a/b:c", "工具", "tool,with,commas", "-"):  # older servers
        assert API_RULE.match(wire_name(odd, "anthropic")), odd
    # deterministic: the same name gives the same wire name (no process salt: SHA-256, not hash())
    assert wire_name("ws__files.read") == wire_name("ws__files.read")
    assert dotted.endswith(hashlib.sha256(b"ws__files.read").hexdigest()[:8])
    with pytest.raises(InputError, match="format must be one of"):
        wire_name("x", "gemini")
    with pytest.raises(InputError, match="non-empty string"):
        wire_name("", "openai")


def test_a_name_map_never_gives_two_tools_one_wire_name():
    dotted = wire_name("files.read")
    # a tool literally named as the other's wire name keeps its name; the changed one takes a longer hash
    catalog = tools(dotted, "files.read", "files/read", "files read")
    names = NameMap(catalog, "openai")
    wires = [names.wire(t.name) for t in catalog]
    assert len(set(wires)) == 4 and all(API_RULE.match(w) for w in wires)
    assert wires[0] == dotted and wires[1] != dotted and wires[1].startswith("files_read_")
    assert [names.catalog_name(w) for w in wires] == [t.name for t in catalog]
    assert [names.tool(w).id for w in wires] == ["t0", "t1", "t2", "t3"]
    # the same set in another order gives the same names
    again = NameMap(list(reversed(catalog)), "anthropic")
    assert [again.wire(t.name) for t in catalog] == wires
    with pytest.raises(UnknownToolError, match="no tool goes out as 'nope'"):
        names.catalog_name("nope")
    with pytest.raises(UnknownToolError):
        names.wire("not in the map")


def test_catalog_name_maps_a_called_name_back_through_tool_definitions():
    catalog = tools("ws__files.read", "get_weather", "srv__" + "y" * 100, "notes.create")
    for fmt in API_FORMATS:
        defs = tool_definitions(catalog, fmt)
        sent = [d["function"]["name"] if fmt == "openai" else d["name"] for d in defs]
        assert all(API_RULE.match(n) for n in sent) and len(set(sent)) == len(sent)
        assert [catalog_name(n, catalog) for n in sent] == [t.name for t in catalog]
    assert sent[1] == "get_weather"
    assert catalog_name("ws__files.read", catalog) == "ws__files.read"  # an MCP client calls the name itself
    assert catalog_name(sent[0], ["ws__files.read", "x"]) == "ws__files.read"  # names work as well as Tools
    with pytest.raises(UnknownToolError, match="ws__files_read"):
        catalog_name("ws__files_read", catalog)


mcp_name = st.text(alphabet="ABCabcxyz019_-.", min_size=1, max_size=128)  # what MCP allows
old_name = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=128)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(names=st.lists(st.one_of(mcp_name, old_name), min_size=1, max_size=12, unique=True))
def test_every_name_round_trips_under_the_api_rule(names):
    catalog = tools(*names)
    for fmt in ("openai", "anthropic"):
        m = NameMap(catalog, fmt)
        wires = [m.wire(n) for n in names]
        assert all(WIRE_NAME.match(w) for w in wires)
        assert len(set(wires)) == len(wires)
        assert [m.catalog_name(w) for w in wires] == names
        assert all(w == n for w, n in zip(wires, names) if API_RULE.match(n))
