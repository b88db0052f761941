"""Bound the element nesting of an HTML page before it is parsed, in one linear pass.

An HTML5 tree builder checks "is there an open X in scope" on many tags by walking its stack of
open elements, so a page nested N elements deep costs N² (50,000 nested ``<div>`` took
seconds, 200,000 minutes). Browsers cap the depth (Chromium at 512); pgrag does the same
before handing the page to the parser: :func:`bound_nesting` follows the open elements with a
model of the HTML5 rules that close elements (end tags, ``<p>``, ``<li>``, table cells,
misnested formatting tags), each step in constant time, and replaces every tag that would open
an element deeper than MAX_HTML_DEPTH (and its end tag) with a space. The text of those
elements is kept, flattened into their ancestor at the cap.

The model need not be exact, only never shallower than the parser by more than a constant
factor: where a rule is unsure (foreign content, framesets, misnested formatting) it closes
fewer elements than the parser would, so it counts deeper and flattens earlier. Fuzzed tag
soups and the patterns in tests/test_extract_limits.py stay within twice the cap; real pages
(400 of them, up to 14 levels deep) come out unchanged.
"""

from __future__ import annotations

import re

MAX_HTML_DEPTH = 256


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


VOID = _names(
    "area base basefont bgsound br col embed frame hr image img input keygen link meta param "
    "source track wbr"
)
# Raw text and RCDATA: their content is text up to the matching end tag.
# (Not noscript: the parser runs without scripting, so it reads what noscript holds as markup.
# In SVG and MathML none of these is raw text.)
RAW = _names("script style xmp iframe noembed noframes textarea title")
SPECIAL = _names(
    "address applet area article aside base basefont bgsound blockquote body br button caption "
    "center col colgroup dd details dir div dl dt embed fieldset figcaption figure footer form "
    "frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html iframe img input keygen li "
    "link listing main marquee menu meta nav noembed noframes noscript object ol p param "
    "plaintext pre script search section select source style summary table tbody td template "
    "textarea tfoot th thead title tr track ul wbr xmp foreignobject desc mi mo mn ms mtext "
    "annotation-xml"
)
# frameset is not a scope boundary for the parser, but once in a frameset it ignores every
# other end tag and most start tags: as a boundary, no rule of the model closes it.
SCOPE = _names(
    "applet caption html table td th marquee object template foreignobject desc mi mo mn ms "
    "mtext annotation-xml frameset"
)
FORMATTING = _names("a b big code em font i nobr s small strike strong tt u")
CLOSES_P = _names(
    "address article aside blockquote center details dialog dir div dl fieldset figcaption "
    "figure footer form header hgroup h1 h2 h3 h4 h5 h6 hr listing main menu nav ol p pre "
    "search section summary ul li dd dt plaintext xmp"
)
HEADINGS = _names("h1 h2 h3 h4 h5 h6")
TABLE_PARTS = _names("caption colgroup tbody thead tfoot tr td th")
# html, head and body are there from the start: their tags open nothing, and their end tags
# close nothing (</body> only changes the parser's mode, the open elements stay open).
PAGE = _names("html head body")
_UNUSUAL = VOID | RAW | TABLE_PARTS | PAGE | {"plaintext"}
_NOT_CLOSED = VOID | PAGE
HIDDEN, DEAD = 1, 2
MARKERS = _names("applet marquee object td th caption template")
# Start tags that close an open element of their group unless a boundary lies between (the
# list item, definition list and table rules).
_LI_STOP = SPECIAL - {"address", "div", "p", "li"}
_DD_STOP = SPECIAL - {"address", "div", "p", "dd", "dt"}
_GROUPS: dict[str, tuple[frozenset[str], str]] = {}
for _group, _bound in (
    ("li", "li_stop"),
    ("dd dt", "dd_stop"),
    ("td th", "cell_stop"),
    ("tr", "row_stop"),
    ("tbody thead tfoot", "section_stop"),
    ("button", "scope"),
):
    for _name in _group.split():
        _GROUPS[_name] = (_names(_group), _bound)
# Start tags with a rule in _start (any other only opens its element).
_RULED = CLOSES_P | HEADINGS | _GROUPS.keys() | _names("a nobr table option optgroup")
CATEGORIES = {
    "special": SPECIAL,
    "scope": SCOPE,
    "marker": MARKERS,
    "li_stop": _LI_STOP,
    "dd_stop": _DD_STOP,
    "cell_stop": SCOPE | {"tr"},
    "row_stop": SCOPE | {"tbody", "thead", "tfoot"},
    "section_stop": SCOPE,
    "p_stop": SCOPE | {"button"},
    "list_scope": SCOPE | {"ol", "ul"},
}
# The scope an end tag must find its element in (else it is ignored); others: "scope".
_END_SCOPE = {"p": "p_stop", "li": "list_scope"}


