"""State-machine-driven multi-turn phone-assistant dialogue generator (after MTDTool, paper 3.1).

The generator turns per-domain templates (``data/mobile/domains/<domain>.json``, format in
``TEMPLATES.md``) and the shipped phone catalog (``magicselector/catalogs/phone/<domain>.json``)
into a retrieval benchmark of multi-turn dialogues.  Every user turn is annotated with its atomic,
reference-resolved tasks and the gold tools that serve them.

How a dialogue is built
-----------------------
* Turn 0 is a *new request* in one of three composition modes: a single tool, a multi-tool
  collaboration (a ``scenes`` combination) or several independent intents in one utterance.
  Each tool of the request draws an initial interaction state from ``P_INIT`` restricted to the
  states the tool supports (``compatible_states``).
* At every later turn r >= 1 a context decision is taken first: *switch* with probability
  ``P_switch(r) = max(p_min, p0 * alpha**(r-1))`` (a new request in another domain; the old
  context is dropped), otherwise *inherit*.  When inheriting, every active tool draws a user
  intent ``d ~ P_TODO[previous state]`` and then an execution outcome ``s ~ P_TASK[d]``
  (both tables are restricted to what the tool supports and renormalised).  Tools whose intent is
  ``drop`` (done and not followed up, silent, cancelled, abandoned) leave the context.  New tasks
  can be injected into an inheriting turn (same domain: ``new_task``; another domain:
  ``topic_switch``), and are forced when no active tool has anything left to say.
* The user utterance is assembled from one clause per mentioned tool, joined with natural
  connectors.  The assistant reply is driven by the outcome states (Appendix A): success confirms,
  failure explains, executing reports progress, ask_detail asks the template's question, select
  lists options, silent tools are not mentioned.  That reply restates the task in the catalog's
  words ("echo", the default); ``assistant_turns="realistic"`` writes what real transcripts carry
  instead (tool results with IDs, times, codes and slot values, short confirmations; the
  assistant's clarifying questions unchanged), drawn from a stream of its own so that the user
  turns, gold and categories are those of "echo" for the same seed.

Anti-memorisation: every phrasing list and slot-value list is split deterministically, by a hash
of each entry's text, into a training part (~70%) and a held-out part (~30%).  Training dialogues
only use training parts; dev/test/test_ood only use held-out parts (lists with fewer than three
entries are used whole by every split).

Everything is driven by ``random.Random`` instances seeded from the config; the same config
gives byte-identical files.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------

STATES = (
    "success", "failure", "executing", "ask_detail", "select", "silent",
    "cancel", "modify", "new_task", "topic_switch", "continuation",
)
#: states after which the tool's task is complete (the assistant confirms it)
DONE_STATES = ("success", "modify", "continuation", "new_task", "topic_switch")

FIRST_TURN_CATEGORIES = ("single_tool", "multi_tool", "multi_intent")
MULTI_TURN_CATEGORIES = (
    "ask_detail_answer", "select", "modify", "cancel", "continuation", "failure_retry",
    "executing_check", "new_task", "topic_switch", "mixed",
)
CATEGORIES = FIRST_TURN_CATEGORIES + MULTI_TURN_CATEGORIES
SPLITS = ("train", "dev", "test", "test_ood")

SHARED_SLOT_NAMES = (
    "time", "date", "duration", "contact", "city", "place", "address", "message", "topic",
    "amount", "number", "percent", "language", "phrase", "song", "artist", "genre", "playlist",
    "podcast_show", "app", "event_title", "reminder_text", "restaurant", "dish", "product",
    "device_name", "room", "temperature", "file_name", "note_text", "email_subject",
)
FOLLOWUP_KINDS = ("modify", "cancel", "continuation")

#: Initial state prior P_init(s | t) for a tool of a new request (restricted to S_t).
P_INIT: dict[str, float] = {
    "success": 0.42, "ask_detail": 0.16, "select": 0.12,
    "failure": 0.10, "executing": 0.10, "silent": 0.10,
}

#: User-intent table P_todo(d | previous state).  Intents:
#:   answer   - answer the assistant's ask-detail question with the missing slot
#:   pick     - choose one of the options the assistant offered
#:   retry    - ask to try a failed task again (possibly with another slot value)
#:   check    - ask about a task that is still executing ("is it done yet?")
#:   modify / cancel / continue - a template follow-up of that kind on a completed task
#:   drop     - say nothing more about the tool: it leaves the context (null state)
P_TODO: dict[str, dict[str, float]] = {
    "ask_detail":   {"answer": 0.90, "drop": 0.10},
    "select":       {"pick": 0.90, "drop": 0.10},
    "failure":      {"retry": 0.65, "drop": 0.35},
    "executing":    {"check": 0.55, "drop": 0.45},
    "success":      {"modify": 0.24, "cancel": 0.12, "continue": 0.20, "drop": 0.44},
    "new_task":     {"modify": 0.24, "cancel": 0.12, "continue": 0.20, "drop": 0.44},
    "topic_switch": {"modify": 0.24, "cancel": 0.12, "continue": 0.20, "drop": 0.44},
    "modify":       {"modify": 0.10, "cancel": 0.15, "continue": 0.10, "drop": 0.65},
    "continuation": {"modify": 0.12, "cancel": 0.10, "continue": 0.10, "drop": 0.68},
    "silent":       {"drop": 1.0},
    "cancel":       {"drop": 1.0},
}

#: Execution-outcome table P_task(s | d).  ``None`` is the null state (the tool leaves).
#: ``new_task`` / ``topic_switch`` are the intents of tools injected into an inheriting turn
#: (same domain / another domain); their success outcome carries the intent's name.
P_TASK: dict[str, dict[str | None, float]] = {
    "answer":   {"success": 0.76, "failure": 0.12, "executing": 0.12},
    "pick":     {"success": 0.76, "failure": 0.12, "executing": 0.12},
    "retry":    {"success": 0.75, "failure": 0.12, "executing": 0.13},
    "check":    {"success": 0.60, "executing": 0.40},
    "modify":   {"modify": 0.85, "failure": 0.10, "executing": 0.05},
    "cancel":   {"cancel": 1.0},
    "continue": {"continuation": 0.85, "failure": 0.10, "executing": 0.05},
    "new_task": {"new_task": 0.48, "ask_detail": 0.16, "select": 0.11,
                 "failure": 0.09, "executing": 0.09, "silent": 0.07},
    "topic_switch": {"topic_switch": 0.48, "ask_detail": 0.16, "select": 0.11,
                     "failure": 0.09, "executing": 0.09, "silent": 0.07},
    "drop":     {None: 1.0},
}

#: category label of the phenomenon each intent produces in a user turn
INTENT_CATEGORY = {
    "answer": "ask_detail_answer", "pick": "select", "retry": "failure_retry",
    "check": "executing_check", "modify": "modify", "cancel": "cancel",
    "continue": "continuation", "new_task": "new_task", "topic_switch": "topic_switch",
}

#: intents whose utterances refer to their tool only implicitly: at most one of each per turn
BARE_INTENTS = ("check", "retry", "pick")
MODE_WEIGHTS = {"single_tool": 0.45, "multi_tool": 0.25, "multi_intent": 0.30}
P_INJECT = 0.30           # chance of injecting a new task into an inheriting turn
P_INJECT_OTHER_DOMAIN = 0.25
P_THANKS = 0.10           # a "thanks" exchange kept in history (never emitted as a query)
MAX_RETRIES = 2
MAX_CHECKS = 2
MAX_CLAUSES = 4
HOLDOUT_FRACTION = 0.30

# ---------------------------------------------------------------------------------------------
# Built-in phrasings (every list is split train / held-out like the template lists)
# ---------------------------------------------------------------------------------------------

ANSWER_SAY = [
    "{value}", "{value}, please", "make it {value}", "{value} works", "let's say {value}",
    "uh, {value}", "it's {value}", "go with {value}", "{value} should do", "I'd say {value}",
    "hmm, {value} I guess", "{value} is fine", "oh, {value}", "just {value}",
]
PICK_ORDINAL_SAY = [
    "the {ord} one", "{ord} one", "number {num}", "go with the {ord}", "the {ord}, please",
    "let's do the {ord} one", "I'll take the {ord} one", "option {num}", "the {ord} sounds good",
    "hmm, the {ord}",
]
PICK_VALUE_SAY = [
    "the {value} one", "the one with {value}", "{value}", "{value}, that one",
    "the one that says {value}", "I meant {value}", "{value} please", "definitely {value}",
]
RETRY_SAY = [
    "try again", "can you try that again?", "give it another shot", "one more time, please",
    "please retry", "try once more", "hmm, try it again", "let's try that again",
    "could you give it another go?", "again please", "retry that for me", "go ahead and try again",
]
RETRY_VALUE_SAY = [
    "try it with {value} instead", "then try {value}", "how about {value} instead?",
    "ok, use {value} then", "let's go with {value} instead", "fine, {value} then",
    "try {value} instead", "maybe {value} works", "switch it to {value} and try again",
]
CHECK_SAY = [
    "is it done yet?", "how's that going?", "did it go through?", "any update on that?",
    "still working on it?", "is that finished?", "what's the status?", "is it ready?",
    "how much longer?", "has that gone through yet?", "are you done with that?",
    "did that work?",
]
THANKS_SAY = [
    "thanks", "thank you!", "great, thanks", "perfect, thank you", "cool, thanks a lot",
    "awesome, cheers", "nice, thanks", "thanks, that's all for now", "appreciate it",
    "lovely, thank you",
]
#: joins inside one sentence ("X, and Y")
INLINE_CONNECTORS = [
    ", and {c}", " and {c}", ", and also {c}", ", then {c}", ", and while you're at it, {c}",
    ", plus {c}", " and then {c}", ", oh and {c}", ", also {c}", ", and after that {c}",
]
#: joins that start a new sentence ("X. Also, Y")
SENTENCE_CONNECTORS = [
    "also, {c}", "oh, and {c}", "and {c}", "then {c}", "while you're at it, {c}",
    "plus, {c}", "by the way, {c}", "oh and {c}", "one more thing, {c}", "also {c}",
    "and also, {c}", "after that, {c}", "{c}",
]

A_SUCCESS = [
    "Okay, I'll {task}.", "All set, I took care of the request to {task}.",
    "Got it, I've handled that for you.", "No problem, that's done: {task}.",
    "Done, that's taken care of.", "Sure thing, I went ahead and did that.",
    "Alright, that's done.", "You're all set.", "Done: {task}.",
    "Sure, I'll {task} right away.", "That's all sorted.", "Okay, done.",
]
A_FAILURE = [
    "Sorry, I couldn't {task} right now.", "Hmm, something went wrong when I tried to {task}.",
    "I wasn't able to {task}. The app isn't responding.",
    "That didn't go through, I couldn't {task}.",
    "Sorry, there was a problem trying to {task}.",
    "Unfortunately I ran into an error while trying to {task}.",
    "I tried to {task}, but it failed.", "Sorry, that one failed. I couldn't {task}.",
]
A_EXECUTING = [
    "I'm working on that now.", "On it, I'm starting to {task}. It might take a moment.",
    "Give me a second, I'm trying to {task}.", "That's in progress, I'll let you know when it's done.",
    "Working on it, this may take a minute.", "Hang on, I'm getting that started.",
    "I've started to {task}, it's still running.", "Okay, that's underway.",
]
A_STILL = [
    "It's still in progress.", "Not yet, still working on it.", "Almost there, still processing.",
    "Still going, give it a moment.", "Not quite, it's still running.",
    "It's taking a bit longer than usual, still on it.",
]
A_CHECK_DONE = [
    "Yes, that's finished now.", "It just finished, you're all set.", "Yep, it went through.",
    "Yes, all done.", "It's done now.", "Yes, that completed successfully.",
]
A_CANCEL = [
    "Okay, cancelled.", "Done, I've cancelled it.", "Sure, it's cancelled.",
    "Alright, that's been called off.", "No problem, I've undone that.",
    "Okay, consider it cancelled.", "Got it, it's cancelled.",
]
A_WELCOME = [
    "You're welcome!", "Anytime.", "Happy to help.", "No problem!", "Glad I could help.",
    "Sure thing.", "My pleasure.",
]
A_JOIN = ["Also, {c}", "And {c}", "{c}", "{c}", "Meanwhile, {c}", "As for the other thing, {c}"]
A_OPTIONS_FALLBACK = ["I found a few options: {options}. Which one?"]

# -- realistic assistant turns (``assistant_turns="realistic"``) -----------------------------
# Real assistant turns carry what the tool returned (IDs, times, amounts, lists of options, status
# snippets) and short confirmations; they rarely restate the request in the catalog's words.
# {id} {time} {pct} {eta} {secs} {code} {n} are drawn per reply; {value} is one of the turn's slot
# values; {list} a few values of one of the tool's slots, each with a number, id or time.
R_DONE = [
    "Done. Ref {id}.", "Done ({id}).", "All set, confirmation #{id}.", "Okay, done.", "Done.",
    "Confirmed: {value}, {time}.", "Got it: {value}.", "Saved at {time}, id {id}.",
    '{"status": "ok", "id": "{id}"}', '{"ok": true, "ref": "{id}", "at": "{time}"}',
    "Success, id={id}.", "Finished at {time}.", "Okay. Confirmation: {id}.",
    "Sure, {value} it is. Anything else?", "That went through at {time} (ref {id}).",
    "Updated: {value}.", "Yep, {n} change(s) applied.", "Sure thing. ID {id}.",
]
R_LOOKUP = [
    "Here's what I found: {list}.", "{n} results: {list}.", "Top matches: {list}.",
    "I see {list}.", "Results: {list}. Want details on any of them?", "Showing {list}.",
    "Here you go: {list}.", "Looks like {list}.", "{n} found: {list}.",
    "Latest: {value}, updated {time}.", "{value}: {n} entries, last at {time}.",
    '{"count": {n}, "items": [{list}]}', "Found these: {list}.", "Closest: {list}.",
]
R_FAILURE = [
    "Error {code}: the service is unavailable.", "That failed with code {code}. Want me to retry?",
    "Request timed out after {secs} s.", '{"status": "error", "code": {code}}',
    "Couldn't complete it: server returned {code}.", "No luck, error {code}.",
    "It didn't go through (request {id}).", "The app returned an error ({code}).",
    "Hmm, that failed. Error {code}, request {id}.", "Timed out. Should I try again?",
    "Failed: network unreachable.", "Sorry, error {code} on my side.",
]
R_EXECUTING = [
    "Started, job {id}. About {eta}.", "In progress ({pct}%).", "Queued as {id}.",
    "Running now, should take {eta}.", '{"status": "pending", "job": "{id}"}',
    "Working on it, {pct}% so far.", "Kicked off at {time}, I'll update you.",
    "Processing, ref {id}.", "On it. ETA {eta}.", "Started at {time}.",
]
R_STILL = [
    "Still running: {pct}% done.", "Not yet, {pct}% complete.", "Status: pending ({pct}%).",
    "About {eta} left.", "Still processing job {id}.", "Not done yet, ETA {eta}.",
    '{"status": "running", "progress": {pct}}', "Nope, {pct}% so far.",
]
R_CHECK_DONE = [
    "Yes, finished at {time}.", "Completed. Ref {id}.", "Done as of {time}.",
    "Yep, status: complete ({id}).", '{"status": "done", "id": "{id}"}',
    "It went through at {time}.", "Yes, all done ({id}).", "Finished {eta} ago.",
]
R_CANCEL = [
    "Cancelled. Ref {id}.", "Done, {id} is off.", "Okay, it's off.", "Called off at {time}.",
    '{"status": "cancelled", "id": "{id}"}', "Reverted.", "Undone (ref {id}).", "Okay, stopped.",
]
R_JOIN = ["{c}", "{c}", "Also: {c}", "And {c}", "Next one: {c}", "Other one: {c}", "Then: {c}"]
#: how one entry of a {list} result looks ({v} a slot value, {x} a number, id or time)
R_LIST_ITEM = ["{v} ({x})", "{v} - {x}", "{v}, {x}", '{"name": "{v}", "id": "{x}"}', "{v} [{x}]"]
#: tools whose first name word reads data: their success reply is a result list or value
LOOKUP_VERBS = {"get", "list", "search", "find", "check", "read", "show", "view", "track",
                "detect", "recognize", "define", "translate", "scan"}
ASSISTANT_TURNS = ("echo", "realistic")

ORDINALS = ["first", "second", "third"]
NUMBERS = ["one", "two", "three"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_STRIP_WORDS = (
    "for", "at", "to", "in", "on", "about", "with", "from", "of", "called", "named", "by", "that",
    "saying", "as", "into", "near", "around", "until", "under", "the", "my", "a", "an", "titled",
    "labelled", "labeled", "using", "via", "through", "like",
)
_ARTICLES = ("the", "my", "a", "an")
_I_WORDS = ("I", "I'm", "I'd", "I'll", "I've")


def p_switch(r: int, p0: float = 0.10, alpha: float = 0.85, p_min: float = 0.01) -> float:
    """Topic-switch probability at turn ``r >= 1``: ``max(p_min, p0 * alpha**(r-1))`` (eq. 2)."""
    if r < 1:
        raise ValueError("p_switch is defined for turns r >= 1")
    return max(p_min, p0 * alpha ** (r - 1))


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 0
    dialogues: int = 1200
    max_turns: int = 6
    ood_domains: tuple[str, ...] = ("podcasts", "ride_hailing", "smart_home", "travel")
    dev_fraction: float = 0.1
    test_fraction: float = 0.2
    p0: float = 0.10
    alpha: float = 0.85
    p_min: float = 0.01
    catalog_dir: str | Path | None = None      # None: the shipped magicselector/catalogs/phone
    templates_dir: str | Path | None = None    # None: the shipped data/mobile/domains
    ood_fraction: float = 0.15                 # share of dialogues built from OOD domains
    #: "echo": assistant turns restate the task (the shipped splits); "realistic": tool results
    #: with IDs, times and values, short confirmations (clarifying questions unchanged). Only the
    #: assistant turns differ: user turns, gold and categories are those of "echo".
    assistant_turns: str = "echo"


def default_catalog_dir() -> Path:
    from magicselector.catalog import PHONE_CATALOG_DIR

    return PHONE_CATALOG_DIR


def default_templates_dir() -> Path:
    return Path(__file__).resolve().parent / "domains"


def shared_slots_file() -> Path:
    return Path(__file__).resolve().parent / "slots.json"


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------

@dataclass
class ToolTemplate:
    name: str
    domain: str           # catalog domain of the tool
    file: str             # template file it came from
    task: str
    say: list[str]
    missing: dict | None
    options: dict | None
    followups: list[dict]
    slots: dict[str, list[str]]   # domain-specific slots of the template file


@dataclass
class Bank:
    catalog: dict[str, list[dict]]          # domain -> catalog tools (file order)
    tool_domain: dict[str, str]             # tool -> domain
    templates: dict[str, ToolTemplate]      # tool -> template
    scenes: list[tuple[str, ...]]
    shared: dict[str, list[str]]
    warnings: list[str] = field(default_factory=list)


def _placeholders(text: str) -> list[str]:
    return list(dict.fromkeys(_PLACEHOLDER.findall(text)))


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read JSON ({exc})") from exc


def _str_list(value: Any, where: str, *, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
        raise ValueError(f"{where}: expected a list of non-empty strings")
    if not value and not allow_empty:
        raise ValueError(f"{where}: list is empty")
    return [x.strip() for x in value]


def load_shared_slots(path: Path | None = None) -> dict[str, list[str]]:
    path = Path(path) if path else shared_slots_file()
    data = _load_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of slot lists")
    out = {}
    for name, values in data.items():
        out[name] = _str_list(values, f"{path}: slot '{name}'")
    missing = [s for s in SHARED_SLOT_NAMES if s not in out]
    if missing:
        raise ValueError(f"{path}: shared slots missing: {', '.join(missing)}")
    return out


def load_catalog(catalog_dir: Path) -> tuple[dict[str, list[dict]], dict[str, str]]:
    catalog_dir = Path(catalog_dir)
    files = sorted(catalog_dir.glob("*.json"))
    if not files:
        raise ValueError(f"{catalog_dir}: no catalog files (*.json)")
    catalog: dict[str, list[dict]] = {}
    tool_domain: dict[str, str] = {}
    for path in files:
        data = _load_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
            raise ValueError(f"{path}: expected {{'domain': ..., 'tools': [...]}}")
        domain = data.get("domain")
        if domain != path.stem:
            raise ValueError(f"{path}: 'domain' is {domain!r}, expected {path.stem!r}")
        tools = []
        for i, tool in enumerate(data["tools"]):
            where = f"{path}: tools[{i}]"
            if not isinstance(tool, dict):
                raise ValueError(f"{where}: expected an object")
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}: missing 'name'")
            where = f"{path}: tool '{name}'"
            if not isinstance(tool.get("description"), str):
                raise ValueError(f"{where}: missing 'description'")
            if not isinstance(tool.get("inputSchema"), dict):
                raise ValueError(f"{where}: missing 'inputSchema' object")
            if name in tool_domain:
                raise ValueError(f"{where}: duplicate tool name (also in {tool_domain[name]}.json)")
            tool_domain[name] = domain
            tools.append(tool)
        catalog[domain] = tools
    return catalog, tool_domain


class _SlotCheck:
    """Raises for a ``{placeholder}`` that names no slot of the template file (or the shared slots)."""

    def __init__(self, known: set[str]) -> None:
        self.known = known

    def __call__(self, text: str, where: str, extra: Sequence[str] = ()) -> None:
        for ph in _placeholders(text):
            if ph not in self.known and ph not in extra:
                raise ValueError(f"{where}: unknown slot '{{{ph}}}'")


def _domain_slots(path: Path, data: dict, warnings: list[str]) -> dict[str, list[str]]:
    """The template file's own slots (``slots``: name -> values), warning about short lists."""
    slots_raw = data.get("slots", {})
    if not isinstance(slots_raw, dict):
        raise ValueError(f"{path}: 'slots' must be an object of lists")
    dslots = {k: _str_list(v, f"{path}: slots['{k}']") for k, v in slots_raw.items()}
    for k, v in dslots.items():
        if len(v) < 8:
            warnings.append(f"{path.name}: slot '{k}' has only {len(v)} values (>= 8 expected)")
    return dslots


