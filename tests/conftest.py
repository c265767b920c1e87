"""Shared fixtures. The real-model bundle is built once per test session from the INT8 MiniLM and
reranker that the package ships (a few seconds on 2 cores)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def home(tmp_path_factory) -> Path:
    """A private MAGICSELECTOR_HOME so tests never touch the user's cache."""
    path = tmp_path_factory.mktemp("home")
    os.environ["MAGICSELECTOR_HOME"] = str(path)
    return path


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory, home) -> Path:
    from magicselector.default_bundle import build_default_bundle  # the shipped models, as users get it

    out = tmp_path_factory.mktemp("bundles") / "phone"
    build_default_bundle(out, progress=False)
    return out


@pytest.fixture(scope="session")
def selector(bundle_dir):
    from magicselector import Selector

    return Selector.from_bundle(bundle_dir)


@pytest.fixture()
def tiny_benchmark(tmp_path) -> Path:
    """A 6-tool benchmark folder with single- and multi-tool queries, one with history."""
    tools = [
        {"id": "set_alarm", "name": "set_alarm", "description": "Set an alarm that rings at a clock time.",
         "parameters": {"type": "object", "properties": {"time": {"type": "string"}}}},
        {"id": "start_timer", "name": "start_timer", "description": "Start a countdown timer for a duration.",
         "parameters": {"type": "object", "properties": {"duration": {"type": "string"}}}},
        {"id": "bluetooth_toggle", "name": "bluetooth_toggle", "description": "Turn Bluetooth on or off.",
         "parameters": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}},
        {"id": "play_music", "name": "play_music", "description": "Play songs, artists, albums or genres.",
         "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
        {"id": "send_email", "name": "send_email", "description": "Send an email message to a recipient.",
         "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}},
        {"id": "get_weather", "name": "get_weather", "description": "Get the weather forecast for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    ]
    queries = [
        {"id": "q1", "history": [], "query": "wake me up at 7", "gold": ["set_alarm"], "category": "single"},
        {"id": "q2", "history": [], "query": "turn on bluetooth and play some jazz",
         "gold": ["bluetooth_toggle", "play_music"], "category": "multi"},
        {"id": "q3", "history": [{"role": "user", "content": "what's the weather in Paris?"},
                                 {"role": "assistant", "content": "Sunny, 21 degrees."}],
         "query": "and tomorrow?", "gold": ["get_weather"], "category": "followup"},
        {"id": "q4", "history": [], "query": "ten minute countdown please", "gold": ["start_timer"], "category": "single"},
    ]
    (tmp_path / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return tmp_path
