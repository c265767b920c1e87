// rules.cpp: the rules decomposer, a port of runtime/decompose/rules.py that behaves as this Python's
// str methods and re patterns do (Unicode \w, \b, \s, str.lower, re.IGNORECASE), each pattern a scanner.
#include "rules.h"

#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "error.h"
#include "unicode.h"

namespace ms {
namespace {

using U32 = std::u32string;
using WordSet = std::unordered_set<U32>;
using unicode::py_isspace;
using unicode::re_word;

// -- word lists (rules.py, copied as they are) ---------------------------------------------------
const WordSet kStopwords{U"a", U"about", U"again", U"all", U"alright", U"also", U"am", U"an", U"and", U"any", U"are", U"as", U"at", U"be", U"been", U"being", U"but", U"by", U"can", U"can't", U"could", U"did", U"didn't", U"do", U"does", U"doing", U"don't", U"down", U"each", U"every", U"few", U"fine", U"for", U"from", U"further", U"get", U"give", U"go", U"going", U"gonna", U"good", U"got", U"great", U"had", U"has", U"have", U"having", U"he", U"her", U"here", U"hers", U"hey", U"hi", U"him", U"his", U"how", U"i", U"i'd", U"i'll", U"i'm", U"if", U"in", U"into", U"is", U"isn't", U"it", U"it's", U"its", U"just", U"know", U"let", U"let's", U"lets", U"like", U"made", U"make", U"many", U"may", U"me", U"might", U"mine", U"more", U"most", U"much", U"must", U"my", U"myself", U"need", U"no", U"not", U"now", U"of", U"off", U"oh", U"ok", U"okay", U"on", U"once", U"one", U"ones", U"only", U"onto", U"or", U"our", U"out", U"over", U"own", U"please", U"put", U"really", U"right", U"same", U"see", U"shall", U"she", U"should", U"show", U"so", U"some", U"sure", U"take", U"tell", U"than", U"thank", U"thanks", U"that", U"that's", U"the", U"their", U"them", U"then", U"there", U"these", U"they", U"think", U"this", U"those", U"to", U"too", U"uh", U"um", U"up", U"us", U"very", U"wanna", U"want", U"was", U"we", U"well", U"were", U"what", U"what's", U"when", U"where", U"which", U"who", U"whom", U"whose", U"why", U"will", U"with", U"won't", U"would", U"yeah", U"yep", U"yes", U"you", U"you're", U"your", U"yours"};
const WordSet kRequestStarts{U"accept", U"add", U"alert", U"also", U"analyse", U"analyze", U"answer", U"approve", U"archive", U"are", U"ask", U"blast", U"block", U"book", U"boost", U"brighten", U"bring", U"bump", U"buy", U"calculate", U"call", U"can", U"cancel", U"change", U"charge", U"check", U"clear", U"close", U"compare", U"compute", U"connect", U"convert", U"copy", U"could", U"count", U"crank", U"create", U"cut", U"decline", U"decrease", U"delete", U"describe", U"determine", U"dial", U"did", U"dim", U"disable", U"disconnect", U"dismiss", U"display", U"ditch", U"do", U"does", U"download", U"draft", U"drop", U"edit", U"email", U"empty", U"enable", U"end", U"estimate", U"evaluate", U"explain", U"extract", U"favorite", U"fetch", U"fill", U"filter", U"find", U"follow", U"forward", U"generate", U"get", U"give", U"grab", U"hail", U"hang", U"hide", U"how", U"how's", U"i", U"i'd", U"i'll", U"i'm", U"identify", U"increase", U"install", U"is", U"jot", U"keep", U"kill", U"launch", U"leave", U"let", U"let's", U"like", U"list", U"locate", U"lock", U"log", U"look", U"lower", U"mail", U"make", U"mark", U"message", U"move", U"mute", U"navigate", U"nix", U"note", U"notify", U"open", U"order", U"paste", U"pause", U"pay", U"pick", U"pin", U"ping", U"play", U"please", U"plot", U"post", U"predict", U"print", U"provide", U"pull", U"push", U"put", U"queue", U"raise", U"rate", U"read", U"reboot", U"recommend", U"record", U"refill", U"reject", U"remind", U"remove", U"rename", U"rent", U"repeat", U"reply", U"request", U"research", U"reserve", U"reset", U"restart", U"resume", U"retrieve", U"review", U"ring", U"save", U"say", U"scan", U"schedule", U"scrap", U"search", U"send", U"set", U"share", U"should", U"show", U"shuffle", U"silence", U"skip", U"snooze", U"solve", U"sort", U"split", U"star", U"start", U"stick", U"stop", U"suggest", U"summarize", U"summon", U"switch", U"tack", U"take", U"tell", U"text", U"then", U"throw", U"top", U"track", U"transfer", U"translate", U"turn", U"unfollow", U"uninstall", U"unlock", U"unmute", U"unpause", U"update", U"wake", U"what", U"what's", U"whats", U"when", U"when's", U"where", U"where's", U"which", U"who", U"who's", U"will", U"would", U"write"};
const std::vector<U32> kFillers{U"oh and also", U"and then also", U"and after that", U"after that", U"and then", U"and also", U"oh and", U"oh, and", U"and uh", U"and um", U"by the way", U"oh by the way", U"also", U"then", U"and", U"plus", U"oh", U"uh", U"um", U"hey", U"okay", U"ok", U"so", U"btw", U"as well", U"additionally"};
const std::vector<U32> kFixedPhrases{U"rock and roll", U"rock n roll", U"rhythm and blues", U"r and b", U"salt and pepper", U"black and white", U"pros and cons", U"back and forth", U"up and down", U"bread and butter", U"mac and cheese", U"fish and chips", U"tom and jerry", U"simon and garfunkel", U"hall and oates", U"earth wind and fire", U"pride and prejudice", U"war and peace", U"crime and punishment", U"law and order", U"hide and seek", U"trial and error", U"an hour and a half", U"a day and a half", U"and a half", U"drum and bass", U"country and western", U"bed and breakfast", U"arts and crafts", U"peanut butter and jelly", U"more and more", U"again and again", U"over and over", U"here and there", U"now and then", U"between", U"both"};
const WordSet kAbbrev{U"a.m", U"am", U"approx", U"co", U"dr", U"e.g", U"etc", U"i.e", U"inc", U"jr", U"ltd", U"mr", U"mrs", U"ms", U"no", U"p.m", U"pm", U"sr", U"st", U"vs"};
const std::vector<U32> kRetryCues{U"try again", U"another shot", U"another try", U"retry", U"one more time", U"do it again", U"again please", U"give it another", U"try that again", U"try it again", U"try once more", U"try it once more"};
const WordSet kStatusWords{U"complete", U"completed", U"done", U"finished", U"going", U"gone", U"happening", U"how's", U"hows", U"longer", U"progress", U"ready", U"status", U"still", U"through", U"update", U"updates", U"whats", U"work", U"worked", U"working", U"yet"};
const WordSet kQuestionOpeners{U"any", U"are", U"did", U"has", U"have", U"how", U"how's", U"hows", U"is", U"so", U"still", U"was", U"what", U"what's", U"whats", U"where"};
const std::vector<U32> kEllipsisPrefixes{U"and", U"what about", U"how about", U"and what about", U"and for", U"for", U"same for", U"same", U"also for", U"in", U"at", U"on", U"to", U"with", U"instead", U"actually", U"make it", U"change it", U"only", U"just"};
const std::vector<U32> kSequenceWords{U"first", U"firstly", U"second", U"secondly", U"third", U"thirdly", U"fourth", U"next", U"finally", U"lastly", U"last", U"afterwards", U"moreover", U"furthermore", U"besides", U"in addition", U"one more thing", U"on top of that", U"additionally", U"now"};
const WordSet kContextStarts{U"a", U"after", U"although", U"an", U"as", U"assume", U"at", U"because", U"before", U"consider", U"considering", U"given", U"he", U"he's", U"her", U"here", U"here's", U"his", U"i", U"i'd", U"i'll", U"i'm", U"i've", U"if", U"imagine", U"in", U"it", U"it's", U"its", U"my", U"on", U"one", U"our", U"she", U"she's", U"since", U"suppose", U"that", U"the", U"their", U"there", U"there's", U"these", U"they", U"they're", U"they've", U"this", U"those", U"though", U"we", U"we're", U"we've", U"when", U"whenever", U"while", U"you", U"you're", U"you've", U"your"};
const WordSet kSubjectDrop = [] {
    WordSet drop = kRequestStarts;
    for (const char32_t *w : {U"on", U"off", U"up", U"down", U"in", U"the", U"my", U"a", U"an", U"some", U"me", U"to",
                              U"for", U"please"})
        drop.insert(w);
    return drop;
}();
constexpr int kFollowDepth = 2;      // FOLLOW_DEPTH
constexpr int kCharsPerTask = 1000;  // CHARS_PER_TASK
constexpr char32_t kRightQuote = 0x2019;  // ’

// -- Python str operations over code points ------------------------------------------------------
bool is_ascii_lower(char32_t c) { return c >= U'a' && c <= U'z'; }
bool is_ascii_alnum_lower(char32_t c) { return is_ascii_lower(c) || (c >= U'0' && c <= U'9'); }
bool in(char32_t c, const char32_t *chars) {
    for (; *chars; ++chars)
        if (*chars == c) return true;
    return false;
}

U32 strip_chars(const U32 &s, const char32_t *chars) {
    size_t a = 0, b = s.size();
    while (a < b && in(s[a], chars)) ++a;
    while (b > a && in(s[b - 1], chars)) --b;
    return s.substr(a, b - a);
}
U32 rstrip_chars(const U32 &s, const char32_t *chars) {
    size_t b = s.size();
    while (b > 0 && in(s[b - 1], chars)) --b;
    return s.substr(0, b);
}
U32 strip_ws(const U32 &s) {
    size_t a = 0, b = s.size();
    while (a < b && py_isspace(s[a])) ++a;
    while (b > a && py_isspace(s[b - 1])) --b;
    return s.substr(a, b - a);
}
U32 rstrip_ws(const U32 &s) {
    size_t b = s.size();
    while (b > 0 && py_isspace(s[b - 1])) --b;
    return s.substr(0, b);
}
std::vector<U32> split_ws(const U32 &s) {
    std::vector<U32> out;
    size_t i = 0, n = s.size();
    while (i < n) {
        while (i < n && py_isspace(s[i])) ++i;
        if (i == n) break;
        size_t j = i;
        while (j < n && !py_isspace(s[j])) ++j;
        out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}
U32 join(const std::vector<U32> &parts, const U32 &sep) {
    U32 out;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i) out += sep;
        out += parts[i];
    }
    return out;
}
bool starts_with(const U32 &s, const U32 &prefix) { return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const U32 &s, const U32 &suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const U32 &s, const U32 &part) { return s.find(part) != U32::npos; }
U32 replace_all(const U32 &s, const U32 &from, const U32 &to) {
    if (from.empty() || s.find(from) == U32::npos) return s;
    U32 out;
    size_t i = 0;
    for (size_t at; (at = s.find(from, i)) != U32::npos; i = at + from.size()) {
        out.append(s, i, at - i);
        out += to;
    }
    out.append(s, i, U32::npos);
    return out;
}
U32 lower(const U32 &s) { return unicode::py_lower(s); }
U32 replace_quote(const U32 &s) {  // .replace("’", "'")
    U32 out = s;
    for (char32_t &c : out)
        if (c == kRightQuote) c = U'\'';
    return out;
}
// Python's s[a:b] with clamped bounds (a, b >= 0)
U32 slice(const U32 &s, size_t a, size_t b) {
    if (a >= s.size() || b <= a) return U32();
    return s.substr(a, std::min(b, s.size()) - a);
}
U32 slice_from(const U32 &s, size_t a) { return a >= s.size() ? U32() : s.substr(a); }
size_t skip_ws(const U32 &s, size_t i) {
    while (i < s.size() && py_isspace(s[i])) ++i;
    return i;
}

// -- re primitives -------------------------------------------------------------------------------
bool word_at(const U32 &s, size_t i) { return i < s.size() && re_word(s[i]); }
// \b at i
bool boundary(const U32 &s, size_t i) {
    bool before = i > 0 && word_at(s, i - 1);
    return before != word_at(s, i);
}
// `lit` (lower-case ASCII letters, spaces, quotes) at s[i:] under re.IGNORECASE
bool ci_at(const U32 &s, size_t i, const U32 &lit) {
    if (i + lit.size() > s.size()) return false;
    for (size_t k = 0; k < lit.size(); ++k) {
        char32_t l = lit[k], c = s[i + k];
        if (is_ascii_lower(l) ? unicode::re_ignorecase_letter(c) != l : c != l) return false;
    }
    return true;
}

// _WORD.findall: [a-z0-9]+(?:['’][a-z]+)?
std::vector<U32> find_words(const U32 &s) {
    std::vector<U32> out;
    size_t i = 0, n = s.size();
    while (i < n) {
        if (!is_ascii_alnum_lower(s[i])) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < n && is_ascii_alnum_lower(s[j])) ++j;
        if (j + 1 < n && (s[j] == U'\'' || s[j] == kRightQuote) && is_ascii_lower(s[j + 1])) {
            j += 2;
            while (j < n && is_ascii_lower(s[j])) ++j;
        }
        out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}
// _WORD.search(...).group(0) or ""
U32 search_word(const U32 &s) {
    size_t i = 0, n = s.size();
    while (i < n && !is_ascii_alnum_lower(s[i])) ++i;
    size_t j = i;
    while (j < n && is_ascii_alnum_lower(s[j])) ++j;
    if (j > i && j + 1 < n && (s[j] == U'\'' || s[j] == kRightQuote) && is_ascii_lower(s[j + 1])) {
        j += 2;
        while (j < n && is_ascii_lower(s[j])) ++j;
    }
    return s.substr(i, j - i);
}

bool all_digits(const U32 &w) {
    for (char32_t c : w)
        if (c < U'0' || c > U'9') return false;
    return !w.empty();
}

std::set<U32> content_words(const U32 &text) {
    std::set<U32> out;
    for (U32 &w : find_words(replace_quote(lower(text))))
        if (!kStopwords.count(w) && (w.size() > 2 || all_digits(w))) out.insert(std::move(w));
    return out;
}

U32 task_key(const U32 &line) { return join(find_words(lower(line)), U" "); }

// _LETTERS.match: the leading run of a-z
U32 leading_letters(const U32 &s) {
    size_t i = 0;
    while (i < s.size() && is_ascii_lower(s[i])) ++i;
    return s.substr(0, i);
}

// str.lower() of the first `count` code points of `s` (all of them when `whole`)
U32 lower_prefix(const U32 &s, size_t count, bool &whole) {
    whole = s.size() <= count;
    U32 out;
    for (size_t i = 0; i < s.size() && i < count; ++i) unicode::py_lower_append(s[i], out);
    return out;
}

U32 strip_fillers(const U32 &clause) {
    static const char32_t *const kPunct = U" ,;:.-";
    // every filler and sequence word is shorter than this: lowering this much of the clause decides
    // each test as lowering all of it would (a clause of "and and and ..." is not lowered whole per word)
    constexpr size_t kPrefix = 64;
    U32 c = strip_chars(clause, kPunct);
    bool changed = true;
    while (changed && !c.empty()) {
        changed = false;
        bool whole;
        U32 low = lower_prefix(c, kPrefix, whole);
        U32 word = leading_letters(low);
        for (const U32 &f : kFillers) {
            if (leading_letters(f) != word) continue;
            if ((whole && low == f) || starts_with(low, f + U" ") || starts_with(low, f + U",")) {
                c = strip_chars(slice_from(c, f.size()), kPunct);
                changed = true;
                break;
            }
        }
        if (changed) continue;
        for (const U32 &f : kSequenceWords) {
            if (leading_letters(f) != word) continue;
            bool bare = false;  // low.rstrip(".!") == f
            if (starts_with(low, f)) {
                U32 full = whole ? low : lower(c);
                bare = rstrip_chars(full, U".!") == f;
            }
            if (bare || starts_with(low, f + U",")) {
                c = strip_chars(slice_from(c, f.size()), kPunct);
                changed = true;
                break;
            }
        }
    }
    return c;
}

U32 first_word(const U32 &text) { return search_word(replace_quote(lower(text))); }

bool starts_request(const U32 &text) { return kRequestStarts.count(first_word(strip_fillers(text))) > 0; }

// _REQUEST_PHRASE.search (re.IGNORECASE)
const std::vector<U32> kRequestPhrases = [] {
    std::vector<U32> out{U"can you", U"could you", U"would you", U"will you", U"please", U"help me", U"let me", U"let's"};
    for (const U32 who : {U"i", U"you"}) {
        for (const U32 would : {U"'d", U" would"})
            for (const U32 like : {U"like", U"love"}) out.push_back(who + would + U" " + like);
        for (const U32 want : {U"want", U"need", U"wanna", U"have to", U"must"}) out.push_back(who + U" " + want);
    }
    for (const U32 am : {U"i'm", U"i am"})
        for (const U32 doing : {U"looking", U"trying", U"searching", U"interested", U"planning", U"curious",
                                U"considering", U"thinking", U"hoping"})
            out.push_back(am + U" " + doing);
    return out;
}();

bool request_phrase(const U32 &text) {
    // \?\s*["'”’]?\s*$
    U32 tail = rstrip_ws(text);
    if (!tail.empty() && in(tail.back(), U"\"'\u201d\u2019")) tail = rstrip_ws(tail.substr(0, tail.size() - 1));
    if (!tail.empty() && tail.back() == U'?') return true;
    // \b(?:...)\b
    for (size_t i = 0; i < text.size(); ++i) {
        if (!boundary(text, i)) continue;
        for (const U32 &p : kRequestPhrases)
            if (ci_at(text, i, p) && boundary(text, i + p.size())) return true;
    }
    return false;
}

struct Clause {
    U32 text;
    bool joined = false;
};

bool asked(const Clause &clause) {
    return clause.joined && !kContextStarts.count(first_word(strip_fillers(clause.text)));
}

bool is_request(const U32 &clause) {
    U32 text = replace_quote(strip_fillers(clause));
    if (request_phrase(text)) return true;
    U32 word = first_word(text);
    if (find_words(lower(text)).size() <= 3) return kRequestStarts.count(word) > 0;
    return !kContextStarts.count(word);
}

// -- clause splitting ----------------------------------------------------------------------------
// (?<=[.!?])\s+(?=\S) as re.split uses it
std::vector<U32> split_sentence_ends(const U32 &s) {
    std::vector<U32> out;
    size_t last = 0, i = 1, n = s.size();
    while (i < n) {
        if (py_isspace(s[i]) && in(s[i - 1], U".!?")) {
            size_t j = skip_ws(s, i);
            if (j < n) {
                out.push_back(s.substr(last, i - last));
                last = j;
                i = j;
                continue;
            }
            break;  // the run reaches the end: no more matches
        }
        ++i;
    }
    out.push_back(s.substr(last));
    return out;
}

const std::vector<U32> kHardWords{U"then", U"after that", U"also", U"plus", U"as well as", U"while you're at it",
                                  U"while you\u2019re at it", U"while you are at it", U"one more thing", U"on top of that"};

// the end of a _HARD match at p, or npos
size_t match_hard(const U32 &s, size_t p) {
    const size_t n = s.size();
    size_t a = skip_ws(s, p);
    if (a < n && s[a] == U';') return skip_ws(s, a + 1);  // \s*;\s*
    size_t c = skip_ws(s, a < n && s[a] == U',' ? a + 1 : a);  // \s*,?\s*
    // \boh,? and\b,?\s*
    if (boundary(s, c) && ci_at(s, c, U"oh")) {
        size_t r = c + 2;
        if (r < n && s[r] == U',') ++r;
        if (ci_at(s, r, U" and") && boundary(s, r + 4)) {
            size_t e = r + 4;
            if (e < n && s[e] == U',') ++e;
            return skip_ws(s, e);
        }
    }
    // (?:\band\s+)?\b(?:then|...)\b,?\s+
    size_t q = c;
    if (boundary(s, c) && ci_at(s, c, U"and") && c + 3 < n && py_isspace(s[c + 3])) q = skip_ws(s, c + 3);
    if (!boundary(s, q)) return U32::npos;
    for (const U32 &w : kHardWords) {
        if (!ci_at(s, q, w)) continue;
        size_t r = q + w.size();
        if (!boundary(s, r)) continue;
        if (r < n && s[r] == U',' && r + 1 < n && py_isspace(s[r + 1])) return skip_ws(s, r + 1);
        if (r < n && py_isspace(s[r])) return skip_ws(s, r);
    }
    return U32::npos;
}

std::vector<U32> split_hard(const U32 &s) {
    std::vector<U32> out;
    size_t last = 0;
    for (size_t p = 0; p < s.size();) {
        size_t e = match_hard(s, p);
        if (e == U32::npos) {
            ++p;
            continue;
        }
        out.push_back(s.substr(last, p - last));
        last = p = e;
    }
    out.push_back(s.substr(last));
    return out;
}

// the end of an _AND match at p, or npos: \s*,?\s+\band\b,?\s+ | \s*,\s+
size_t match_and(const U32 &s, size_t p) {
    const size_t n = s.size();
    size_t a = skip_ws(s, p), c;
    bool comma = a < n && s[a] == U',';
    if (comma) {
        c = skip_ws(s, a + 1);
        if (c == a + 1) return U32::npos;  // a comma needs space after it in both branches
    } else {
        if (a == p) return U32::npos;
        c = a;
    }
    if (ci_at(s, c, U"and") && boundary(s, c + 3)) {
        size_t r = c + 3;
        if (r < n && s[r] == U',' && r + 1 < n && py_isspace(s[r + 1])) return skip_ws(s, r + 1);
        if (r < n && py_isspace(s[r])) return skip_ws(s, r);
    }
    return comma ? c : U32::npos;
}

// _AND.split: clause, separator, clause, ...
std::vector<U32> split_and(const U32 &s) {
    std::vector<U32> out;
    size_t last = 0;
    for (size_t p = 0; p < s.size();) {
        size_t e = match_and(s, p);
        if (e == U32::npos) {
            ++p;
            continue;
        }
        out.push_back(s.substr(last, p - last));
        out.push_back(s.substr(p, e - p));
        last = p = e;
    }
    out.push_back(s.substr(last));
    return out;
}

using Saved = std::vector<std::pair<U32, U32>>;

// text.lower() with U+0130 lowered to "i" (rules.py _lower_aligned)
U32 lower_aligned(const U32 &s) {
    U32 replaced = s;
    for (char32_t &c : replaced)
        if (c == 0x130) c = U'i';
    return lower(replaced);
}

// _protect: quoted text and fixed phrases with "and" behind placeholders
U32 protect(const U32 &input, Saved &saved) {
    U32 text = input;
    U32 stripped = strip_ws(text);
    if (stripped.size() > 1 && in(stripped.front(), U"\"\u201c") && in(stripped.back(), U"\"\u201d")) {
        size_t quotes = 0;
        for (char32_t c : stripped) quotes += c == U'"';
        if (quotes <= 2) text = stripped.substr(1, stripped.size() - 2);
    }
    auto keep = [&saved](const U32 &span) {
        U32 key(1, U'\0');  // "\x00{n}\x00"
        for (char digit : std::to_string(saved.size())) key.push_back(static_cast<char32_t>(digit));
        key.push_back(U'\0');
        saved.emplace_back(key, span);
        return key;
    };
    // _QUOTED: "[^"\n]{1,400}"|“[^”\n]{1,400}”
    U32 out;
    size_t i = 0, n = text.size();
    while (i < n) {
        char32_t open = text[i];
        if (open == U'"' || open == 0x201C) {
            char32_t close = open == U'"' ? U'"' : char32_t(0x201D);
            size_t j = i + 1;
            while (j < n && j - i - 1 < 400 && text[j] != close && text[j] != U'\n') ++j;
            if (j > i + 1 && j < n && text[j] == close) {
                out += keep(text.substr(i, j + 1 - i));
                i = j + 1;
                continue;
            }
        }
        out.push_back(text[i++]);
    }
    text = std::move(out);
    U32 low = lower_aligned(text);
    for (const U32 &phrase : kFixedPhrases) {
        if (!contains(phrase, U" and ")) continue;
        size_t start = low.find(phrase);
        while (start != U32::npos) {
            U32 key = keep(slice(text, start, start + phrase.size()));
            text = slice(text, 0, start) + key + slice_from(text, start + phrase.size());
            // Python lowers the whole new text and searches it from its start; the lower case of the
            // rest is unchanged (a sigma next to the key may turn final or not: no phrase holds one)
            // and nothing before `start` matched, nor can a match reach into the key's \0 and digits
            low = slice(low, 0, start) + key + slice_from(low, start + phrase.size());
            start = low.find(phrase, start);
        }
    }
    return text;
}

U32 restore(const U32 &text, const Saved &saved) {
    if (text.find(U'\0') == U32::npos) return text;  // no placeholder: nothing to replace
    U32 out = text;
    for (const auto &kv : saved) out = replace_all(out, kv.first, kv.second);
    return out;
}

std::vector<U32> sentences(const U32 &text) {
    std::vector<U32> parts;
    U32 buf;
    for (const U32 &piece : split_sentence_ends(text)) {
        buf = buf.empty() ? piece : strip_ws(buf + U" " + piece);
        // buf.rstrip(".!?").split()[-1].lower(), found from the end (buf grows over a run of "A. B. C.")
        size_t end = buf.size();
        while (end > 0 && in(buf[end - 1], U".!?")) --end;
        while (end > 0 && py_isspace(buf[end - 1])) --end;
        size_t start = end;
        while (start > 0 && !py_isspace(buf[start - 1])) --start;
        U32 last = lower(buf.substr(start, end - start));
        if (ends_with(buf, U".") &&
            (kAbbrev.count(rstrip_chars(last, U".")) || (last.size() == 1 && unicode::py_isalpha(last[0]))))
            continue;
        parts.push_back(buf);
        buf.clear();
    }
    if (!buf.empty()) parts.push_back(buf);
    return parts;
}

std::vector<Clause> split_clauses(const U32 &text) {
    Saved saved;
    U32 protected_text = protect(text, saved);
    std::vector<std::pair<U32, bool>> out;
    for (const U32 &sent : sentences(protected_text)) {
        std::vector<U32> hard = split_hard(sent);
        if (hard.size() > 1 && strip_chars(hard[0], U" ,.").empty() && !out.empty()) out.back().second = true;
        for (size_t i = 0; i < hard.size(); ++i) {
            const U32 &piece = hard[i];
            if (piece.empty() || strip_chars(piece, U" ,.").empty()) continue;
            std::vector<U32> soft = split_and(piece);
            U32 cur = soft[0];
            bool first = i > 0, last = i + 1 < hard.size();
            for (size_t k = 1; k + 1 < soft.size(); k += 2) {
                const U32 &sep = soft[k], &nxt = soft[k + 1];
                if (starts_request(nxt) && !content_words(restore(cur, saved)).empty()) {
                    out.emplace_back(cur, first);
                    cur = nxt;
                    first = false;
                } else {
                    cur += sep;
                    cur += nxt;
                }
            }
            out.emplace_back(cur, first || last);
        }
    }
    std::vector<Clause> clauses;
    for (const auto &c : out) {
        U32 text_c = strip_fillers(restore(c.first, saved));
        if (!text_c.empty()) clauses.push_back({text_c, c.second});
    }
    return clauses;
}

// -- elliptical follow-ups -----------------------------------------------------------------------
struct UTurn {
    std::string role;
    U32 content;
};

// \b(it|that|this|them|those|these)\b(?!['’]) (re.IGNORECASE): the match's start and end, or npos
std::pair<size_t, size_t> find_pronoun(const U32 &s) {
    static const U32 kPronouns[] = {U"it", U"that", U"this", U"them", U"those", U"these"};
    for (size_t i = 0; i < s.size(); ++i) {
        if (!boundary(s, i)) continue;
        for (const U32 &p : kPronouns) {
            size_t e = i + p.size();
            if (ci_at(s, i, p) && boundary(s, e) && !(e < s.size() && (s[e] == U'\'' || s[e] == kRightQuote)))
                return {i, e};
        }
    }
    return {U32::npos, U32::npos};
}

bool is_fragment(const U32 &clause) {
    U32 low = join(find_words(replace_quote(lower(clause))), U" ");
    if (split_ws(low).size() > 6) return false;
    for (const U32 &p : kEllipsisPrefixes)
        if (starts_with(low, p)) return true;
    return false;
}

bool is_status(const U32 &clause, const std::vector<U32> &words, const std::set<U32> &own) {
    if (words.size() > 7) return false;
    bool any = false;
    for (const U32 &w : words) any = any || kStatusWords.count(w);
    if (!any) return false;
    for (const U32 &w : own)
        if (!kStatusWords.count(w)) return false;
    return ends_with(rstrip_ws(clause), U"?") || kQuestionOpeners.count(words[0]);
}

enum class Why { none, retry, status, pronoun, fragment, answer };

Why is_elliptical(const U32 &clause, const std::vector<UTurn> &history, bool first = true) {
    if (history.empty()) return Why::none;
    U32 low = join(find_words(replace_quote(lower(clause))), U" ");
    for (const U32 &cue : kRetryCues)
        if (contains(low, cue)) return Why::retry;
    std::vector<U32> words = split_ws(low);
    if (words.empty()) return Why::none;
    std::set<U32> own = content_words(clause);
    if (is_status(clause, words, own)) return Why::status;
    if (find_pronoun(clause).first != U32::npos && words.size() <= 7) {
        size_t outside = 0;
        for (const U32 &w : own) outside += !kRequestStarts.count(w);
        if (outside <= 1) return Why::pronoun;
    }
    if (is_fragment(clause)) return Why::fragment;
    U32 last_assistant;
    for (size_t j = history.size(); j-- > 0;)
        if (history[j].role == "assistant") {
            last_assistant = history[j].content;
            break;
        }
    if (first && ends_with(rstrip_ws(last_assistant), U"?") && words.size() <= 5 && !kRequestStarts.count(words[0]))
        return Why::answer;
    if (words.size() <= 3 && !kRequestStarts.count(words[0])) return Why::fragment;
    return Why::none;
}

// ^(?:(?:can|could|would|will) you|please|i(?:'d| would) like to|i (?:want|need) to|let's)\s+ removed
U32 strip_polite(const U32 &s) {
    static const U32 kOpeners[] = {U"can you", U"could you", U"would you", U"will you", U"please", U"i'd like to",
                                   U"i would like to", U"i want to", U"i need to", U"let's"};
    for (const U32 &o : kOpeners) {
        if (ci_at(s, 0, o) && o.size() < s.size() && py_isspace(s[o.size()])) return s.substr(skip_ws(s, o.size()));
    }
    return s;
}

U32 subject(const U32 &request) {
    std::vector<U32> words = split_ws(strip_polite(strip_fillers(request)));
    size_t i = 0;
    while (i + 1 < words.size() && kSubjectDrop.count(strip_chars(lower(words[i]), U",.?!"))) ++i;
    return strip_chars(join(std::vector<U32>(words.begin() + std::min(i, words.size()), words.end()), U" "), U" ,.?!");
}

class Decomposer {
public:
    Decomposer(int max_tasks, int max_chars) : max_tasks_(max_tasks), max_chars_(max_chars) {}

