"""Read a YAML plan with positions: text -> LoadedPlan (data + SourceMap).

PyYAML's `compose()` (SafeLoader) gives a node tree with marks; we walk it ourselves so
every key and value keeps its Span, and so we can reject what a plan must not contain:
duplicate keys (PyYAML silently keeps the last), custom tags, several documents,
non-scalar keys and recursive aliases. Scalars are converted by SafeLoader's own
constructors (YAML 1.1 rules: `yes` is a bool, `0x10` an int). Merge keys (`<<: *x`)
work; explicit keys win over merged ones. Raises PlanSyntaxError.

Bounded (plan/limits.py): nesting depth while composing (PyYAML's composer recurses)
and while walking (an alias inside an alias nests deeper than the text), and how many
nodes aliases repeat in all (a "billion laughs" file, through `*x` or `<<: *x`).
"""

from __future__ import annotations

import yaml

from planrunner.diagnostics import Diagnostic, Span
from planrunner.errors import PlanSyntaxError
from planrunner.plan.limits import MAX_ALIAS_NODES, MAX_DEPTH, too_deep
from planrunner.plan.source import JsonPath, LoadedPlan, SourceMap

_STD_TAG = "tag:yaml.org,2002:"
_MERGE = _STD_TAG + "merge"
# The tags plain data resolves to; anything else (custom `!env`, `!!python/...`) is refused.
_PLAIN_TAGS = frozenset(_STD_TAG + t for t in ("str", "int", "float", "bool", "null", "map",
                                                "seq", "timestamp"))


def _span(path: str, node: yaml.Node) -> Span:
    s, e = node.start_mark, node.end_mark
    return Span(path, s.line + 1, s.column + 1, e.line + 1, e.column + 1)


def _text_span(path: str, node: yaml.Node, text: str) -> Span:
    """Where a scalar's characters start: after a quote, or on the line after `|`/`>`."""
    span = _span(path, node)
    style = getattr(node, "style", None)
    if style in ('"', "'"):
        return Span(path, span.line, span.column + 1, span.end_line,
                    max(span.column + 1, (span.end_column or 2) - 1))
    if style in ("|", ">"):
        lines = text.splitlines()
        for lineno in range(span.line + 1, min(len(lines), (span.end_line or 0)) + 1):
            content = lines[lineno - 1]
            if content.strip():
                col = len(content) - len(content.lstrip(" ")) + 1
                return Span(path, lineno, col)
    return span


class _TooDeep(Exception):
    def __init__(self, mark: yaml.Mark) -> None:
        self.mark = mark