def _parse_missing(entry: dict, where: str, fname: str, name: str, task_slots: list[str],
                   check: _SlotCheck, warnings: list[str]) -> dict | None:
    """``missing`` ({slot, say, ask}): the ask-detail state's phrasings, or None where it cannot run."""
    missing = entry.get("missing")
    if missing is None:
        return None
    if not isinstance(missing, dict) or not isinstance(missing.get("slot"), str):
        raise ValueError(f"{where} missing: expected {{'slot', 'say', 'ask'}}")
    if missing["slot"] not in check.known:
        raise ValueError(f"{where} missing: unknown slot '{missing['slot']}'")
    m_say = _str_list(missing.get("say"), f"{where} missing.say")
    m_ask = _str_list(missing.get("ask"), f"{where} missing.ask")
    for s in m_say + m_ask:
        check(s, f"{where} missing '{s}'")
    missing = {"slot": missing["slot"], "say": m_say, "ask": m_ask}
    bad = [s for s in m_say if missing["slot"] in _placeholders(s)]
    if bad:
        warnings.append(f"{fname}: '{name}' missing.say mentions the missing slot "
                        f"'{missing['slot']}' ({bad[0]!r}); those phrasings are skipped")
        missing["say"] = [s for s in m_say if s not in bad]
    if missing["slot"] not in task_slots:
        warnings.append(f"{fname}: '{name}' missing.slot '{missing['slot']}' is not "
                        f"in its task; ask-detail disabled")
        return None
    return missing if missing["say"] else None