    std::vector<Clause> clauses(const U32 &text) const {
        if (static_cast<long>(text.size()) <= max_chars_) return split_clauses(text);
        std::vector<Clause> c = split_clauses(text.substr(0, max_chars_));
        if (c.size() > 1) c.pop_back();
        return c;
    }

    U32 tail(const U32 &content) const {
        return static_cast<long>(content.size()) > max_chars_ ? content.substr(content.size() - max_chars_) : content;
    }

    U32 previous_request(const std::vector<UTurn> &history, size_t upto, std::map<U32, U32> *memo) const {
        for (size_t j = upto; j-- > 0;) {
            const UTurn &t = history[j];
            if (t.role != "user") continue;
            if (memo) {
                auto it = memo->find(t.content);
                if (it != memo->end()) return it->second;
            }
            U32 text = tail(t.content);
            std::vector<Clause> cl = split_clauses(text);
            if (text.size() < t.content.size() && cl.size() > 1) cl.erase(cl.begin());
            U32 found;
            bool have = false;
            for (const Clause &c : cl)  // the last meaningful clause (_is_elliptical(c, []) is always None)
                if (!content_words(c.text).empty()) found = c.text, have = true;
            if (!have) found = cl.empty() ? text : cl.back().text;
            if (memo) (*memo)[t.content] = found;
            return found;
        }
        return U32();
    }

