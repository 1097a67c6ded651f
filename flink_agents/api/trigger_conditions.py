"""Action trigger conditions (Flink Agents HEAD): exact event types and
Boolean condition expressions in a subset of CEL (https://cel.dev).

An entry of ``@action(...)``, ``add_action(trigger_conditions=...)`` or a
YAML ``trigger_conditions`` list is, after trimming whitespace:

* an **exact event type** when it is a bare name (dot-separated segments,
  each an ASCII letter or ``_`` then letters, digits, ``_`` or ``-``: ``a``,
  ``order.created``, ``order-created``) other than ``true``/``false``/``null``
  and not starting with ``EventType.``; or a quoted name (``'order:created'``)
  whose text has no whitespace, quote, backslash or control character;
* otherwise an **expression**, evaluated on each event against the variables
  ``type`` (str), ``id`` (str), ``EventType`` (the built-in constants),
  ``attributes`` (the event's top-level data: its ``attributes`` map and
  declared/extra fields, as JSON values), and each top-level attribute by
  name (framework variables win a name clash).

Supported: literals (int, double, string, bool, null, lists), ``.field``,
``[index]``, ``! - * / % + < <= > >= == != in && ||``, ``?:``, ``has(path)``
and the functions ``size``, ``int``, ``double``, ``string``,
``contains``/``startsWith``/``endsWith`` (as methods). Rejected when the
plan is compiled (``TriggerConditionError``, naming the condition): syntax
errors, other functions and macros (``all``, ``exists``, ``map``...), a bare
``EventType.X`` or a path that is not compared with anything, an unknown
``EventType`` constant, a literal that is not a bool, dynamic or whole use
of ``attributes`` (``attributes[k]``, ``size(attributes)``; ``"a.b" in
attributes`` and literal indexes are fine). HEAD reports the last three only
when the operator starts; here the job is not submitted.

At event time a missing attribute, a type mismatch or a non-bool result is a
``ConditionEvaluationError``; the runtime then follows
``action.trigger-condition.evaluate-failure-strategy``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Tuple

from flink_agents.api.events.event_type import BUILTIN_EVENT_TYPES

__all__ = [
    "CompiledCondition",
    "ConditionEvaluationError",
    "TriggerConditionError",
    "classify",
    "compile_condition",
    "event_variables",
]

_SEGMENT = r"[A-Za-z_][A-Za-z0-9_-]*"
_BARE_NAME = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
_QUOTED_NAME = re.compile(r"""'([^\s'"\\\x00-\x1f\x7f]+)'|"([^\s'"\\\x00-\x1f\x7f]+)\"""")
_KEYWORD_LITERALS = {"true", "false", "null"}


class TriggerConditionError(ValueError):
    """A condition that cannot be used (raised when the plan is compiled)."""


class ConditionEvaluationError(Exception):
    """A condition that failed on one event (missing attribute, type mismatch...)."""


def classify(entry: str) -> Tuple[str, str]:
    """``("event_type", name)`` or ``("expression", text)`` for one trimmed entry.

    Raises:
        TriggerConditionError: ``entry`` is not a str or is blank.
    """
    if not isinstance(entry, str):
        raise TriggerConditionError(f"trigger condition must be a str, got {entry!r}")
    text = entry.strip()
    if not text:
        raise TriggerConditionError("trigger condition is blank")
    if _BARE_NAME.fullmatch(text) and text not in _KEYWORD_LITERALS and not text.startswith("EventType."):
        return "event_type", text
    quoted = _QUOTED_NAME.fullmatch(text)
    if quoted:
        return "event_type", quoted.group(1) or quoted.group(2)
    return "expression", text


# ---- tokens -----------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+|0[xX][0-9a-fA-F]+|\d+)(?P<unsigned>[uU])?
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%<>!?:.,()\[\]{}])
""", re.VERBOSE)


def _tokens(text: str) -> List[Tuple[str, Any, int]]:
    out: List[Tuple[str, Any, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise TriggerConditionError(f"syntax error at column {pos + 1}: unexpected {text[pos]!r}")
        if m.group("ws") is None:
            if m.group("num") is not None:
                raw = m.group("num")
                value: Any = int(raw, 0) if raw.lower().startswith("0x") else (
                    float(raw) if any(c in raw for c in ".eE") else int(raw))
                out.append(("lit", value, pos))
            elif m.group("str") is not None:
                out.append(("lit", _unescape(m.group("str")), pos))
            elif m.group("ident") is not None:
                word = m.group("ident")
                if word in ("true", "false", "null"):
                    out.append(("lit", {"true": True, "false": False, "null": None}[word], pos))
                elif word == "in":
                    out.append(("op", "in", pos))
                else:
                    out.append(("ident", word, pos))
            else:
                out.append(("op", m.group("op"), pos))
        pos = m.end()
    out.append(("end", None, pos))
    return out


_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "`": "`", "?": "?"}


def _unescape(quoted: str) -> str:
    body, out, i = quoted[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            escaped = _ESCAPES.get(body[i + 1:i + 2])
            if escaped is None:
                raise TriggerConditionError(f"unsupported escape in string literal {quoted}")
            out.append(escaped)
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


# ---- parser: a tuple tree ---------------------------------------------------
# ("lit", v) ("var", name) ("sel", node, field) ("idx", node, node) ("list", [nodes])
# ("un", op, node) ("bin", op, l, r) ("and", l, r) ("or", l, r) ("cond", c, a, b)
# ("call", name, target|None, [args]) ("has", node)

_BINARY_LEVELS = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%")]
# name -> (arguments as a function, arguments as a method); None: not callable that way.
_FUNCTIONS = {"size": (1, 0), "int": (1, None), "double": (1, None), "string": (1, None),
              "contains": (None, 1), "startsWith": (None, 1), "endsWith": (None, 1)}
_MACROS = {"all", "exists", "exists_one", "filter", "map"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> Tuple[str, Any, int]:
        return self.toks[self.i]

    def take(self, value: str | None = None) -> Tuple[str, Any, int]:
        tok = self.toks[self.i]
        if value is not None and (tok[0] != "op" or tok[1] != value):
            shown = "end of condition" if tok[0] == "end" else repr(tok[1])
            raise TriggerConditionError(f"syntax error at column {tok[2] + 1}: expected {value!r}, found {shown}")
        self.i += 1
        return tok

    def is_op(self, *values: str) -> bool:
        tok = self.peek()
        return tok[0] == "op" and tok[1] in values

    def parse(self) -> Any:
        node = self.ternary()
        if self.peek()[0] != "end":
            tok = self.peek()
            raise TriggerConditionError(f"syntax error at column {tok[2] + 1}: unexpected {tok[1]!r}")
        return node

    def ternary(self) -> Any:
        cond = self.binary(0)
        if self.is_op("?"):
            self.take("?")
            then = self.binary(0)
            self.take(":")
            return ("cond", cond, then, self.ternary())
        return cond

    def binary(self, level: int) -> Any:
        if level == len(_BINARY_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.is_op(*_BINARY_LEVELS[level]):
            op = self.take()[1]
            right = self.binary(level + 1)
            left = ("and", left, right) if op == "&&" else ("or", left, right) if op == "||" else ("bin", op, left, right)
        return left

    def unary(self) -> Any:
        if self.is_op("!", "-"):
            op = self.take()[1]
            return ("un", op, self.unary())
        return self.postfix(self.primary())

    def postfix(self, node: Any) -> Any:
        while True:
            if self.is_op("."):
                self.take(".")
                tok = self.take()
                if tok[0] != "ident":
                    raise TriggerConditionError(f"syntax error at column {tok[2] + 1}: expected a field name")
                if self.is_op("("):
                    node = ("call", tok[1], node, self.arguments())
                else:
                    node = ("sel", node, tok[1])
            elif self.is_op("["):
                self.take("[")
                index = self.ternary()
                self.take("]")
                node = ("idx", node, index)
            else:
                return node

    def arguments(self) -> List[Any]:
        self.take("(")
        args: List[Any] = []
        while not self.is_op(")"):
            args.append(self.ternary())
            if not self.is_op(")"):
                self.take(",")
        self.take(")")
        return args

    def primary(self) -> Any:
        tok = self.take()
        kind, value, pos = tok
        if kind == "lit":
            return ("lit", value)
        if kind == "ident":
            if self.is_op("("):
                args = self.arguments()
                if value == "has":
                    if len(args) != 1 or args[0][0] not in ("var", "sel"):
                        raise TriggerConditionError("has() takes one field path, e.g. has(attributes.score)")
                    return ("has", args[0])
                return ("call", value, None, args)
            return ("var", value)
        if kind == "op" and value == "(":
            node = self.ternary()
            self.take(")")
            return ("paren", node)
        if kind == "op" and value == "[":
            items: List[Any] = []
            while not self.is_op("]"):
                items.append(self.ternary())
                if not self.is_op("]"):
                    self.take(",")
            self.take("]")
            return ("list", items)
        shown = "end of condition" if kind == "end" else repr(value)
        raise TriggerConditionError(f"syntax error at column {pos + 1}: unexpected {shown}")


# ---- static checks ----------------------------------------------------------

def _unwrap(node: Any) -> Any:
    while node[0] == "paren":
        node = node[1]
    return node


def _is_path(node: Any) -> bool:
    node = _unwrap(node)
    return node[0] == "var" or (node[0] == "sel" and _is_path(node[1]))


def _check(node: Any, parent_in_rhs: bool = False) -> None:
    """Reject what HEAD rejects at plan or operator start (see the module docstring)."""
    kind = node[0]
    if kind == "paren":
        _check(node[1])
    elif kind == "var":
        if node[1] == "attributes" and not parent_in_rhs:
            raise TriggerConditionError("operations over the whole 'attributes' map are not supported")
        if node[1] == "EventType":
            raise TriggerConditionError("'EventType' must be followed by a constant, e.g. EventType.InputEvent")
    elif kind == "sel":
        base = _unwrap(node[1])
        if base == ("var", "EventType"):
            if node[2] not in BUILTIN_EVENT_TYPES:
                raise TriggerConditionError(
                    f"unknown event type constant EventType.{node[2]} (known: {sorted(BUILTIN_EVENT_TYPES)})")
            return
        if base == ("var", "attributes"):
            return
        _check(node[1])
    elif kind == "idx":
        base = _unwrap(node[1])
        if base == ("var", "attributes"):
            index = _unwrap(node[2])
            if index[0] != "lit" or not isinstance(index[1], str):
                raise TriggerConditionError(
                    "dynamic access to the whole 'attributes' map is not supported: index it with a string literal")
            return
        _check(node[1])
        _check(node[2])
    elif kind == "list":
        for item in node[1]:
            _check(item)
    elif kind == "un":
        _check(node[2])
    elif kind == "bin":
        _check(node[2])
        _check(node[3], parent_in_rhs=node[1] == "in" and _unwrap(node[3]) == ("var", "attributes"))
    elif kind in ("and", "or"):
        _check(node[1])
        _check(node[2])
    elif kind == "cond":
        for part in node[1:]:
            _check(part)
    elif kind == "has":
        base = _unwrap(node[1])
        # has(attributes.x) tests one attribute; has(a.b) reads a, which is checked as usual.
        if base[0] == "sel" and _unwrap(base[1]) != ("var", "attributes"):
            _check(base[1])
    elif kind == "call":
        name, target, args = node[1], node[2], node[3]
        if name in _MACROS:
            raise TriggerConditionError(f"the CEL macro {name}() is not supported (has() is the only macro)")
        arity = _FUNCTIONS.get(name)
        if arity is None:
            raise TriggerConditionError(f"unknown function {name}() (supported: has, {', '.join(_FUNCTIONS)})")
        expected = arity[1] if target is not None else arity[0]
        if expected is None or len(args) != expected:
            form = "x." + name if target is not None else name
            raise TriggerConditionError(f"{form}() with {len(args)} argument(s) is not supported")
        if target is not None:
            _check(target)
        for arg in args:
            _check(arg)


# ---- evaluation -------------------------------------------------------------

def _fail(message: str) -> None:
    raise ConditionEvaluationError(message)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_num(a) and _is_num(b):
        return a == b
    if type(a) is not type(b) and not (isinstance(a, (list, dict)) and isinstance(b, (list, dict))):
        return False
    return a == b


def _binary(op: str, a: Any, b: Any) -> Any:
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op == "in":
        if isinstance(b, list):
            return any(_equal(a, item) for item in b)
        if isinstance(b, dict):
            return a in b
        _fail(f"'in' needs a list or map on its right, got {type(b).__name__}")
    comparable = (_is_num(a) and _is_num(b)) or (type(a) is type(b) and isinstance(a, (str, bool)))
    if op in ("<", "<=", ">", ">="):
        if not comparable:
            _fail(f"cannot compare {type(a).__name__} {op} {type(b).__name__}")
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if op == "+":
        if (_is_num(a) and _is_num(b)) or (type(a) is type(b) and isinstance(a, (str, list))):
            return a + b
        _fail(f"cannot add {type(a).__name__} and {type(b).__name__}")
    if not (_is_num(a) and _is_num(b)):
        _fail(f"'{op}' needs numbers, got {type(a).__name__} and {type(b).__name__}")
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0 and (isinstance(a, int) and isinstance(b, int)):
        _fail("division by zero")
    if isinstance(a, int) and isinstance(b, int):  # CEL integer division/modulo truncate toward zero
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return quotient if op == "/" else a - quotient * b
    if op == "%":
        _fail("'%' needs integers")
    return a / b if b != 0 else (float("inf") if a > 0 else float("-inf") if a < 0 else float("nan"))


def _lookup(container: Any, name: Any, shown: str) -> Any:
    if isinstance(container, dict):
        if name not in container:
            _fail(f"no such attribute: {shown}")
        return container[name]
    if isinstance(container, list) and isinstance(name, int) and not isinstance(name, bool):
        if not 0 <= name < len(container):
            _fail(f"index out of range: {shown}")
        return container[name]
    _fail(f"cannot read {shown} from a {type(container).__name__}")


def _path_text(node: Any) -> str:
    node = _unwrap(node)
    if node[0] == "var":
        return node[1]
    if node[0] == "sel":
        return f"{_path_text(node[1])}.{node[2]}"
    return "<expression>"


class _Evaluator:
    def __init__(self, variables: Dict[str, Any]) -> None:
        self.vars = variables

    def eval(self, node: Any) -> Any:  # noqa: C901 - one dispatch over node kinds
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "paren":
            return self.eval(node[1])
        if kind == "var":
            return _lookup(self.vars, node[1], node[1])
        if kind == "sel":
            return _lookup(self.eval(node[1]), node[2], _path_text(node))
        if kind == "idx":
            return _lookup(self.eval(node[1]), self.eval(node[2]), f"{_path_text(node[1])}[...]")
        if kind == "list":
            return [self.eval(item) for item in node[1]]
        if kind == "un":
            value = self.eval(node[2])
            if node[1] == "!":
                if not isinstance(value, bool):
                    _fail(f"'!' needs a bool, got {type(value).__name__}")
                return not value
            if not _is_num(value):
                _fail(f"'-' needs a number, got {type(value).__name__}")
            return -value
        if kind == "bin":
            return _binary(node[1], self.eval(node[2]), self.eval(node[3]))
        if kind in ("and", "or"):
            return self.logical(kind, node[1], node[2])
        if kind == "cond":
            test = self.eval(node[1])
            if not isinstance(test, bool):
                _fail("'?:' needs a bool condition")
            return self.eval(node[2] if test else node[3])
        if kind == "has":
            path = _unwrap(node[1])
            if path[0] == "var":
                return path[1] in self.vars
            container = self.eval(path[1])
            if not isinstance(container, dict):
                _fail(f"has() needs a map at {_path_text(path[1])}")
            return path[2] in container
        return self.call(node[1], node[2], node[3])

    def logical(self, kind: str, left: Any, right: Any) -> bool:
        """CEL's commutative ``&&``/``||``: a decisive side wins over an error on the other."""
        decisive = kind == "or"
        results: List[Any] = []
        for part in (left, right):
            try:
                value = self.eval(part)
            except ConditionEvaluationError as exc:
                results.append(exc)
                continue
            if not isinstance(value, bool):
                results.append(ConditionEvaluationError(f"'{'||' if decisive else '&&'}' needs bools"))
                continue
            if value is decisive:
                return decisive
            results.append(value)
        for result in results:
            if isinstance(result, ConditionEvaluationError):
                raise result
        return not decisive

    def call(self, name: str, target: Any, args: List[Any]) -> Any:
        values = [self.eval(a) for a in ([target] if target is not None else []) + args]
        subject = values[0]
        if name == "size":
            if not isinstance(subject, (str, list, dict)):
                _fail(f"size() needs a string, list or map, got {type(subject).__name__}")
            return len(subject)
        if name in ("contains", "startsWith", "endsWith"):
            if not (isinstance(subject, str) and isinstance(values[1], str)):
                _fail(f"{name}() needs strings")
            return {"contains": values[1] in subject, "startsWith": subject.startswith(values[1]),
                    "endsWith": subject.endswith(values[1])}[name]
        try:
            if name == "int":
                return int(subject)
            if name == "double":
                return float(subject)
            return subject if isinstance(subject, str) else json.dumps(subject)
        except (TypeError, ValueError) as exc:
            raise ConditionEvaluationError(f"{name}({subject!r}): {exc}") from None