def _parse_options(entry: dict, where: str, fname: str, name: str, task_slots: list[str],
                   check: _SlotCheck, warnings: list[str]) -> dict | None:
    """``options`` ({slot, ask}): the select state's question, or None where it cannot run."""
    options = entry.get("options")
    if options is None:
        return None
    if not isinstance(options, dict) or not isinstance(options.get("slot"), str):
        raise ValueError(f"{where} options: expected {{'slot', 'ask'}}")
    if options["slot"] not in check.known:
        raise ValueError(f"{where} options: unknown slot '{options['slot']}'")
    o_ask = _str_list(options.get("ask"), f"{where} options.ask")
    for s in o_ask:
        check(s, f"{where} options '{s}'", extra=("options",))
    options = {"slot": options["slot"], "ask": o_ask}
    if not any("{options}" in s for s in o_ask):
        warnings.append(f"{fname}: '{name}' options.ask never lists {{options}}")
    if options["slot"] not in task_slots:
        warnings.append(f"{fname}: '{name}' options.slot '{options['slot']}' is not "
                        f"in its task; select disabled")
        return None
    return options


def _parse_followups(entry: dict, where: str, tool_domain: dict[str, str], check: _SlotCheck) -> list[dict]:
    """``followups``: the turns that can come next ({kind, tool, say, task} each)."""
    followups = []
    fl = entry.get("followups", [])
    if not isinstance(fl, list):
        raise ValueError(f"{where} followups: expected a list")
    for j, fu in enumerate(fl):
        fw = f"{where} followups[{j}]"
        if not isinstance(fu, dict):
            raise ValueError(f"{fw}: expected an object")
        if fu.get("kind") not in FOLLOWUP_KINDS:
            raise ValueError(f"{fw}: kind must be one of {FOLLOWUP_KINDS}")
        ftool = fu.get("tool")
        if not isinstance(ftool, str) or ftool not in tool_domain:
            raise ValueError(f"{fw}: tool {ftool!r} not in the catalog")
        f_say = _str_list(fu.get("say"), f"{fw} say")
        f_task = fu.get("task")
        if not isinstance(f_task, str) or not f_task.strip():
            raise ValueError(f"{fw}: missing 'task'")
        for s in f_say + [f_task]:
            check(s, f"{fw} '{s}'")
        followups.append({"kind": fu["kind"], "tool": ftool, "say": f_say, "task": f_task.strip()})
    return followups


