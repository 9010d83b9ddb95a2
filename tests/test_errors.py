"""Every exception class lives in errors.py, drawn in its docstring's hierarchy, and the exit code
of each kind of failure is the one the README's table gives."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

from vault_pipeline import errors

PACKAGE = Path(__file__).resolve().parent.parent / "vault_pipeline"
README = PACKAGE.parent / "README.md"
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


def _exception_classes() -> dict[str, str]:
    """Class name -> where, of every class in the package whose bases name an exception."""
    ours = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & (BUILTIN_EXCEPTIONS | ours):
                    found[node.name] = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
    return found


def test_every_exception_class_is_defined_in_errors_py():
    found = _exception_classes()
    assert {"VaultError", "IndexDamagedError", "RecordError", "DeadlinePassed"} <= set(found)  # the scan sees them
    elsewhere = {n: w for n, w in found.items() if not w.startswith("vault_pipeline/errors.py")}
    assert elsewhere == {}


def _drawn_tree(doc: str) -> dict[str, str]:
    """Class -> the parent the docstring draws it under (its ``├──``/``└──`` tree lines)."""
    parents: dict[str, str] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        m = re.match(r"^    ((?:[│ ]   )*)([├└]── )?([A-Z]\w+)\b", line)
        if not m:
            continue
        depth = len(m[1]) // 4 + (1 if m[2] else 0)
        del stack[depth:]
        if stack:
            parents[m[3]] = stack[-1]
        stack.append(m[3])
    return parents


def test_the_docstring_draws_every_error_class_under_its_base():
    drawn = _drawn_tree(errors.__doc__ or "")
    classes = {n: v for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    assert set(drawn) == set(classes) - {"VaultError"}, set(classes) ^ set(drawn)
    assert {n: c.__bases__[0].__name__ for n, c in classes.items() if n != "VaultError"} == drawn


def test_each_kind_of_error_has_the_exit_code_of_the_readme_table():
    table = dict(re.findall(r"^\| (\d) \| (.+) \|$", README.read_text(encoding="utf-8"), re.M))
    assert set(table) == {"0", "1", "2"}
    assert (errors.EXIT_OK, errors.EXIT_INCOMPLETE, errors.EXIT_USAGE) == (0, 1, 2)
    assert "usage or configuration error" in table["2"]
    assert errors.exit_code(errors.UsageError("x")) == errors.exit_code(errors.ConfigError("x")) == errors.EXIT_USAGE
    for other in (errors.ParseError("f", "bad"), errors.LockError("p"), errors.ModelError("p", "m", "r")):
        assert errors.exit_code(other) == errors.EXIT_INCOMPLETE
    assert errors.exit_code(errors.IndexDamagedError("read")) == errors.EXIT_INCOMPLETE