class _TooManyRepeats(Exception):
    def __init__(self, span: Span) -> None:
        self.span = span


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                # PyYAML's stubs leave peek_event untyped (types-PyYAML)
                raise _TooDeep(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Walker:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.spans = SourceMap(path)
        self.errors: list[Diagnostic] = []
        self.loader = _BoundedLoader(text)
        self._stack: set[int] = set()
        self._seen: set[int] = set()  # nodes walked once: walking one again is an alias
        self._repeats = 0
        self._depth = 0

    def error(self, message: str, span: Span, *hints: str) -> None:
        self.errors.append(Diagnostic(message, span, tuple(hints)))

    def walk(self, node: yaml.Node, jpath: JsonPath, key: Span | None) -> object:
        if id(node) in self._seen:
            self._repeats += 1
            if self._repeats > MAX_ALIAS_NODES:
                raise _TooManyRepeats(key or _span(self.path, node))
        else:
            self._seen.add(id(node))
        if self._depth >= MAX_DEPTH:
            span = key or _span(self.path, node)
            raise _TooDeep(_mark(span))
        self._depth += 1
        try:
            return self._walk(node, jpath, key)
        finally:
            self._depth -= 1

    def _walk(self, node: yaml.Node, jpath: JsonPath, key: Span | None) -> object:
        self.spans.record(jpath, _span(self.path, node), key,
                          _text_span(self.path, node, self.text)
                          if isinstance(node, yaml.ScalarNode) else None)
        if node.tag not in _PLAIN_TAGS:
            tag = node.tag.replace(_STD_TAG, "!!")
            self.error(f"YAML tag '{tag}' is not allowed in a plan",
                       _span(self.path, node), "remove the tag; plans hold plain data")
            return None
        if id(node) in self._stack:
            self.error("recursive YAML alias", _span(self.path, node))
            return None
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        self._stack.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.walk(item, jpath + (i,), None) for i, item in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            return self.mapping(node, jpath)
        finally:
            self._stack.discard(id(node))

    def scalar(self, node: yaml.ScalarNode) -> object:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            self.error(f"cannot read this YAML value: {exc.problem}", _span(self.path, node))
            return None

    def mapping(self, node: yaml.MappingNode, jpath: JsonPath) -> dict[str, object]:
        out: dict[str, object] = {}
        first: dict[str, Span] = {}
        merges: list[yaml.Node] = []
        for knode, vnode in node.value:
            if knode.tag == _MERGE:
                merges.append(vnode)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                self.error("a mapping key must be a plain name", _span(self.path, knode))
                continue
            name = str(knode.value)
            kspan = _span(self.path, knode)
            if name in first:
                prev = first[name]
                self.error(f"duplicate key '{name}' (first defined at {prev.line}:{prev.column})",
                           kspan, "remove one of them; YAML would silently keep the last")
                continue
            first[name] = kspan
            out[name] = self.walk(vnode, jpath + (name,), kspan)
        for merged in merges:
            self._merge(merged, jpath, out)
        return out

    def _merge(self, vnode: yaml.Node, jpath: JsonPath, out: dict[str, object]) -> None:
        sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                self.error("'<<' merges mappings only", _span(self.path, src))
                continue
            if self._depth >= MAX_DEPTH:  # a chain of merges nests as deep as it is long
                span = _span(self.path, src)
                raise _TooDeep(_mark(span))
            self._depth += 1
            try:
                for name, value in self.mapping(src, jpath).items():
                    out.setdefault(name, value)
            finally:
                self._depth -= 1


def _syntax_error(path: str, exc: yaml.MarkedYAMLError) -> PlanSyntaxError:
    mark = exc.problem_mark or exc.context_mark
    span = Span(path, mark.line + 1, mark.column + 1) if mark else Span(path, 1, 1)
    if exc.context == "expected a single document in the stream":
        return PlanSyntaxError("a plan file holds one YAML document; found a second one", span,
                               ("remove the '---' line or split the file into two plans",))
    message = f"YAML syntax error: {exc.problem or exc.context}"
    hints = []
    ctx = exc.context_mark
    if exc.context and exc.problem and ctx is not None and ctx is not mark:
        hints.append(f"{exc.context} (at {ctx.line + 1}:{ctx.column + 1})")
    if "'\\t'" in (exc.problem or ""):
        hints.append("use spaces, not tabs, to indent YAML")
    return PlanSyntaxError(message, span, tuple(hints))


def load_yaml(path: str, text: str) -> LoadedPlan:
    """Parse `text` (the content of `path`) into a LoadedPlan; raise PlanSyntaxError."""
    walker = _Walker(path, text)
    try:
        root = walker.loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(path, exc) from None
    except _TooDeep as exc:
        raise too_deep(path, exc.mark.line + 1, exc.mark.column + 1) from None
    finally:
        walker.loader.dispose()
    if root is None or not isinstance(root, yaml.MappingNode):
        span = _span(path, root) if root is not None else Span(path, 1, 1)
        raise PlanSyntaxError("a plan file must be a mapping of sections (planrunner:, "
                              "probes:, outputs:, ...)", span)
    try:
        data = walker.walk(root, (), None)
    except _TooDeep as exc:
        raise too_deep(path, exc.mark.line + 1, exc.mark.column + 1) from None
    except _TooManyRepeats as exc:
        raise PlanSyntaxError(
            f"YAML aliases expand to more than {MAX_ALIAS_NODES} repeated nodes",
            exc.span, ("an alias bomb (\"billion laughs\")? A plan repeats a few "
                       "small anchors at most; write the data out",)) from None
    if walker.errors:
        raise PlanSyntaxError(walker.errors)
    return LoadedPlan(path, text, data, walker.spans, "yaml")


def _mark(span: Span) -> yaml.Mark:
    """A PyYAML mark at `span` (no buffer: the message is built from the line only)."""
    return yaml.Mark("", 0, span.line - 1, span.column - 1, "", 0)