def _parse_tool_template(path: Path, name: str, entry: Any, domain: str, tool_domain: dict[str, str],
                         templates: dict[str, ToolTemplate], dslots: dict[str, list[str]],
                         check: _SlotCheck, warnings: list[str]) -> ToolTemplate:
    """One tool's entry of a template file: its task, phrasings, ask-detail, select and follow-ups."""
    where = f"{path}: tool '{name}'"
    if name not in tool_domain:
        raise ValueError(f"{where}: not in the catalog")
    if tool_domain[name] != domain:
        warnings.append(f"{path.name}: tool '{name}' belongs to catalog "
                        f"{tool_domain[name]}.json")
    if name in templates:
        raise ValueError(f"{where}: tool already has a template in {templates[name].file}")
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object")
    task = entry.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ValueError(f"{where}: missing 'task'")
    task = task.strip()
    check(task, f"{where} task")
    say = _str_list(entry.get("say"), f"{where} say")
    for s in say:
        check(s, f"{where} say '{s}'")
    if len(say) < 6:
        warnings.append(f"{path.name}: '{name}' has only {len(say)} say phrasings")
    task_slots = _placeholders(task)
    missing = _parse_missing(entry, where, path.name, name, task_slots, check, warnings)
    options = _parse_options(entry, where, path.name, name, task_slots, check, warnings)
    followups = _parse_followups(entry, where, tool_domain, check)
    return ToolTemplate(name=name, domain=tool_domain[name], file=path.name, task=task, say=say,
                        missing=missing, options=options, followups=followups, slots=dslots)


