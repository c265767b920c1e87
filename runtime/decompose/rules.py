"""Rule decomposition, no model: clause splitting, request-or-context, elliptical carry-over (``rules``).

Splits compound commands at hard connectors ("also", "then", ";", "oh and", "while you're at it")
and at soft ones ("and", a comma) only where the next clause starts like a new request, never inside
fixed phrases ("rock and roll") or quoted text; keeps only clauses that ask for something as tasks
(a short one a hard connector joins is one: "lights off") and folds context clauses ("I invested
$5000", "Imagine you are a drone operator") into the request they belong to; resolves elliptical
follow-ups ("and for tomorrow?", "turn it off", an answer to the assistant's question) by carrying
the subject of the previous user turn's last request (no filler, polite opener or verb), that turn
read with its own follow-ups resolved, unless the utterance's own context comes first ("The weekend
alarm is wrong, change it"); only an utterance's first clause answers the assistant; a retry or a
status check ("try again", "has that gone through yet?") stands for every request of the previous
user turn, its own elliptical ones completed from the turns before it. A turn with one request and nothing to resolve stays whole.
The work is bounded: only an utterance's first ``max_chars`` characters (and a history turn's
last) are split, each a bounded number of times per utterance. The word helpers here (``content_words``,
``grounded``, ``task_key``) are shared with the LLM's output parser.
"""
from __future__ import annotations

import re
from typing import Sequence

from ..dialogue import Turn
from ..errors import InputError
from .base import DecomposeTrace, Decomposition

# -- shared word lists -------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")

STOPWORDS = frozenset("""
a an the and or but if then also so to of in on at by for with from into onto about as is are was were be
been being am do does did doing have has had having i me my mine myself you your yours we our us they
them their it its this that these those there here he him his she her hers what which who whom whose when
where why how can could would should will shall may might must please just now too very really some any
all more most much many few each every no not only own same than up down out off over again further once
let let's lets hey hi oh uh um ok okay yes yeah yep sure thanks thank great good fine alright right well
want wanna need like get got give go going gonna make made put take tell show see know think one ones
it's that's what's i'm i'd i'll you're don't can't won't didn't isn't
""".split())

# words that start a new request (imperative verbs, question openers, first-person requests)
REQUEST_STARTS = frozenset("""
turn switch set play open close call text send message remind check show tell find search look get book order
add remove delete cancel start stop pause resume mute unmute enable disable connect disconnect take share
navigate translate say read create make schedule wake increase decrease lower raise change update reply
forward give put pull email post buy pay transfer skip shuffle repeat record save download lock unlock dim
brighten count launch track log note write draft clear empty rate follow unfollow like dial ring snooze
move rename edit mark archive install uninstall scan print copy paste reset restart reboot charge find
what what's whats how how's when when's where where's who who's which is are do does did can could would
will should i i'm i'd i'll let let's please also then remind notify alert convert calculate compute
keep bring leave ask order reserve rent hail summon request split top fill refill list display
recommend suggest provide explain describe summarize estimate predict analyze analyse compare evaluate
determine identify retrieve fetch extract generate plot sort filter solve locate research review block
drop scrap ditch nix cut push bump tack unpause answer mail ping blast queue crank grab jot stick pin
kill end hang pick throw star favorite hide dismiss decline reject accept approve silence boost
""".split())

_FILLERS = ("oh and also", "and then also", "and after that", "after that", "and then", "and also", "oh and", "oh, and",
            "and uh", "and um", "by the way", "oh by the way", "also", "then", "and", "plus", "oh", "uh", "um",
            "hey", "okay", "ok", "so", "btw", "as well", "additionally")

FIXED_PHRASES = ("rock and roll", "rock n roll", "rhythm and blues", "r and b", "salt and pepper", "black and white",
                 "pros and cons", "back and forth", "up and down", "bread and butter", "mac and cheese",
                 "fish and chips", "tom and jerry", "simon and garfunkel", "hall and oates", "earth wind and fire",
                 "pride and prejudice", "war and peace", "crime and punishment", "law and order", "hide and seek",
                 "trial and error", "an hour and a half", "a day and a half", "and a half", "drum and bass",
                 "country and western", "bed and breakfast", "arts and crafts", "peanut butter and jelly",
                 "more and more", "again and again", "over and over", "here and there", "now and then",
                 "between", "both")