    std::vector<U32> previous_requests(const std::vector<UTurn> &history, std::map<U32, U32> *memo, int depth,
                                       std::map<std::pair<size_t, int>, std::vector<U32>> &seen) const {
        for (size_t j = history.size(); j-- > 0;) {
            const UTurn &t = history[j];
            if (t.role != "user") continue;
            if (depth >= kFollowDepth) {
                U32 found = previous_request(history, j + 1, memo);
                return found.empty() ? std::vector<U32>() : std::vector<U32>{found};
            }
            auto key = std::make_pair(j, depth);
            auto it = seen.find(key);
            if (it != seen.end()) return it->second;
            U32 text = tail(t.content);
            if (text.size() < t.content.size()) {  // the clip cut a clause: start past its end
                size_t end = clause_end(text);
                if (end != U32::npos) text = text.substr(end);
            }
            std::vector<UTurn> before(history.begin(), history.begin() + j);
            std::vector<U32> tasks = this->tasks(text, before, depth + 1, &seen);
            std::vector<U32> requests;
            for (U32 &x : tasks)
                if (!content_words(x).empty()) requests.push_back(std::move(x));
            if (requests.size() > static_cast<size_t>(max_tasks_))
                requests.erase(requests.begin(), requests.end() - max_tasks_);
            seen[key] = requests;
            return requests;
        }
        return {};
    }