def _file_scenes(path: Path, data: dict, tool_domain: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    """The template file's ``scenes`` (tools that work together), as (file name, tools) pairs."""
    scenes = data.get("scenes", [])
    if not isinstance(scenes, list):
        raise ValueError(f"{path}: 'scenes' must be a list of tool lists")
    out = []
    for j, sc in enumerate(scenes):
        if not isinstance(sc, list) or not all(isinstance(t, str) for t in sc):
            raise ValueError(f"{path}: scenes[{j}]: expected a list of tool names")
        for t in sc:
            if t not in tool_domain:
                raise ValueError(f"{path}: scenes[{j}]: tool '{t}' not in the catalog")
        out.append((path.name, tuple(dict.fromkeys(sc))))
    return out


def _usable_scenes(raw_scenes: list[tuple[str, tuple[str, ...]]], templates: dict[str, ToolTemplate],
                   warnings: list[str]) -> list[tuple[str, ...]]:
    """The scenes whose every tool has a template and that hold two tools or more, without repeats."""
    scenes: list[tuple[str, ...]] = []
    for fname, sc in raw_scenes:
        untemplated = [t for t in sc if t not in templates]
        if untemplated:
            warnings.append(f"{fname}: scene {list(sc)} uses tools without templates "
                            f"({', '.join(untemplated)}); skipped")
            continue
        if len(sc) < 2:
            warnings.append(f"{fname}: scene {list(sc)} has fewer than two tools; skipped")
            continue
        if sc not in scenes:
            scenes.append(sc)
    return scenes


def load_templates(templates_dir: Path, tool_domain: dict[str, str], catalog_domains,
                   shared: dict[str, list[str]]):
    """Every template file of ``templates_dir`` (format: ``TEMPLATES.md``), validated against the
    catalog: (tool -> ToolTemplate, the usable scenes, warnings). A broken file raises ValueError
    naming the file, tool and field; a questionable one adds a warning."""
    templates_dir = Path(templates_dir)
    files = sorted(templates_dir.glob("*.json"))
    if not files:
        raise ValueError(f"{templates_dir}: no template files (*.json)")
    templates: dict[str, ToolTemplate] = {}
    raw_scenes: list[tuple[str, tuple[str, ...]]] = []
    warnings: list[str] = []
    for path in files:
        data = _load_json(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected an object")
        domain = data.get("domain")
        if domain != path.stem:
            raise ValueError(f"{path}: 'domain' is {domain!r}, expected {path.stem!r}")
        if domain not in catalog_domains:
            raise ValueError(f"{path}: no catalog file for domain {domain!r}")
        dslots = _domain_slots(path, data, warnings)
        check = _SlotCheck(set(shared) | set(dslots))
        tools = data.get("tools")
        if not isinstance(tools, dict) or not tools:
            raise ValueError(f"{path}: 'tools' must be a non-empty object")
        for name, entry in tools.items():
            templates[name] = _parse_tool_template(path, name, entry, domain, tool_domain, templates, dslots,
                                                   check, warnings)
        raw_scenes.extend(_file_scenes(path, data, tool_domain))
    return templates, _usable_scenes(raw_scenes, templates, warnings), warnings


def load_bank(config: GeneratorConfig) -> Bank:
    catalog_dir = Path(config.catalog_dir) if config.catalog_dir else default_catalog_dir()
    templates_dir = Path(config.templates_dir) if config.templates_dir else default_templates_dir()
    shared = load_shared_slots()
    catalog, tool_domain = load_catalog(catalog_dir)
    templates, scenes, warnings = load_templates(templates_dir, tool_domain, catalog, shared)
    return Bank(catalog=catalog, tool_domain=tool_domain, templates=templates, scenes=scenes,
                shared=shared, warnings=warnings)


# ---------------------------------------------------------------------------------------------
# Train / held-out partition of every list
# ---------------------------------------------------------------------------------------------

def _hash_fraction(text: str) -> float:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


_PARTITION_CACHE: dict[tuple[str, ...], tuple[list[str], list[str]]] = {}


def partition(values) -> tuple[list[str], list[str]]:
    """Split a list into (train part, held-out part) by a hash of each entry's text.

    An entry is held out when its hash fraction is below ``HOLDOUT_FRACTION``; the count is then
    clamped (by hash rank, never by position) so that both parts are non-empty and the training
    part keeps at least half of the list.  Lists with fewer than 3 distinct entries are not split:
    both parts are the whole list.
    """
    key = tuple(values)
    hit = _PARTITION_CACHE.get(key)
    if hit is not None:
        return hit
    uniq = list(dict.fromkeys(key))
    n = len(uniq)
    if n < 3:
        res = (uniq, uniq)
    else:
        frac = {v: _hash_fraction(v) for v in uniq}
        ranked = sorted(uniq, key=lambda v: (frac[v], v))
        n_held = sum(1 for v in uniq if frac[v] < HOLDOUT_FRACTION)
        lo = 1 if n < 6 else 2
        hi = n - (n + 1) // 2
        n_held = min(max(n_held, lo), hi)
        held = set(ranked[:n_held])
        res = ([v for v in uniq if v not in held], [v for v in uniq if v in held])
    _PARTITION_CACHE[key] = res
    return res


def part_of(values, part: str) -> list[str]:
    train, held = partition(values)
    return train if part == "train" else held


# ---------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------

def _fill(text: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _clean(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])\s*([,.;:!?])", r"\2", text)
    return text.strip(" ,;:")


def resolve_task(task_tmpl: str, values: dict[str, str]) -> str:
    """Fill a task template; slots without a value are removed with their lead-in words."""
    lead = "|".join(_STRIP_WORDS)
    preps = "|".join(w for w in _STRIP_WORDS if w not in _ARTICLES)
    text = task_tmpl
    for ph in _placeholders(task_tmpl):
        if ph in values:
            continue
        slot = r"\s*['\"]?\{%s\}['\"]?(?:'s)?" % re.escape(ph)
        # a slot used like an adjective ("the {room} thermostat") keeps its article
        text = re.sub(r"(?:\s*\b(?:%s)\b)*%s(?=\s+(?!(?:%s)\b)[A-Za-z])" % (preps, slot, lead),
                      "", text, flags=re.IGNORECASE)
        text = re.sub(r"(?:\s*\b(?:%s)\b)*%s" % (lead, slot), "", text, flags=re.IGNORECASE)
    text = _clean(_fill(text, values))
    return text.rstrip(" .,;:")


_PERSON = {"me": "you", "my": "your", "mine": "yours", "myself": "yourself", "i": "you",
           "i'm": "you're", "i've": "you've", "i'll": "you'll", "i'd": "you'd", "we": "you",
           "us": "you", "our": "your", "ours": "yours", "we're": "you're", "let's": "let's"}


def second_person(task_tmpl: str) -> str:
    """Rewrite the literal words of a task template from the user's to the assistant's view
    ("remind me to {x}" -> "remind you to {x}"); slot values are left untouched."""
    def swap_words(chunk: str) -> str:
        return re.sub(r"[A-Za-z']+", lambda m: _PERSON.get(m.group(0).lower(), m.group(0))
                      if m.group(0).lower() in _PERSON else m.group(0), chunk)
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", task_tmpl)
    return "".join(p if p.startswith("{") else swap_words(p) for p in parts)


_VERBATIM_SLOTS = {"message", "phrase", "note_text", "email_subject", "song", "playlist",
                   "event_title", "file_name", "podcast_show", "restaurant", "topic", "word"}


def _swappable(slot: str) -> bool:
    """Slot values that are not quoted verbatim get "my" -> "your" in assistant replies."""
    if slot in _VERBATIM_SLOTS:
        return False
    return slot == "reminder_text" or not any(w in slot for w in ("message", "note", "text",
                                                                 "phrase", "title", "name"))


def _swap_values(value: str) -> str:
    table = {"my": "your", "me": "you", "mine": "yours", "myself": "yourself"}
    return re.sub(r"\b(my|me|mine|myself)\b", lambda m: table[m.group(1)], value)


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    if first in _I_WORDS or first.rstrip(",.?!") in _I_WORDS:
        return text
    if len(first) > 1 and any(c.isupper() for c in first[1:]):
        return text
    return text[:1].lower() + text[1:]


def _cap(text: str) -> str:
    first = text.split(" ", 1)[0]
    if len(first) > 1 and any(c.isupper() for c in first[1:]):
        return text
    return text[:1].upper() + text[1:]


_QUESTION_WORDS = {
    "what", "what's", "whats", "which", "who", "who's", "whose", "when", "when's", "where",
    "where's", "why", "how", "how's", "is", "are", "am", "was", "were", "do", "does", "did",
    "can", "could", "will", "would", "should", "shall", "may", "any", "anything", "have", "has",
    "isn't", "aren't", "don't", "doesn't", "didn't", "won't",
}


def _end_mark(sentence: str) -> str:
    """'?' when the sentence reads as a question, '.' otherwise."""
    words = re.findall(r"[A-Za-z']+", sentence.lower())
    return "?" if words and words[0] in _QUESTION_WORDS or \
        (len(words) > 1 and words[0] in ("so", "and", "also", "oh", "hey", "um", "uh")
         and words[1] in _QUESTION_WORDS) else "."


def _options_text(options: list[str]) -> str:
    if len(options) == 1:
        return options[0]
    return ", ".join(options[:-1]) + " or " + options[-1]


# ---------------------------------------------------------------------------------------------
# Dialogue construction
# ---------------------------------------------------------------------------------------------

@dataclass
class Item:
    """A tool in the dialogue context."""
    tmpl: ToolTemplate              # anchor template (its follow-ups apply)
    tool: str                       # the tool that currently serves the task
    task_tmpl: str
    values: dict[str, str]
    state: str | None = None
    pending: str | None = None      # slot asked for (ask_detail)
    opt_slot: str | None = None     # select state
    options: list[str] | None = None
    own_choice: str | None = None   # the user's own value among the options, if any
    retries: int = 0
    checks: int = 0

    @property
    def task(self) -> str:
        return resolve_task(self.task_tmpl, self.values)

    @property
    def task_for_reply(self) -> str:
        """The task as the assistant words it (second person)."""
        vals = {k: (_swap_values(v) if _swappable(k) else v) for k, v in self.values.items()}
        return resolve_task(second_person(self.task_tmpl), vals)


@dataclass
class Clause:
    text: str
    lowerable: bool
    item: Item
    tool: str
    task: str
    category: str | None     # phenomenon (None inside a plain new request)
    short: bool = False      # bare answer/pick: followed by a new sentence


class DialogueBuilder:
    def __init__(self, bank: Bank, config: GeneratorConfig, rng: random.Random, part: str,
                 ood: bool, ood_domains: list[str], arng: random.Random | None = None):
        self.bank = bank
        self.cfg = config
        self.rng = rng
        # realistic assistant turns draw from their own stream, so that the dialogue itself
        # (user turns, gold, categories) is the one "echo" gives for the same seed
        self.arng = arng if arng is not None else random.Random(0)
        self.a_phrasings: list[tuple[str, str]] = []
        self.part = part
        self.ood = ood
        self.ood_domains = ood_domains
        if ood:
            self.allowed_tools = list(bank.templates)
        else:
            self.allowed_tools = [t for t, tp in bank.templates.items()
                                  if tp.domain not in ood_domains]
        allowed = set(self.allowed_tools)
        self.allowed_set = allowed
        self.domains = list(dict.fromkeys(bank.templates[t].domain for t in self.allowed_tools))
        self.by_domain: dict[str, list[str]] = {}
        for t in self.allowed_tools:
            self.by_domain.setdefault(bank.templates[t].domain, []).append(t)
        self.scenes = [sc for sc in bank.scenes if all(t in allowed for t in sc)]
        self.phrasings: list[tuple[str, str]] = []   # (text, part) of every list entry used
        self.dialogue_used: set[str] = set()
        self.active: list[Item] = []
        self.focus: str | None = None

    # -- sampling helpers ------------------------------------------------------------------
    def pick(self, lst: list[str], require: str | None = None) -> str:
        pool = part_of(lst, self.part)
        if require:
            pool = [x for x in pool if require in x] or pool
        used = {t for t, _ in self.phrasings}
        pool = [x for x in pool if x not in used] or pool   # no repeats within one turn
        pool = [x for x in pool if x not in self.dialogue_used] or pool  # nor in the dialogue
        text = self.rng.choice(pool)
        self.dialogue_used.add(text)
        self.phrasings.append((text, self.phrasing_tag(lst)))
        return text

    def phrasing_tag(self, lst: list[str]) -> str:
        """Which part a phrasing drawn from ``lst`` belongs to: "all" for a list too short to split."""
        train, held = partition(lst)
        return "all" if train is held or train == held else self.part

    def slot_pool(self, slot: str, tmpl: ToolTemplate) -> list[str]:
        values = tmpl.slots.get(slot) or self.bank.shared.get(slot)
        if not values:
            raise ValueError(f"{tmpl.file}: tool '{tmpl.name}': unknown slot '{slot}'")
        return values

    def value(self, slot: str, tmpl: ToolTemplate, avoid=()) -> str:
        lst = self.slot_pool(slot, tmpl)
        pool = part_of(lst, self.part)
        cands = [v for v in pool if v not in avoid] or pool
        v = self.rng.choice(cands)
        return v

    def sample_values(self, text: str, tmpl: ToolTemplate, base=None, avoid=None) -> dict:
        out = {}
        for ph in _placeholders(text):
            av = ()
            if avoid and ph in avoid:
                av = (avoid[ph],)
            out[ph] = self.value(ph, tmpl, av)
        return out

    def draw(self, dist: dict, allowed) -> Any:
        items = [(k, p) for k, p in dist.items() if k in allowed and p > 0]
        if not items:
            return None
        total = sum(p for _, p in items)
        x = self.rng.random() * total
        for k, p in items:
            x -= p
            if x < 0:
                return k
        return items[-1][0]

    # -- compatibility -----------------------------------------------------------------------
    def followups(self, tmpl: ToolTemplate, kind: str) -> list[dict]:
        return [f for f in tmpl.followups if f["kind"] == kind and
                (self.bank.tool_domain[f["tool"]] not in self.ood_domains or self.ood)]

    def select_phrases(self, tmpl: ToolTemplate) -> tuple[list[str], bool]:
        """Phrasings for a select-state request, and whether they omit the options slot."""
        slot = tmpl.options["slot"]
        cands = []
        if tmpl.missing and tmpl.missing["slot"] == slot:
            cands += tmpl.missing["say"]
        cands += [s for s in tmpl.say if slot not in _placeholders(s)]
        if cands:
            return cands, True
        return tmpl.say, False

    def compatible_states(self, tmpl: ToolTemplate) -> set[str]:
        """S_t: the interaction states tool ``tmpl`` supports in this dialogue."""
        states = {"success", "failure", "executing", "silent", "new_task", "topic_switch"}
        if tmpl.missing:
            states.add("ask_detail")
        if tmpl.options and len(part_of(self.slot_pool(tmpl.options["slot"], tmpl), self.part)) >= 2:
            states.add("select")
        for kind in FOLLOWUP_KINDS:
            if self.followups(tmpl, kind):
                states.add(kind)
        return states

    def allowed_intents(self, item: Item) -> set[str]:
        compat = self.compatible_states(item.tmpl)
        out = {"drop"}
        if item.state == "ask_detail" and item.pending:
            out.add("answer")
        if item.state == "select" and item.options:
            out.add("pick")
        if item.state == "failure" and item.retries < MAX_RETRIES:
            out.add("retry")
        if item.state == "executing" and item.checks < MAX_CHECKS:
            out.add("check")
        if item.state in DONE_STATES:
            for kind, intent in (("modify", "modify"), ("cancel", "cancel"),
                                 ("continuation", "continue")):
                if kind in compat:
                    out.add(intent)
        return out

    # -- clauses ---------------------------------------------------------------------------------
    def request_clause(self, tmpl: ToolTemplate, state: str, category: str | None) -> Clause:
        """A clause that newly asks for ``tmpl``'s task; ``state`` is its outcome."""
        item = Item(tmpl=tmpl, tool=tmpl.name, task_tmpl=tmpl.task, values={}, state=state)
        if state == "ask_detail":
            phrase = self.pick(tmpl.missing["say"])
            item.values = self.sample_values(phrase, tmpl)
            item.values.pop(tmpl.missing["slot"], None)
            item.pending = tmpl.missing["slot"]
        elif state == "select":
            slot = tmpl.options["slot"]
            phrases, omits = self.select_phrases(tmpl)
            phrase = self.pick(phrases)
            item.values = self.sample_values(phrase, tmpl)
            pool = part_of(self.slot_pool(slot, tmpl), self.part)
            k = min(len(pool), self.rng.choice((2, 3, 3)))
            if omits or slot not in item.values:
                item.values.pop(slot, None)
                opts = self.rng.sample(pool, k)
            else:
                own = item.values.pop(slot)
                others = [v for v in pool if v != own]
                opts = self.rng.sample(others, min(k - 1, len(others))) + [own]
                self.rng.shuffle(opts)
                item.own_choice = own
            item.opt_slot, item.options = slot, opts
        else:
            phrase = self.pick(tmpl.say)
            item.values = self.sample_values(phrase, tmpl)
        text = _fill(phrase, item.values)
        if state == "select" and item.own_choice:
            text = _fill(phrase, {**item.values, item.opt_slot: item.own_choice})
        lowerable = not phrase.startswith("{")
        return Clause(text=text, lowerable=lowerable, item=item, tool=item.tool,
                      task=item.task, category=category)

    def intent_clause(self, item: Item, intent: str) -> Clause:
        """A clause for an active tool's intent; updates the item (tool, task, values)."""
        tmpl = item.tmpl
        short = False
        lowerable = True
        if intent == "answer":
            slot = item.pending
            val = self.value(slot, tmpl)
            phrase = self.pick(ANSWER_SAY)
            text = _fill(phrase, {"value": val})
            item.values[slot] = val
            item.pending = None
            short, lowerable = True, not phrase.startswith("{")
        elif intent == "pick":
            if item.own_choice and item.own_choice in item.options:
                idx = item.options.index(item.own_choice)
            else:
                idx = self.rng.randrange(len(item.options))
            val = item.options[idx]
            if self.rng.random() < 0.5:
                phrase = self.pick(PICK_ORDINAL_SAY)
                text = _fill(phrase, {"ord": ORDINALS[idx], "num": NUMBERS[idx]})
            else:
                phrase = self.pick(PICK_VALUE_SAY)
                text = _fill(phrase, {"value": val})
                lowerable = not phrase.startswith("{")
            item.values[item.opt_slot] = val
            item.options = item.opt_slot = item.own_choice = None
            short = True
        elif intent == "retry":
            changeable = [s for s in _placeholders(item.task_tmpl) if s in item.values
                          and len(part_of(self.slot_pool(s, tmpl), self.part)) >= 2]
            if changeable and self.rng.random() < 0.35:
                slot = self.rng.choice(changeable)
                val = self.value(slot, tmpl, avoid=(item.values[slot],))
                phrase = self.pick(RETRY_VALUE_SAY)
                text = _fill(phrase, {"value": val})
                item.values[slot] = val
            else:
                text = self.pick(RETRY_SAY)
            item.retries += 1
        elif intent == "check":
            text = self.pick(CHECK_SAY)
            item.checks += 1
        elif intent in ("modify", "cancel", "continue"):
            kind = "continuation" if intent == "continue" else intent
            fu = self.rng.choice(self.followups(tmpl, kind))
            phrase = self.pick(fu["say"])
            fresh = self.sample_values(phrase, tmpl, avoid=item.values)
            text = _fill(phrase, fresh)
            lowerable = not phrase.startswith("{")
            item.values = {**item.values, **fresh}
            item.tool = fu["tool"]
            item.task_tmpl = fu["task"]
            item.retries = item.checks = 0
        else:  # pragma: no cover - defensive
            raise AssertionError(intent)
        return Clause(text=text, lowerable=lowerable, item=item, tool=item.tool,
                      task=item.task, category=INTENT_CATEGORY[intent], short=short)

    def assistant_clause(self, item: Item, via: str, named: bool = False) -> str | None:
        s = item.state
        task = item.task_for_reply
        req = "{task}" if named else None
        if s is None or s == "silent":
            return None
        if via == "check":
            if s == "executing":
                return self.pick(A_STILL)
            return self.pick(A_CHECK_DONE)
        if s == "cancel":
            return self.pick(A_CANCEL)
        if s in DONE_STATES:
            return _fill(self.pick(A_SUCCESS, req), {"task": task})
        if s == "failure":
            return _fill(self.pick(A_FAILURE, req), {"task": task})
        if s == "executing":
            return _fill(self.pick(A_EXECUTING, req), {"task": task})
        if s == "ask_detail":
            ask = self.pick(item.tmpl.missing["ask"])
            vals = dict(item.values)
            for ph in _placeholders(ask):
                if ph not in vals:
                    vals[ph] = self.value(ph, item.tmpl)
            return _fill(ask, vals)
        if s == "select":
            asks = item.tmpl.options["ask"]
            with_opts = [a for a in asks if "{options}" in a]
            ask = self.pick(with_opts) if with_opts else self.pick(A_OPTIONS_FALLBACK)
            vals = dict(item.values)
            vals["options"] = _options_text(item.options)
            for ph in _placeholders(ask):
                if ph not in vals:
                    vals[ph] = self.value(ph, item.tmpl)
            return _fill(ask, vals)
        raise AssertionError(s)  # pragma: no cover

    # -- realistic assistant turns -----------------------------------------------------------------
    def apick(self, lst: list[str], need=(), avoid=()) -> str:
        """``pick`` for realistic assistant phrasings: same train/held-out part, own stream."""
        pool = part_of(lst, self.part)
        pool = [x for x in pool if all("{%s}" % n in x for n in need)
                and not any("{%s}" % a in x for a in avoid)] or \
            [x for x in pool if not _placeholders(x)] or pool
        text = self.arng.choice(pool)
        self.a_phrasings.append((text, self.phrasing_tag(lst)))
        return text

    def result_id(self, item: Item, style: int | None = None) -> str:
        r = self.arng
        style = r.randrange(5) if style is None else style
        if style == 0:
            return str(r.randrange(10000, 99999))
        if style == 1:
            initials = "".join(w[0] for w in item.tool.split("_")[:2]).upper()
            return f"{initials}-{r.randrange(1000, 9999)}"
        if style == 2:
            return "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        if style == 3:
            return f"{item.tool.split('_')[-1][:3]}_{r.getrandbits(32):08x}"
        return f"#{r.randrange(100, 999)}{r.choice('ABCDEFGHJK')}"

    def clock(self) -> str:
        r = self.arng
        h, m = r.randrange(1, 13), r.choice((0, 5, 10, 15, 20, 30, 40, 45, 50))
        if r.random() < 0.6:
            return f"{h}:{m:02d} {r.choice(('AM', 'PM'))}"
        return f"{(h + 12 * r.randrange(2)) % 24:02d}:{m:02d}"

    def result_fields(self, item: Item) -> dict[str, str]:
        """Per-reply tool-output values: ID, clock time, progress, ETA, error code, a slot value."""
        r = self.arng
        clock = self.clock()
        eta = f"{r.randrange(1, 15)} min" if r.random() < 0.6 else f"{r.randrange(5, 60)} s"
        values = [(k, v) for k, v in item.values.items() if v]
        out = {"id": self.result_id(item), "time": clock, "pct": str(r.randrange(5, 96)),
               "eta": eta, "secs": str(r.choice((10, 15, 30, 60))),
               "code": str(r.choice((400, 403, 404, 408, 409, 429, 500, 502, 503, 504))),
               "n": str(r.randrange(1, 6))}
        if values:
            k, v = r.choice(values)
            out["value"] = _swap_values(v) if _swappable(k) else v
        return out

    def result_list(self, item: Item, template: str) -> tuple[str, int] | None:
        """A few values of one of the tool's slots, each with an id, time or amount."""
        r = self.arng
        slots = [k for k in item.values] or list(item.tmpl.slots)
        if not slots:
            return None
        slot = r.choice(slots)
        pool = part_of(self.slot_pool(slot, item.tmpl), self.part)
        own = item.values.get(slot)
        others = [v for v in pool if v != own]
        vals = ([own] if own else []) + r.sample(others, min(len(others), r.randrange(1, 4)))
        if len(vals) < 2:
            return None
        style = R_LIST_ITEM[3] if '"items"' in template else self.apick(R_LIST_ITEM)
        entries = []
        kind = 0 if style.startswith("{") else r.randrange(4)   # JSON entries carry an id
        id_style = r.randrange(5)                                 # one ID format per list
        for v in vals:
            x = (self.result_id(item, id_style) if kind == 0 else self.clock() if kind == 1 else
                 f"${r.randrange(3, 300)}.{r.randrange(100):02d}" if kind == 2 else
                 f"{r.randrange(1, 50) / 10} km")
            entries.append(_fill(style, {"v": v, "x": x}))
        joined = ", ".join(entries) if style.startswith("{") else "; ".join(entries)
        return joined, len(vals)

    def realistic_clause(self, item: Item, via: str, echo: str | None) -> str | None:
        """The assistant's part for ``item`` as a real transcript has it (None: not mentioned)."""
        s = item.state
        if s is None or s == "silent":
            return None
        if s in ("ask_detail", "select") and via != "check":
            return echo        # the assistant's own question: dialogue flows answer it
        vals = self.result_fields(item)
        missing = () if "value" in vals else ("value",)
        if via == "check":
            lst = R_STILL if s == "executing" else R_CHECK_DONE
        elif s == "cancel":
            lst = R_CANCEL
        elif s == "failure":
            lst = R_FAILURE
        elif s == "executing":
            lst = R_EXECUTING
        elif item.tool.split("_")[0] in LOOKUP_VERBS:
            text = self.apick(R_LOOKUP, avoid=missing)
            if "{list}" in text:
                found = self.result_list(item, text)
                if found is None:
                    return _fill(self.apick(R_DONE, avoid=("value",) + missing), vals)
                vals["list"], vals["n"] = found[0], str(found[1])
            return _fill(text, vals)
        else:
            lst = R_DONE
        return _fill(self.apick(lst, avoid=missing), vals)

    def realistic_reply(self, parts: list[str | None]) -> str:
        parts = [p for p in parts if p]
        if not parts:
            return "Okay."
        out = _cap(parts[0])
        for p in parts[1:]:
            out += " " + _cap(_fill(self.apick(R_JOIN), {"c": p}))
        return out

    # -- composition -----------------------------------------------------------------------------
    def choose_domain(self, exclude=(), prefer_ood=False) -> str:
        doms = [d for d in self.domains if d not in exclude] or list(self.domains)
        if prefer_ood:
            ood = [d for d in doms if d in self.ood_domains]
            if ood:
                doms = ood
        return self.rng.choice(doms)

    def compose(self, domain: str, mode: str) -> tuple[list[ToolTemplate], str]:
        busy = {it.tool for it in self.active} | {it.tmpl.name for it in self.active}
        tools = [t for t in self.by_domain[domain] if t not in busy] or self.by_domain[domain]
        T = self.bank.templates
        if mode == "multi_tool":
            scenes = [sc for sc in self.scenes if any(T[t].domain == domain for t in sc)]
            if scenes:
                sc = self.rng.choice(scenes)
                return [T[t] for t in sc], "multi_tool"
            mode = "multi_intent"
        if mode == "multi_intent":
            k = 2 if self.rng.random() < 0.7 else 3
            chosen = [self.rng.choice(tools)]
            for _ in range(20):
                if len(chosen) >= k:
                    break
                if self.rng.random() < 0.5:
                    cands = [t for t in self.by_domain[domain] if t not in chosen and t not in busy]
                else:
                    d2 = self.choose_domain(exclude=(domain,))
                    cands = [t for t in self.by_domain[d2] if t not in chosen and t not in busy]
                if cands:
                    chosen.append(self.rng.choice(cands))
            if len(chosen) >= 2:
                return [T[t] for t in chosen], "multi_intent"
            mode = "single_tool"
        return [T[self.rng.choice(tools)]], "single_tool"

    def new_request(self, domain: str, label: str | None) -> tuple[list[Clause], str]:
        mode = self.draw(MODE_WEIGHTS, MODE_WEIGHTS)
        tmpls, mode = self.compose(domain, mode)
        states = [self.draw(P_INIT, self.compatible_states(t)) for t in tmpls]
        if all(s == "silent" for s in states):  # structural constraint: someone must answer
            states[0] = "success"
        clauses = [self.request_clause(t, s, label) for t, s in zip(tmpls, states)]
        self.focus = tmpls[0].domain
        return clauses, mode

    # -- turns -----------------------------------------------------------------------------------
    def join_user(self, clauses: list[Clause]) -> str:
        out = _cap(clauses[0].text)
        sentence_start = clauses[0].text
        prev_short = clauses[0].short
        for cl in clauses[1:]:
            body = _lower_first(cl.text) if cl.lowerable else cl.text
            end = out[-1]
            if prev_short or end in ".?!" or self.rng.random() < 0.5:
                if end not in ".?!":
                    out += _end_mark(sentence_start)
                conn = self.pick(SENTENCE_CONNECTORS)
                out += " " + _cap(_fill(conn, {"c": body}))
                sentence_start = body
            else:
                conn = self.pick(INLINE_CONNECTORS)
                out += _fill(conn, {"c": body})
            prev_short = cl.short
        if out[-1] not in ".?!":
            out += _end_mark(sentence_start)
        return out

    def join_assistant(self, parts: list[str]) -> str:
        parts = [p for p in parts if p]
        if not parts:
            return "Okay."
        out = _cap(parts[0])
        for p in parts[1:]:
            conn = self.pick(A_JOIN)
            body = _lower_first(p) if conn != "{c}" else p
            out += " " + _cap(_fill(conn, {"c": body}))
        return out

    def assistant_turn(self, clauses: list[Clause], vias: dict[int, str]) -> str:
        """The assistant's reply to a turn.  The echo reply is always drawn (it advances the
        dialogue's stream); the realistic one replaces it, drawn from the assistant stream."""
        seen = set()
        items, parts = [], []
        for c in clauses:
            if id(c.item) in seen:
                continue
            seen.add(id(c.item))
            items.append(c.item)
            parts.append(self.assistant_clause(c.item, vias.get(id(c.item), ""),
                                               named=len(clauses) > 1))
        echo = self.join_assistant(parts)
        if self.cfg.assistant_turns != "realistic":
            return echo
        real = [self.realistic_clause(it, vias.get(id(it), ""), p) for it, p in zip(items, parts)]
        return self.realistic_reply(real)

    def build(self, n_turns: int) -> list[dict]:
        """Generate one dialogue: a list of turns {user, assistant, tasks, category, phrasings}."""
        turns: list[dict] = []
        r = 0
        while sum(1 for t in turns if t["category"]) < n_turns:
            self.phrasings = []
            vias: dict[int, str] = {}
            if r == 0:
                domain = self.choose_domain(prefer_ood=self.ood)
                clauses, mode = self.new_request(domain, None)
                category = mode
                self.active = [c.item for c in clauses]
            elif self.rng.random() < p_switch(r, self.cfg.p0, self.cfg.alpha, self.cfg.p_min):
                cur = {it.tmpl.domain for it in self.active} | {self.focus}
                domain = self.choose_domain(exclude=cur, prefer_ood=self.ood and
                                            self.rng.random() < 0.5)
                clauses, _ = self.new_request(domain, "topic_switch")
                category = "topic_switch"
                self.active = [c.item for c in clauses]
            else:
                clauses = []
                survivors: list[Item] = []
                used_intents: set[str] = set()
                for item in self.active:
                    intent = self.draw(P_TODO.get(item.state, {"drop": 1.0}),
                                       self.allowed_intents(item))
                    if intent in (None, "drop") or len(clauses) >= MAX_CLAUSES - 1:
                        continue
                    if intent in BARE_INTENTS and intent in used_intents:
                        # a second bare "is it done yet?" / "try again" / "the second one" in
                        # the same turn would be ambiguous: the tool waits for a later turn
                        survivors.append(item)
                        continue
                    used_intents.add(intent)
                    clause = self.intent_clause(item, intent)
                    item.state = self.draw(P_TASK[intent], P_TASK[intent])
                    if intent == "check":
                        vias[id(item)] = "check"
                    clauses.append(clause)
                    survivors.append(item)
                # answers and picks first, like a person would
                clauses.sort(key=lambda c: 0 if c.short else 1)
                if not clauses or (len(clauses) < MAX_CLAUSES and self.rng.random() < P_INJECT):
                    other = self.rng.random() < P_INJECT_OTHER_DOMAIN and len(self.domains) > 1
                    if other:
                        label = "topic_switch"
                        domain = self.choose_domain(exclude={self.focus},
                                                    prefer_ood=self.ood and self.rng.random() < 0.5)
                    else:
                        label = "new_task"
                        domain = self.focus if self.focus in self.by_domain else self.choose_domain()
                    busy = {it.tool for it in survivors} | {it.tmpl.name for it in survivors}
                    cands = [t for t in self.by_domain[domain] if t not in busy] or \
                        self.by_domain[domain]
                    tmpl = self.bank.templates[self.rng.choice(cands)]
                    compat = self.compatible_states(tmpl)
                    state = self.draw(P_TASK[label], compat | {label})
                    if not clauses and state == "silent":
                        state = label
                    clauses.append(self.request_clause(tmpl, state, label))
                    survivors.append(clauses[-1].item)
                    if other:
                        self.focus = tmpl.domain
                cats = list(dict.fromkeys(c.category for c in clauses))
                category = cats[0] if len(cats) == 1 else "mixed"
                self.active = survivors
            user = self.join_user(clauses)
            assistant = self.assistant_turn(clauses, vias)
            tasks = [{"text": c.task, "tool": c.tool} for c in clauses]
            turns.append({"user": user, "assistant": assistant, "tasks": tasks,
                          "category": category,
                          "phrasings": list(self.phrasings) + self.a_phrasings})
            self.a_phrasings = []
            # tools in a null state leave the context
            self.active = [it for it in self.active if it.state not in (None, "silent", "cancel")]
            r += 1
            if (self.rng.random() < P_THANKS and all(it.state in DONE_STATES for it in self.active)
                    and sum(1 for t in turns if t["category"]) < n_turns):
                self.phrasings = []
                turns.append({"user": _cap(self.pick(THANKS_SAY)),
                              "assistant": self.pick(A_WELCOME), "tasks": [],
                              "category": None, "phrasings": list(self.phrasings)})
                self.active = []
                r += 1
        return turns


# ---------------------------------------------------------------------------------------------
# Benchmark assembly
# ---------------------------------------------------------------------------------------------

def _turn_weights(max_turns: int) -> list[float]:
    return [1.0] + [2.0] * (max_turns - 1)


def assign_splits(config: GeneratorConfig, has_ood: bool) -> list[str]:
    n = config.dialogues
    n_ood = int(round(config.ood_fraction * n)) if has_ood else 0
    m = n - n_ood
    n_dev = int(round(config.dev_fraction * m))
    n_test = int(round(config.test_fraction * m))
    labels = (["test_ood"] * n_ood + ["dev"] * n_dev + ["test"] * n_test
              + ["train"] * (m - n_dev - n_test))
    random.Random(f"magicselector-mobile-splits:{config.seed}").shuffle(labels)
    return labels


def build_dialogues(config: GeneratorConfig = GeneratorConfig(), bank: Bank | None = None):
    """Generate all dialogues; returns (bank, list of (split, dialogue_id, turns))."""
    if config.max_turns < 1 or config.dialogues < 1:
        raise ValueError("dialogues and max_turns must be >= 1")
    if config.assistant_turns not in ASSISTANT_TURNS:
        raise ValueError(f"assistant_turns must be one of {', '.join(ASSISTANT_TURNS)}, "
                         f"not {config.assistant_turns!r}")
    bank = bank or load_bank(config)
    ood_domains = [d for d in config.ood_domains]
    present_ood = sorted({tp.domain for tp in bank.templates.values() if tp.domain in ood_domains})
    if not any(tp.domain not in ood_domains for tp in bank.templates.values()):
        raise ValueError("no in-domain (non-OOD) templates to build train/dev/test from")
    labels = assign_splits(config, bool(present_ood))
    counters = {s: 0 for s in SPLITS}
    out = []
    weights = _turn_weights(config.max_turns)
    for i, split in enumerate(labels):
        rng = random.Random(f"magicselector-mobile:{config.seed}:{i}")
        part = "train" if split == "train" else "heldout"
        arng = random.Random(f"magicselector-mobile-assistant:{config.seed}:{i}")
        builder = DialogueBuilder(bank, config, rng, part, split == "test_ood", ood_domains, arng)
        n_turns = rng.choices(range(1, config.max_turns + 1), weights=weights)[0]
        turns = builder.build(n_turns)
        did = f"{split}-{counters[split]:05d}"
        counters[split] += 1
        out.append((split, did, turns))
    return bank, out


def _config_dict(config: GeneratorConfig) -> dict:
    d = asdict(config)
    d["ood_domains"] = list(config.ood_domains)
    for k in ("catalog_dir", "templates_dir"):
        d[k] = None if d[k] is None else str(d[k])
    if d["assistant_turns"] == "echo":   # the default: summary.json stays as it was before the option
        del d["assistant_turns"]
    return d


def generate_benchmark(out_dir, config: GeneratorConfig = GeneratorConfig()) -> dict:
    """Write ``out_dir/{train,dev,test,test_ood}/{tools,queries}.jsonl`` and ``summary.json``."""
    bank, dialogues = build_dialogues(config)
    out_dir = Path(out_dir)
    tool_rows = []
    for domain, tools in bank.catalog.items():
        for t in tools:
            tool_rows.append({"id": t["name"], "name": t["name"], "description": t["description"],
                              "parameters": t["inputSchema"], "domain": domain})
    rows: dict[str, list[dict]] = {s: [] for s in SPLITS}
    n_dialogues = {s: 0 for s in SPLITS}
    ood = set(config.ood_domains)
    for split, did, turns in dialogues:
        n_dialogues[split] += 1
        history: list[dict] = []
        for k, turn in enumerate(turns):
            if turn["category"]:
                gold = list(dict.fromkeys(t["tool"] for t in turn["tasks"]))
                domains = list(dict.fromkeys(bank.tool_domain[g] for g in gold))
                if split != "test_ood" and ood.intersection(domains):
                    raise RuntimeError(f"internal error: OOD tool in {split} dialogue {did}")
                rows[split].append({
                    "id": f"{did}-{k}", "history": [dict(h) for h in history],
                    "query": turn["user"], "gold": gold, "category": turn["category"],
                    "tasks": turn["tasks"], "domains": domains, "dialogue_id": did,
                })
            history.append({"role": "user", "content": turn["user"]})
            history.append({"role": "assistant", "content": turn["assistant"]})

    summary_splits = {}
    totals = {c: 0 for c in CATEGORIES}
    for split in SPLITS:
        d = out_dir / split
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "tools.jsonl", "w", encoding="utf-8", newline="\n") as fh:
            for row in tool_rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        with open(d / "queries.jsonl", "w", encoding="utf-8", newline="\n") as fh:
            for row in rows[split]:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        cats = {c: 0 for c in CATEGORIES}
        for row in rows[split]:
            cats[row["category"]] += 1
            totals[row["category"]] += 1
        summary_splits[split] = {"dialogues": n_dialogues[split], "turns": len(rows[split]),
                                 "categories": cats}
    summary = {
        "config": _config_dict(config),
        "splits": summary_splits,
        "categories": totals,
        "total_dialogues": sum(n_dialogues.values()),
        "total_turns": sum(len(v) for v in rows.values()),
        "catalog_tools": len(tool_rows),
        "templated_tools": len(bank.templates),
        "domains": list(bank.catalog),
        "ood_domains": sorted({bank.tool_domain[t] for t in bank.templates} & ood),
        "warnings": bank.warnings,
    }
    with open(out_dir / "summary.json", "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(summary, ensure_ascii=False, indent=2) + "\n")
    return summary


def format_summary(summary: dict) -> str:
    """A plain-text table of turns per split and category."""
    splits = list(summary["splits"])
    w = max(len(c) for c in CATEGORIES) + 2
    lines = ["category".ljust(w) + "".join(s.rjust(10) for s in splits) + "total".rjust(10)]
    for c in CATEGORIES:
        vals = [summary["splits"][s]["categories"][c] for s in splits]
        lines.append(c.ljust(w) + "".join(str(v).rjust(10) for v in vals)
                     + str(sum(vals)).rjust(10))
    tv = [summary["splits"][s]["turns"] for s in splits]
    lines.append("turns".ljust(w) + "".join(str(v).rjust(10) for v in tv) + str(sum(tv)).rjust(10))
    dv = [summary["splits"][s]["dialogues"] for s in splits]
    lines.append("dialogues".ljust(w) + "".join(str(v).rjust(10) for v in dv)
                 + str(sum(dv)).rjust(10))
    return "\n".join(lines)