_ABBREV = frozenset("mr mrs ms dr st jr sr vs etc a.m p.m am pm no approx e.g i.e inc ltd co".split())

RETRY_CUES = ("try again", "another shot", "another try", "retry", "one more time", "do it again", "again please",
              "give it another", "try that again", "try it again", "try once more", "try it once more")
# A status check is a short question made only of these words (and stopwords): "is it done yet?",
# "how's that going?", "any update on that?". It names no task, so it asks after the previous ones.
STATUS_WORDS = frozenset("""
status done finished ready through going gone working work worked update updates progress longer
complete completed happening yet still how's hows whats
""".split())
_QUESTION_OPENERS = frozenset("is are was did has have how how's hows what what's whats any still where so".split())
_CLAUSE_END = re.compile(r"[.;!?,]\s+")
# how many user turns back a retry or status check is followed (the previous turn may itself be a retry)
FOLLOW_DEPTH = 2
ELLIPSIS_STARTS = ("and ", "what about", "how about", "and what about", "and for", "for ", "same for", "same ",
                   "also for", "in ", "at ", "on ", "to ", "with ", "instead", "actually", "make it", "change it",
                   "only ", "just ")


def content_words(text: str) -> set[str]:
    words = _WORD.findall(text.lower().replace("’", "'"))
    return {w for w in words if w not in STOPWORDS and (len(w) > 2 or w.isdigit())}


def _stem(w: str) -> str:
    return w[:5]


def grounded(line: str, sources: Sequence[str]) -> bool:
    """Whether a sub-task shares a content word (5-char prefix, so "reminder" ~ "remind") with the dialogue."""
    mine = {_stem(w) for w in content_words(line)}
    if not mine:
        return False
    theirs = {_stem(w) for s in sources for w in content_words(s)}
    return bool(mine & theirs)


def task_key(line: str) -> str:
    """A task's words, lower-cased: two tasks with the same key are the same task."""
    return " ".join(_WORD.findall(line.lower()))


# -- rules -----------------------------------------------------------------------------------------

# sequence words that open a clause only when a comma follows ("First, ...", "Lastly, ...")
_SEQUENCE_WORDS = ("first", "firstly", "second", "secondly", "third", "thirdly", "fourth", "next", "finally",
                   "lastly", "last", "afterwards", "moreover", "furthermore", "besides", "in addition",
                   "one more thing", "on top of that", "additionally", "now")


