import json

import pytest

from magicselector import CatalogError, load_catalog, load_phone_catalog, tool_text


def test_shipped_phone_catalog_is_large_and_varied():
    catalog = load_phone_catalog()
    assert len(catalog) >= 200
    domains = {t.domain for t in catalog}
    assert len(domains) >= 20
    names = {t.name for t in catalog}
    # Families of easily confused tools are the point of the product.
    for family in (["set_alarm", "start_timer", "create_reminder", "create_calendar_event"],
                   ["bluetooth_toggle", "bluetooth_connect_device"],
                   ["send_sms", "send_chat_message", "send_email"]):
        assert set(family) <= names, family
    for tool in catalog:
        assert tool.description and len(tool.description) >= 20, tool.name
        assert tool.parameters.get("type") == "object", tool.name


def test_tool_text_is_readable():
    tool = load_phone_catalog().get("set_alarm")
    text = tool_text(tool)
    assert text.startswith("set alarm: ") and "(parameters:" in text


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("entry, message", [
    ({"description": "no name"}, "no 'name'"),
    ({"name": "", "description": "x"}, "no 'name'"),
    ({"name": "bad\nname", "description": "x"}, "characters"),
    ({"name": "x" * 200, "description": "x"}, "characters"),
    ({"name": "a", "description": 5}, "'description' must be a string"),
    ({"name": "a", "description": "x", "inputSchema": []}, "must be a JSON object"),
    ({"name": "a", "description": "x", "inputSchema": {"properties": []}}, "'properties' must be an object"),
    ("just a string", "must be a JSON object"),
])
def test_malformed_entries_are_named(tmp_path, entry, message):
    path = write(tmp_path, "cat.json", [entry])
    with pytest.raises(CatalogError, match=message) as err:
        load_catalog(path)
    assert "cat.json[0]" in str(err.value)


def test_duplicate_names_and_bad_files(tmp_path):
    dup = [{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]
    with pytest.raises(CatalogError, match="duplicate tool"):
        load_catalog(write(tmp_path, "dup.json", dup))
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_catalog(write(tmp_path, "broken.json", "{nope"))
    with pytest.raises(CatalogError, match="no tools"):
        load_catalog(write(tmp_path, "empty.json", []))
    with pytest.raises(CatalogError, match="no such"):
        load_catalog(tmp_path / "missing.json")


def test_jsonl_catalog_allows_repeated_names_with_distinct_ids(tmp_path):
    rows = [{"id": "f-1", "name": "f", "description": "one"}, {"id": "f-2", "name": "f", "description": "two"}]
    path = write(tmp_path, "tools.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    cat = load_catalog(path)
    assert cat.ids == ["f-1", "f-2"]
    rows.append({"id": "f-1", "name": "g", "description": "three"})
    write(tmp_path, "tools.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CatalogError, match="duplicate tool id"):
        load_catalog(path)