class _Stack:
    """Open elements with constant-time "nearest open X" look-ups.

    ``lost`` follows the formatting elements an end tag closed implicitly (``<p><b>x</p>``):
    the parser opens them again before the next text or start tag, so they count again then.
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.state: list[int] = []  # HIDDEN (the parser never sees it) | DEAD (taken out)
        self.markers: list[int] = []  # open markers (cells, captions) when it opened
        self.cat: dict[str, list[int]] = {c: [] for c in CATEGORIES}
        self.marker_list = self.cat["marker"]
        # name -> (positions of the open ones, the category lists it is in)
        self.info: dict[str, tuple[list[int], tuple[list[int], ...]]] = {}
        self.lost: list[tuple[str, int]] = []
        self.depth = 0  # open and shown

    def _info(self, name: str) -> tuple[list[int], tuple[list[int], ...]]:
        got = self.info.get(name)
        if got is None:
            cats = tuple(self.cat[c] for c, names in CATEGORIES.items() if name in names)
            got = self.info[name] = ([], cats)
        return got

    def nearest(self, name: str) -> int:
        got = self.info.get(name)
        return got[0][-1] if got and got[0] else -1

    def nearest_cat(self, cat: str) -> int:
        at = self.cat[cat]
        return at[-1] if at else -1

    def push(self, name: str, hidden: bool) -> None:
        i = len(self.names)
        self.names.append(name)
        self.state.append(HIDDEN if hidden else 0)
        self.markers.append(len(self.marker_list))
        where, cats = self._info(name)
        where.append(i)
        for at in cats:
            at.append(i)
        if not hidden:
            self.depth += 1

    def pop_to(self, i: int) -> bool:
        """Close the elements from the top down to position ``i``; whether ``i`` was hidden."""
        target_hidden = bool(self.state[i] & HIDDEN)
        names, states, markers_of, info = self.names, self.state, self.markers, self.info
        while len(names) > i:
            name = names.pop()
            state = states.pop()
            markers = markers_of.pop()
            where, cats = info[name]
            for at in cats:
                at.pop()
            if not state & DEAD:
                where.pop()
                if not state & HIDDEN:
                    self.depth -= 1
                    if name in FORMATTING and len(names) != i:
                        self.lost.append((name, markers))
            if name in MARKERS:
                open_markers = len(self.marker_list)
                while self.lost and self.lost[-1][1] > open_markers:
                    self.lost.pop()
        return target_hidden

    def take_out(self, i: int) -> None:
        """Misnested formatting (``<b><div></b>``): ``i`` leaves the stack, the rest stays."""
        self.info[self.names[i]][0].pop()
        self.state[i] |= DEAD
        if not self.state[i] & HIDDEN:
            self.depth -= 1

    def reconstruct(self) -> None:
        """Open again the formatting elements closed implicitly (in the current cell)."""
        open_markers = len(self.marker_list)
        keep = [x for x in self.lost if x[1] < open_markers]
        for name, markers in self.lost:
            if markers == open_markers:
                self.push(name, False)
        self.lost = keep

    def forget(self, name: str) -> None:
        """An end tag for a formatting element closed implicitly: it is not reopened."""
        for k in range(len(self.lost) - 1, -1, -1):
            if self.lost[k][0] == name:
                del self.lost[k]
                return


def _start(stack: _Stack, name: str, max_depth: int) -> bool:
    """Apply the closing rules a start tag implies; True when its element must be hidden."""
    if _foreign(stack):  # SVG and MathML elements nest as written: no rule closes one
        return stack.depth >= max_depth
    if name in CLOSES_P:
        p = stack.nearest("p")
        if p > stack.nearest_cat("p_stop"):
            stack.pop_to(p)
    group = _GROUPS.get(name)
    if group is not None:
        same, bound = group
        i = max(stack.nearest(n) for n in same)
        if i >= 0 and i > stack.nearest_cat(bound):
            stack.pop_to(i)
    if name in ("a", "nobr") and stack.nearest(name) >= 0:
        _end(stack, name)
    if stack.names and (
        (name in HEADINGS and stack.names[-1] in HEADINGS)
        or (name in ("option", "optgroup") and stack.names[-1] == "option")
    ):  # these close the current element only
        stack.pop_to(len(stack.names) - 1)
    if name == "table":  # a table directly in a table (not in a cell) closes it
        i = stack.nearest("table")
        if i >= 0 and i == stack.nearest_cat("scope"):
            stack.pop_to(i)
    if stack.lost:
        stack.reconstruct()
    return stack.depth >= max_depth


def _end(stack: _Stack, name: str) -> bool | None:
    """Apply an end tag; whether its element was hidden (None: the tag closes nothing)."""
    i = stack.nearest(name)
    if i < 0:
        if name in FORMATTING:
            stack.forget(name)
        return None
    if stack.nearest("frameset") > i:
        return None
    scope = stack.nearest_cat(_END_SCOPE.get(name, "scope"))
    if name in FORMATTING:
        if i < scope:
            return None
        if stack.nearest_cat("special") > i:
            # A block opened inside it: the parser takes it out and opens a copy inside the
            # block, as many elements as before; the model leaves it open.
            return None
        return stack.pop_to(i)
    if name in SPECIAL:
        if i < scope and name not in SCOPE:
            return None
        if name == "form":  # </form> takes the form out, the elements opened in it stay
            stack.take_out(i)
            return bool(stack.state[i] & HIDDEN)
        return stack.pop_to(i)
    if stack.nearest_cat("special") > i:  # "any other end tag" stops at a special element
        return None
    return stack.pop_to(i)


_TOKEN = re.compile(
    r"<(?:"
    r"(?P<comment>!--)"
    r"|(?P<bogus>[!?]|/(?![A-Za-z]))"
    r"|(?P<end>/)?(?P<name>[A-Za-z][^\t\n\f\r />]*+)"
    r"(?>[\t\n\f\r /]++|[^\t\n\f\r />][^\t\n\f\r />=]*+"
    r"(?>[\t\n\f\r ]*+=[\t\n\f\r ]*+(?>\"[^\"]*+\"|'[^']*+'|[^\t\n\f\r >]*+))?)*+"
    r"(?P<close>>)?"
    r")"
)


def _foreign(stack: _Stack) -> bool:
    """Inside SVG or MathML (where elements close themselves and no element holds raw text)."""
    return stack.nearest("svg") >= 0 or stack.nearest("math") >= 0


def _kind(stack: _Stack, name: str, slash: bool) -> str:
    """What a start tag of VOID, RAW, TABLE_PARTS, plaintext or ending in ``/>`` does: ``void``
    (opens nothing), ``stop`` (the rest of the page is text), ``raw`` (opens an element whose
    content is text) or ``open``. In SVG and MathML every element opens unless it closes itself.
    """
    foreign = _foreign(stack)
    if slash and (foreign or name in ("svg", "math")):
        return "void"
    if foreign or stack.nearest("frameset") >= 0:  # (a frameset ignores most tags: counted)
        return "open"
    if name in VOID or name in PAGE:
        return "void"
    if name == "plaintext":
        return "stop"
    if name in TABLE_PARTS and stack.nearest("table") < 0:
        return "void"  # a row or cell outside any table: the parser ignores the tag
    return "raw" if name in RAW else "open"


def _raw_end(text: str, name: str, start: int) -> int:
    """Where the raw text of ``name`` opened at ``start`` ends (its end tag's ``<``)."""
    m = re.compile(rf"</{re.escape(name)}[\t\n\f\r />]", re.IGNORECASE).search(text, start)
    return m.start() if m else len(text)


def bound_nesting(text: str, max_depth: int = MAX_HTML_DEPTH) -> str:
    """``text`` with the tags of elements nested deeper than ``max_depth`` replaced by spaces
    (``text`` itself when none is)."""
    if text.count("<") <= max_depth:
        return text
    stack = _Stack()
    out: list[str] = []
    copied = 0  # text[:copied] is in out
    pos = 0
    search = _TOKEN.search
    while (m := search(text, pos)) is not None:
        lt = m.start()
        comment, bogus, end, name, close = m.groups()
        if comment:
            if text.startswith(("<!-->", "<!--->"), lt):
                pos = text.index(">", lt + 4) + 1
                continue
            ends = [e + len(c) for c in ("-->", "--!>") if (e := text.find(c, lt + 4)) >= 0]
            pos = min(ends) if ends else len(text)
            continue
        if bogus is not None:
            gt = text.find(">", lt + 2)
            pos = gt + 1 if gt >= 0 else len(text)
            continue
        if close is None:  # a tag that never ends: the rest of the page is in it
            break
        if stack.lost and lt > pos and not text[pos:lt].isspace():
            stack.reconstruct()
        pos = m.end()
        name = name.lower()
        hide: bool | None
        if end:
            hide = _end(stack, name) if name not in _NOT_CLOSED else None
        elif name in _UNUSUAL or text[pos - 2] == "/":
            kind = _kind(stack, name, text[pos - 2] == "/")
            if kind == "stop":
                break
            if kind == "void":
                if stack.lost:
                    stack.reconstruct()
                hide = None
            else:
                hide = _start(stack, name, max_depth) and kind != "raw"
                stack.push(name, hide)
                if kind == "raw":
                    pos = _raw_end(text, name, pos)
        else:  # the common case: an ordinary element
            hide = _start(stack, name, max_depth) if name in _RULED or stack.lost else None
            hide = stack.depth >= max_depth if hide is None else hide
            stack.push(name, hide)
        if hide:
            out.append(text[copied:lt])
            out.append(" ")
            copied = pos
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)