    std::vector<U32> resolve(const U32 &clause, const std::vector<UTurn> &history, std::map<U32, U32> *memo, int depth,
                             std::map<std::pair<size_t, int>, std::vector<U32>> *seen, bool first) const {
        Why why = is_elliptical(clause, history, first);
        if (why == Why::none) return {clause};
        U32 prev;
        if (seen) {
            std::vector<U32> requests = previous_requests(history, memo, depth, *seen);
            if (why == Why::retry || why == Why::status) return requests.empty() ? std::vector<U32>{clause} : requests;
            if (!requests.empty()) prev = requests.back();
        } else {
            prev = previous_request(history, history.size(), memo);
        }
        if (prev.empty()) return {clause};
        if (why == Why::retry) return {prev};
        if (why == Why::pronoun) {
            U32 subj = subject(prev);
            if (subj.empty()) return {clause + U" " + prev};
            auto at = find_pronoun(clause);
            return {clause.substr(0, at.first) + subj + clause.substr(at.second)};
        }
        U32 rest = clause;
        for (const U32 &opener : {U32(U"what about"), U32(U"how about")})
            if (ci_at(clause, 0, opener) && boundary(clause, opener.size())) {
                rest = clause.substr(opener.size());
                break;
            }
        U32 frag = rstrip_chars(strip_fillers(rest), U"?.! ");
        return {strip_ws(rstrip_chars(prev, U"?.! ") + U" " + frag)};
    }