def _by_first_word(phrases: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Phrases by their leading run of letters, in their order: a text can start with a phrase
    (followed by a space, a comma or its end) only when its own leading run of letters is the
    phrase's, so each clause tests the few phrases that share its first word, not all of them."""
    out: dict[str, list[str]] = {}
    for f in phrases:
        out.setdefault(_leading_letters(f), []).append(f)
    return {k: tuple(v) for k, v in out.items()}


_LETTERS = re.compile(r"[a-z]*")


def _leading_letters(text: str) -> str:
    m = _LETTERS.match(text)
    return m.group(0) if m else ""


_FILLERS_BY_WORD = _by_first_word(_FILLERS)
_SEQUENCE_BY_WORD = _by_first_word(_SEQUENCE_WORDS)


def _strip_fillers(clause: str) -> str:
    c = clause.strip(" ,;:.-")
    while c:
        n = _leading_filler(c.lower())
        if n is None:
            break
        c = c[n:].strip(" ,;:.-")
    return c


def _leading_filler(low: str) -> int | None:
    """The length of the filler ("please", "um") or sequence word ("then,") a lowercased clause
    starts with, None where it starts with neither."""
    word = _leading_letters(low)
    for f in _FILLERS_BY_WORD.get(word, ()):
        if low == f or low.startswith(f + " ") or low.startswith(f + ","):
            return len(f)
    for f in _SEQUENCE_BY_WORD.get(word, ()):
        if low.rstrip(".!") == f or low.startswith(f + ","):
            return len(f)
    return None


def _first_word(text: str) -> str:
    m = _WORD.search(text.lower().replace("’", "'"))
    return m.group(0) if m else ""


def _starts_request(text: str) -> bool:
    return _first_word(_strip_fillers(text)) in REQUEST_STARTS


# Words that open a statement rather than a request: a subject (pronoun, determiner) or a scene
# setter. A clause opening with one is context ("My sister already paid", "I invested $5000",
# "Imagine you are a drone operator") unless it asks something anyway ("I need a cab", "...?").
CONTEXT_STARTS = frozenset("""
i i'm i've i'd i'll you you're you've he he's she she's it it's we we're we've they they're they've
my your his her our their its the a an this that these those there there's here here's one
if when whenever after before since because although though while given imagine assume suppose
consider considering in on at as
""".split())
_REQUEST_PHRASE = re.compile(
    r"\?\s*[\"'”’]?\s*$|\b(?:can|could|would|will) you\b|\bplease\b|\bhelp me\b|\b(?:i|you)(?:'d| would) (?:like|love)\b"
    r"|\b(?:i|you) (?:want|need|wanna|have to|must)\b|\blet me\b"
    r"|\b(?:i'm|i am) (?:looking|trying|searching|interested|planning|curious|considering|thinking|hoping)\b"
    r"|\blet's\b", re.IGNORECASE)


def _asked(clause: str) -> bool:
    """A short clause a hard connector joins to another is a request ("lights off", "brightness
    50%") unless it opens like a statement."""
    return getattr(clause, "joined", False) and _first_word(_strip_fillers(clause)) not in CONTEXT_STARTS


def is_request(clause: str) -> bool:
    """Whether a clause asks for something (rather than giving context for a request)."""
    text = _strip_fillers(clause).replace("’", "'")
    if _REQUEST_PHRASE.search(text):
        return True
    word = _first_word(text)
    if len(_WORD.findall(text.lower())) <= 3:  # "id: 3", "at least 4 stars": a detail, unless a command
        return word in REQUEST_STARTS
    return word not in CONTEXT_STARTS


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_HARD = re.compile(r"\s*;\s*|\s*,?\s*\boh,? and\b,?\s*|\s*,?\s*(?:\band\s+)?\b(?:then|after that|also|plus|as well as|while you(?:'re|’re| are) at it|one more thing|on top of that)\b,?\s+",
                   re.IGNORECASE)
_AND = re.compile(r"(\s*,?\s+\band\b,?\s+|\s*,\s+)", re.IGNORECASE)


_QUOTED = re.compile(r'"[^"\n]{1,400}"|“[^”\n]{1,400}”')


def _protect(text: str) -> tuple[str, dict[str, str]]:
    """Hide what must not be split (quoted text, fixed phrases with "and") behind placeholders."""
    saved: dict[str, str] = {}
    stripped = text.strip()
    if len(stripped) > 1 and stripped[0] in "\"“" and stripped[-1] in "\"”" and stripped.count('"') <= 2:
        text = stripped[1:-1]  # an utterance wrapped in quotes as a whole

    def keep(span: str) -> str:
        key = f"\x00{len(saved)}\x00"
        saved[key] = span
        return key

    text = _QUOTED.sub(lambda m: keep(m.group(0)), text)
    low = _lower_aligned(text)
    for phrase in FIXED_PHRASES:
        if " and " not in phrase:
            continue
        start = low.find(phrase)
        while start >= 0:
            text = text[:start] + keep(text[start:start + len(phrase)]) + text[start + len(phrase):]
            low = _lower_aligned(text)
            start = low.find(phrase)
    return text, saved


def _lower_aligned(text: str) -> str:
    """``text.lower()`` with U+0130 (the one code point whose lower case is two) lowered to "i", so
    that an index into it is an index into ``text``: a phrase found past a misaligned index was
    never hidden and was found again without end ("İ" * 20 + " play rock and roll" never returned)."""
    return text.replace("\u0130", "i").lower()


def _restore(text: str, saved: dict[str, str]) -> str:
    for k, v in saved.items():
        text = text.replace(k, v)
    return text


def _sentences(text: str) -> list[str]:
    parts, buf = [], ""
    for piece in _SENTENCE_END.split(text):
        buf = f"{buf} {piece}".strip() if buf else piece
        if _ends_abbreviation(buf):
            continue
        parts.append(buf)
        buf = ""
    if buf:
        parts.append(buf)
    return parts


def _ends_abbreviation(buf: str) -> bool:
    """Whether a sentence so far ends in a period that closes an abbreviation or an initial ("Dr.", "J.")."""
    words = buf.rstrip(".!?").split()
    last = words[-1].lower() if words else ""
    return buf.endswith(".") and (last.rstrip(".") in _ABBREV or (len(last) == 1 and last.isalpha()))


class Clause(str):
    """A clause's text; ``joined`` when a hard connector ("also", "oh and", "while you're at it")
    stands next to it, which marks it as one of several things asked ("Cut, and also set the flash")."""

    joined: bool = False


def _clause(text: str, joined: bool) -> Clause:
    c = Clause(text)
    c.joined = joined
    return c


def split_clauses(text: str) -> list[Clause]:
    """Split an utterance into request clauses (no model). Conservative: a soft connector ("and",
    a comma) splits only when the next clause starts like a new request."""
    protected, saved = _protect(text)
    out: list[tuple[str, bool]] = []
    for sent in _sentences(protected):
        _add_sentence(sent, out, saved)
    clauses = [(_strip_fillers(_restore(c, saved)), joined) for c, joined in out]
    return [_clause(c, joined) for c, joined in clauses if c]


def _add_sentence(sent: str, out: list[tuple[str, bool]], saved: dict[str, str]) -> None:
    """One sentence's clauses added to ``out``, each with whether a hard connector stands next to it."""
    hard = _HARD.split(sent)
    if len(hard) > 1 and not hard[0].strip(" ,.") and out:  # "Jump forward. Also, ...": joins the one before
        out[-1] = (out[-1][0], True)
    for i, piece in enumerate(hard):
        if piece and piece.strip(" ,."):
            # a hard connector stands before this piece's first clause or after its last
            out += _soft_clauses(piece, i > 0, i < len(hard) - 1, saved)


def _soft_clauses(piece: str, first: bool, last: bool, saved: dict[str, str]) -> list[tuple[str, bool]]:
    """The clauses of one piece between hard connectors, each with whether a hard connector stands
    next to it: a soft connector splits where the next clause starts like a new request."""
    out: list[tuple[str, bool]] = []
    soft = _AND.split(piece)  # [clause, separator, clause, separator, ...]
    cur = soft[0]
    for sep, nxt in zip(soft[1::2], soft[2::2]):
        if _starts_request(nxt) and content_words(_restore(cur, saved)):
            out.append((cur, first))
            cur, first = nxt, False
        else:
            cur = f"{cur}{sep}{nxt}"
    out.append((cur, first or last))
    return out


_PRONOUN_RE = re.compile(r"\b(it|that|this|them|those|these)\b(?!['’])", re.IGNORECASE)  # not "it's"


def _is_elliptical(clause: str, history: Sequence[Turn], first: bool = True) -> str | None:
    """Why a clause needs the dialogue to be understood ('retry', 'pronoun', 'fragment',
    'answer'), or None. Only an utterance's ``first`` clause answers the assistant's question."""
    if not history:
        return None
    low = _plain_words(clause)
    if any(c in low for c in RETRY_CUES):
        return "retry"
    words = low.split()
    if not words:
        return None
    return _short_kind(clause, words, history, first)


def _short_kind(clause: str, words: list[str], history: Sequence[Turn], first: bool) -> str | None:
    """``_is_elliptical`` past the retry cues: a status check, a pronoun or a fragment that names no
    task of its own, or a short answer to the assistant's question."""
    own = content_words(clause)
    if _is_status(clause, words, own):
        return "status"
    if _PRONOUN_RE.search(clause) and len(own - REQUEST_STARTS) <= 1 and len(words) <= 7:
        return "pronoun"
    if _is_fragment(clause):
        return "fragment"
    if first and _answers_question(words, history):
        return "answer"
    if len(words) <= 3 and words[0] not in REQUEST_STARTS:
        return "fragment"
    return None


def _answers_question(words: list[str], history: Sequence[Turn]) -> bool:
    """A short clause, not a request, after an assistant turn that ended with a question."""
    last_assistant = next((t.content for t in reversed(history) if t.role == "assistant"), "")
    return last_assistant.rstrip().endswith("?") and len(words) <= 5 and words[0] not in REQUEST_STARTS


def _plain_words(clause: str) -> str:
    """A clause's words, lowercased, with typographic apostrophes as plain ones, joined by spaces."""
    return " ".join(_WORD.findall(clause.lower().replace("’", "'")))


def _is_status(clause: str, words: Sequence[str], own: set[str]) -> bool:
    """A short question that asks how an earlier request went and names no task of its own."""
    return (len(words) <= 7 and bool(STATUS_WORDS.intersection(words)) and own <= STATUS_WORDS
            and (clause.rstrip().endswith("?") or words[0] in _QUESTION_OPENERS))


def _is_fragment(clause: str) -> bool:
    """A short follow-on that names no task of its own ("and for tomorrow", "what about Paris")."""
    low = _plain_words(clause)
    return len(low.split()) <= 6 and low.startswith(_ELLIPSIS_PREFIXES)


_ELLIPSIS_PREFIXES = tuple(s.strip() for s in ELLIPSIS_STARTS)


_POLITE = re.compile(r"^(?:(?:can|could|would|will) you|please|i(?:'d| would) like to|i (?:want|need) to|let's)\s+",
                     re.IGNORECASE)


def _subject(request: str) -> str:
    """The object phrase of a request: the request without its fillers, a polite opener ("can you")
    and its leading verb/particles."""
    words = _POLITE.sub("", _strip_fillers(request)).split()
    drop = REQUEST_STARTS | {"on", "off", "up", "down", "in", "the", "my", "a", "an", "some", "me", "to", "for", "please"}
    i = 0
    while i < len(words) - 1 and words[i].lower().strip(",.?!") in drop:
        i += 1
    return " ".join(words[i:]).strip(" ,.?!")


def _completed(clause: str, why: str, prev: str) -> str:
    """An elliptical clause completed from the request before it: a retry is that request, a
    pronoun stands for its subject, a fragment or an answer adds to it."""
    if why == "retry":
        return prev
    if why == "pronoun":
        subj = _subject(prev)
        # a function, not a template: the subject is the user's text (a backslash in it is no escape)
        return _PRONOUN_RE.sub(lambda _: subj, clause, count=1) if subj else f"{clause} {prev}"
    frag = _strip_fillers(re.sub(r"^(what|how) about\b", "", clause, flags=re.IGNORECASE)).rstrip("?.! ")
    return f"{prev.rstrip('?.! ')} {frag}".strip()


# what the rules read per task they may return (``RuleDecomposer.max_chars``): several times a
# long spoken request, and more than the embedder reads of a sub-task (128 tokens)
CHARS_PER_TASK = 1_000


def _last_user_turn(history: Sequence[Turn]) -> int:
    """The position of the latest user turn in ``history``, -1 where there is none."""
    return next((j for j in range(len(history) - 1, -1, -1) if history[j].role == "user"), -1)


class _TaskList:
    """The tasks of one utterance as ``RuleDecomposer._tasks`` finds them: a clause that asks
    nothing waits as context and joins the next task (or, at the end, the last one); a task that
    repeats one found (``task_key``) or has no content word is dropped."""

    def __init__(self) -> None:
        self.tasks: list[str] = []
        self.context: list[str] = []
        self.keys: set[str] = set()  # task_key of each task so far
        self.resolved_any = False

    def take(self, task: str, clause: str) -> None:
        """One task a clause resolved to (``task == clause`` where the clause stands as said)."""
        if task == clause and not is_request(clause) and not _asked(clause):
            self.context.append(clause)
            return
        self.resolved_any |= task != clause
        if self.context:
            task, self.context = ", ".join([*self.context, task]), []
        key = task_key(task)
        if key not in self.keys and content_words(task):
            self.tasks.append(task)
            self.keys.add(key)

    def result(self, query: str, max_tasks: int) -> list[str]:
        """The tasks, trailing context joining the last; the utterance whole where it holds at most
        one request and nothing was resolved."""
        if self.context and self.tasks:
            self.tasks[-1] = ", ".join([self.tasks[-1], *self.context])
        if len(self.tasks) <= 1 and not self.resolved_any:
            return [query]
        return self.tasks[:max_tasks]


class RuleDecomposer:
    """Clause splitting and elliptical carry-over, no model (see the module docstring)."""

    name = "rules"

    def __init__(self, max_tasks: int = 4, max_chars: int | None = None) -> None:
        self.max_tasks = max_tasks
        # the most of an utterance (its start) or of a history turn (its end) the rules read: room
        # for max_tasks requests, each far longer than what the embedder reads of it
        self.max_chars = max_tasks * CHARS_PER_TASK if max_chars is None else max_chars
        if not isinstance(self.max_chars, int) or isinstance(self.max_chars, bool) or self.max_chars < 1:
            raise InputError(f"RuleDecomposer max_chars must be a positive int, got {max_chars!r}")

    def clauses(self, text: str) -> list[Clause]:
        """``split_clauses`` of the utterance's first ``max_chars`` characters; past them, its last
        complete clause there (the one the clip cut is dropped)."""
        if len(text) <= self.max_chars:
            return split_clauses(text)
        clauses = split_clauses(text[: self.max_chars])
        return clauses[:-1] if len(clauses) > 1 else clauses

    def previous_request(self, history: Sequence[Turn], memo: dict[str, str] | None = None) -> str:
        """The last request of the latest user turn (of its last ``max_chars`` characters);
        ``memo`` keeps the answer per turn text for the other clauses of one utterance."""
        j = _last_user_turn(history)
        if j < 0:
            return ""
        content = history[j].content
        if memo is not None and content in memo:
            return memo[content]
        found = self._last_request(content)
        if memo is not None:
            memo[content] = found
        return found

    def _last_request(self, content: str) -> str:
        """The last clause of a user turn (of its last ``max_chars`` characters) that asks for
        something by itself; else its last clause, else the text."""
        text = content[-self.max_chars:]
        clauses: list[str] = list(split_clauses(text))
        if len(text) < len(content) and len(clauses) > 1:
            clauses = clauses[1:]  # the clip cut the first one
        meaningful = [c for c in clauses if content_words(c) and _is_elliptical(c, []) is None]
        return (meaningful or clauses or [text])[-1]

    def previous_requests(self, history: Sequence[Turn], memo: dict[str, str] | None = None,
                          depth: int = 0, seen: dict[tuple[int, int], list[str]] | None = None) -> list[str]:
        """Every request of the latest user turn (of its last ``max_chars`` characters, decomposed as
        an utterance), its own elliptical ones completed from the turns before it, up to
        ``FOLLOW_DEPTH`` turns back (past it: ``previous_request``); ``seen`` keeps the answer per
        turn for the other clauses of one utterance."""
        j = _last_user_turn(history)
        if j < 0:
            return []
        if depth >= FOLLOW_DEPTH:
            found = self.previous_request(history[: j + 1], memo)
            return [found] if found else []
        key = (j, depth)
        if seen is not None and key in seen:
            return seen[key]
        tasks = self._tasks(self._turn_tail(history[j].content), history[:j], depth + 1, seen)
        requests = [x for x in tasks if content_words(x)][-self.max_tasks:]
        if seen is not None:
            seen[key] = requests
        return requests

    def _turn_tail(self, content: str) -> str:
        """A user turn's last ``max_chars`` characters, from the end of the clause the clip cut."""
        text = content[-self.max_chars:]
        if len(text) < len(content):
            end = _CLAUSE_END.search(text)
            text = text[end.end():] if end else text
        return text

    def resolve(self, clause: str, history: Sequence[Turn], memo: dict[str, str] | None = None, depth: int = 0,
                seen: dict[tuple[int, int], list[str]] | None = None, first: bool = True) -> list[str]:
        """What a clause asks for, read against the previous user turn. With ``seen``, that turn as
        ``previous_requests`` reads it (its own follow-ups resolved, its context folded in): a retry
        or status check stands for every request of it, another elliptical clause is completed from
        its last one. Without ``seen``, from that turn's last clause as said. A clause that needs no
        dialogue stays as it is."""
        why = _is_elliptical(clause, history, first)
        if why is None:
            return [clause]
        if seen is not None:
            requests = self.previous_requests(history, memo, depth, seen)
            if why in ("retry", "status"):
                return requests or [clause]
            prev = requests[-1] if requests else ""
        else:
            prev = self.previous_request(history, memo)
        return [_completed(clause, why, prev) if prev else clause]

    def decompose(self, query: str, history: Sequence[Turn]) -> Decomposition:
        """The request clauses of an utterance, each with the context clauses before it (trailing
        context joins the last request) and elliptical ones completed from the dialogue. An
        utterance with at most one request and nothing resolved is left whole: the fragment would
        only repeat the anchor query with less context."""
        return Decomposition(tuple(map(str, self._tasks(query, history))), DecomposeTrace(ran=self.name))  # plain str, not Clause

    def _tasks(self, query: str, history: Sequence[Turn], depth: int = 0,
               seen: dict[tuple[int, int], list[str]] | None = None) -> list[str]:
        found = _TaskList()
        memo: dict[str, str] = {}
        seen = {} if seen is None else seen
        for n, clause in enumerate(self.clauses(query)):
            for task in self._clause_tasks(clause, n == 0, found, history, memo, depth, seen):
                found.take(task, clause)
            if len(found.tasks) > self.max_tasks:
                # what the rest could change lies past the cap: later tasks, context joining them
                break
        return found.result(query, self.max_tasks)

    def _clause_tasks(self, clause: str, first: bool, found: "_TaskList", history: Sequence[Turn],
                      memo: dict[str, str], depth: int, seen: dict[tuple[int, int], list[str]]) -> list[str]:
        """What one clause of the utterance asks for, given the tasks and context found before it."""
        # "... for Boston, and also for San Francisco?": a fragment completes the task before it
        fragment = bool(found.tasks) and _is_fragment(clause)
        local = [*history, Turn("user", found.tasks[-1])] if fragment else history
        # "The weekend alarm is wrong, change it": a pronoun after this utterance's own context
        # points at that context, not at the previous turn
        if found.context and not fragment and _is_elliptical(clause, history) == "pronoun":
            return [clause]
        # a fragment completes the task before it as said, not the previous turn's requests
        return self.resolve(clause, local, memo, depth, None if fragment else seen, first)

    def cues(self, query: str, history: Sequence[Turn]) -> dict[str, bool]:
        """What in a turn an LLM could help with (the gate's inputs)."""
        clauses = self.clauses(query)
        protected, _ = _protect(query[: self.max_chars])
        connectors = (len(_sentences(protected)) > 1
                      or bool(re.search(r"\b(and|also|then|plus|after that)\b|;", protected, re.IGNORECASE)))
        return {
            "multi_clause": len(clauses) > 1,
            "connector": connectors,
            "elliptical": any(_is_elliptical(c, history) for c in (clauses if clauses else [query])),
            "long": len(query.split()) > 16,
        }

