"""The funnel's stages, held to their declared inputs and outputs.

Each stage of ``funnel.STAGES`` is a function of the ``Query`` and of results earlier stages return,
and returns a frozen result of its own; ``run_query`` calls them in that order and hands each only
the results its signature names. A result holds only results of earlier stages, never a later one's,
so a stage cannot reach what comes after it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing

from vault_pipeline.retrieve import funnel
from vault_pipeline.retrieve.state import Query

ORDER = (
    "plan",
    "retrieve",
    "find_absent",
    "deepen",
    "feedback",
    "hop",
    "whole_turns",
    "drop_superseded",
    "rank_survivors",
    "judge_found",
    "assemble_package",
)


def signature(stage: typing.Callable[..., object], namespace: dict | None = None) -> tuple[list[type], type]:
    """(parameter types, return type) of a stage, its annotations resolved."""
    hints = typing.get_type_hints(stage, localns=namespace)
    params = [hints[name] for name in inspect.signature(stage).parameters]
    return params, hints["return"]


def undeclared(stages: typing.Sequence[typing.Callable[..., object]], namespace: dict | None = None) -> list[str]:
    """What is wrong with a chain of stages: one that does not take the Query first, takes a result
    no earlier stage returns, or returns no frozen result."""
    problems: list[str] = []
    produced: list[type] = []
    for stage in stages:
        params, result = signature(stage, namespace)
        if not params or params[0] is not Query:
            problems.append(f"{stage.__name__} does not take the Query first")
        problems += [
            f"{stage.__name__} takes {p.__name__}, which no earlier stage returns"
            for p in params[1:]
            if p not in produced
        ]
        if not (dataclasses.is_dataclass(result) and result.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            problems.append(f"{stage.__name__} returns {result.__name__}, not a frozen result")
        produced.append(result)
    return problems


def test_the_stages_run_in_this_order():
    assert tuple(stage.__name__ for stage in funnel.STAGES) == ORDER


def test_each_stage_takes_the_query_and_only_results_of_earlier_stages():
    problems = undeclared(funnel.STAGES)
    assert not problems, problems


def _held(result: type, seen: set[type]) -> set[type]:
    """Every stage result a result's fields hold, at any depth."""
    found: set[type] = set()
    for hint in typing.get_type_hints(result).values():
        for held in [hint, *typing.get_args(hint)]:
            if isinstance(held, type) and dataclasses.is_dataclass(held) and held not in seen:
                seen.add(held)
                found |= {held} | _held(held, seen)
    return found


def test_no_result_holds_a_later_stage_result():
    results = list(dict.fromkeys(signature(stage)[1] for stage in funnel.STAGES))
    for i, result in enumerate(results):
        later = set(results[i + 1 :]) - {result}
        assert not (_held(result, {result}) & later), f"{result.__name__} holds a later stage's result"


def _calls(function: typing.Callable[..., object]) -> list[tuple[str, list[str]]]:
    """(callee, argument names) of each call in ``function``'s body to a stage, in source order."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    calls.sort(key=lambda node: (node.lineno, node.col_offset))
    return [
        (node.func.id, [arg.id for arg in node.args if isinstance(arg, ast.Name)])
        for node in calls
        if isinstance(node.func, ast.Name) and node.func.id in ORDER
    ]


def test_run_query_calls_every_stage_once_in_order_with_what_it_declares():
    calls = _calls(funnel.run_query)
    assert [name for name, _ in calls] == list(ORDER)
    stages = {stage.__name__: stage for stage in funnel.STAGES}
    bound: dict[str, type] = {"q": Query}  # each name run_query binds, and the result type it holds
    tree = ast.parse(textwrap.dedent(inspect.getsource(funnel.run_query)))
    targets = {
        node.value.func.id: node.targets[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and isinstance(node.targets[0], ast.Name)
    }
    for name, args in calls:
        params, result = signature(stages[name])
        assert [bound.get(arg) for arg in args] == params, f"{name} is called with {args}"
        if name in targets:
            bound[targets[name]] = result


def test_the_checks_fail_on_a_stage_that_takes_a_later_result():
    """The signature check above, on a chain whose second stage takes what the third returns."""

    @dataclasses.dataclass(frozen=True)
    class A:
        x: int

    @dataclasses.dataclass(frozen=True)
    class B:
        a: A

    def first(q: Query) -> A:
        return A(1)

    def second(q: Query, b: B) -> A:
        return b.a

    def third(q: Query, a: A) -> B:
        return B(a)

    namespace = {"Query": Query, "A": A, "B": B}
    assert undeclared((first, second, third), namespace) == ["second takes B, which no earlier stage returns"]
    assert undeclared((first, third), namespace) == []