    std::vector<U32> tasks(const U32 &query, const std::vector<UTurn> &history, int depth,
                           std::map<std::pair<size_t, int>, std::vector<U32>> *seen_in) const {
        std::vector<U32> tasks, context;
        bool resolved_any = false;
        std::map<U32, U32> memo;
        std::map<std::pair<size_t, int>, std::vector<U32>> own_seen;
        auto &seen = seen_in ? *seen_in : own_seen;
        std::set<U32> keys;
        std::vector<Clause> cl = clauses(query);
        for (size_t n = 0; n < cl.size(); ++n) {
            const Clause &clause = cl[n];
            bool fragment = !tasks.empty() && is_fragment(clause.text);
            std::vector<UTurn> local;
            if (fragment) {
                local = history;
                local.push_back({"user", tasks.back()});
            }
            bool own = !context.empty() && !fragment && is_elliptical(clause.text, history) == Why::pronoun;
            std::vector<U32> resolved = own ? std::vector<U32>{clause.text}
                                            : resolve(clause.text, fragment ? local : history, &memo, depth,
                                                      fragment ? nullptr : &seen, n == 0);
            for (U32 &task : resolved) {
                if (task == clause.text && !is_request(clause.text) && !asked(clause)) {
                    context.push_back(clause.text);
                    continue;
                }
                resolved_any = resolved_any || task != clause.text;
                if (!context.empty()) {
                    context.push_back(task);
                    task = join(context, U", ");
                    context.clear();
                }
                U32 key = task_key(task);
                if (!keys.count(key) && !content_words(task).empty()) {
                    tasks.push_back(task);
                    keys.insert(key);
                }
            }
            if (tasks.size() > static_cast<size_t>(max_tasks_)) break;
        }
        if (!context.empty() && !tasks.empty()) {
            context.insert(context.begin(), tasks.back());
            tasks.back() = join(context, U", ");
        }
        if (tasks.size() <= 1 && !resolved_any) return {query};
        if (tasks.size() > static_cast<size_t>(max_tasks_)) tasks.resize(max_tasks_);
        return tasks;
    }

private:
    int max_tasks_;
    long max_chars_;