class CompiledCondition:
    """A checked expression; ``matches(variables)`` evaluates it on one event."""

    __slots__ = ("text", "_tree")

    def __init__(self, text: str, tree: Any) -> None:
        self.text = text
        self._tree = tree

    def matches(self, variables: Dict[str, Any]) -> bool:
        """Whether the condition holds for an event (``event_variables``).

        Raises:
            ConditionEvaluationError: A missing attribute, a type mismatch or
                a non-bool result; the message names the condition.
        """
        try:
            result = _Evaluator(variables).eval(self._tree)
        except ConditionEvaluationError as exc:
            raise ConditionEvaluationError(f"trigger condition {self.text!r}: {exc}") from None
        except RecursionError:
            raise ConditionEvaluationError(f"trigger condition {self.text!r}: nested too deeply") from None
        if not isinstance(result, bool):
            raise ConditionEvaluationError(
                f"trigger condition {self.text!r} gave a {type(result).__name__}, not a Boolean result")
        return result


_COMPILED: Dict[str, CompiledCondition] = {}


def compile_condition(text: str) -> CompiledCondition:
    """Parse and check an expression (cached by text).

    Raises:
        TriggerConditionError: See the module docstring; the message says what is wrong.
    """
    cached = _COMPILED.get(text)
    if cached is not None:
        return cached
    tree = _Parser(text).parse()
    bare = _unwrap(tree)
    if _is_path(tree):
        raise TriggerConditionError(
            "a path alone is not a condition: compare it, e.g. `a.b == true`, or quote an event type name")
    if bare[0] == "lit" and not isinstance(bare[1], bool) or bare[0] == "list":
        raise TriggerConditionError("the condition must have a Boolean result")
    _check(tree)
    if len(_COMPILED) >= 4096:
        _COMPILED.clear()
    compiled = _COMPILED[text] = CompiledCondition(text, tree)
    return compiled


_FRAMEWORK_VARIABLES = ("type", "id", "EventType", "attributes")


def event_variables(event: Any, json_data: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """The variables an expression sees for ``event``: ``type``, ``id``,
    ``EventType``, ``attributes`` and each top-level attribute by name.

    Args:
        event: The event (its ``get_type()`` and ``id`` are read).
        json_data: Returns the event's JSON form (``model_dump_json`` as a
            dict); its ``attributes`` map and other data keys become
            ``attributes``.
    """
    data = json_data()
    attributes: Dict[str, Any] = {
        k: v for k, v in data.items()
        if k not in ("id", "type", "attributes", "upstreamEventId", "upstreamActionName")
    }
    attributes.update(data.get("attributes") or {})
    variables = dict(attributes)
    variables.update(type=event.get_type(), id=str(event.id), EventType=dict(BUILTIN_EVENT_TYPES),
                     attributes=attributes)
    return variables