    // _CLAUSE_END.search(text).end(): [.;!?,]\s+
    static size_t clause_end(const U32 &s) {
        for (size_t i = 0; i + 1 < s.size(); ++i)
            if (in(s[i], U".;!?,") && py_isspace(s[i + 1])) return skip_ws(s, i + 1);
        return U32::npos;
    }
};

}  // namespace

std::vector<std::string> decompose_rules(const std::string &query, const std::vector<Turn> &history, int max_tasks,
                                         int max_chars) {
    if (max_tasks < 1) fail(MS_ERR_ARGUMENT, "rules max_tasks must be a positive int, got " + std::to_string(max_tasks));
    if (max_chars == -1) max_chars = max_tasks * kCharsPerTask;
    if (max_chars < 1) fail(MS_ERR_ARGUMENT, "rules max_chars must be a positive int, got " + std::to_string(max_chars));
    std::vector<UTurn> turns;
    turns.reserve(history.size());
    for (size_t i = 0; i < history.size(); ++i)
        turns.push_back({history[i].role, unicode::decode_utf8(history[i].content, "history[" + std::to_string(i) + "].content")});
    Decomposer rules(max_tasks, max_chars);
    std::vector<std::string> out;
    for (const U32 &t : rules.tasks(unicode::decode_utf8(query, "query"), turns, 0, nullptr)) out.push_back(unicode::encode_utf8(t));
    return out;
}

}  // namespace ms
