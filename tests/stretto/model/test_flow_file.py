"""Flow files that cannot hurt: refused cleanly, naming the problem, and written privately."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import pytest

from proxy.cli import main as proxy_main
from stretto.cli.main import main as stretto_main
from stretto.model.flow import (
    MAX_DEPTH,
    FlowError,
    build_flow,
    load_flow,
    load_manifest,
    validate,
    write_flow,
)


def found(path: str, count: int = 4) -> dict:
    return {"source": "search", "path": path, "count": count}


def small_flow() -> dict:
    """A valid flow of three tools, with four binding sources and a list."""
    habit = {(): {"get": 2.0, "respond": 1.0}, ("get",): {"respond": 1.0}}
    kinds = {"search": "read", "get": "read", "put": "write"}
    bindings = {
        "args": {"get": {"calls": 4, "passed": {"id": 4}}},
        "sources": [
            {"tool": "get", "arg": f"a{i}", "values": 4, "found": [found("$.items[*].id")]}
            for i in range(4)
        ],
        "lists": [{"tool": "get", "arg": "ids", "values": 4, "found": [found("$"), found("$[*]")]}],
        "agreed": {"get": [[3, 4], [0, 0]]},
    }
    return build_flow(
        domain="shop",
        kinds=kinds,
        docs={"get": {"summary": "one item", "args": {"id": "its id"}}},
        contracts={},
        habit=habit,
        reach=habit,
        sites={("search", False): {"get": 3}},
        alpha_fit={"alpha": 2.0, "method": "fixed"},
        sources=["model"],
        episodes=1,
        steps=3,
        bindings=bindings,
        now_ms=0,
    )


def write_raw(path: Path, flow: dict) -> Path:
    """The flow as Python's json module writes it: NaN and Infinity as bare words."""
    path.write_text(json.dumps(flow))
    return path


def test_the_small_flow_is_valid(tmp_path: Path) -> None:
    flow = small_flow()
    write_flow(flow, tmp_path / "shop.flow.json")
    assert load_flow(tmp_path / "shop.flow.json") == flow


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("habit", "alpha"), math.nan, "habit.alpha"),
        (("reach", "alpha"), math.inf, "reach.alpha"),
        (("thresholds",), {"get": math.nan}, "thresholds.get"),
        (("habit", "levels", 0, 0, "total"), -math.inf, "habit.levels[0][0].total"),
        # a member the schema leaves free is refused as well
        (("provenance", "alpha_fit", "p05"), math.nan, "provenance.alpha_fit.p05"),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_field(
    tmp_path: Path, where: tuple, value: object, field: str
) -> None:
    flow = small_flow()
    parent = flow
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    with pytest.raises(FlowError, match=rf"field `{re.escape(field)}`: .*not a finite number"):
        load_flow(write_raw(tmp_path / "bad.flow.json", flow))
    with pytest.raises(FlowError, match=rf"field `{re.escape(field)}`"):
        validate(flow)  # a flow built in memory is held to the same rule
    with pytest.raises(FlowError, match=rf"field `{re.escape(field)}`"):
        write_flow(flow, tmp_path / "out.flow.json")
    assert not (tmp_path / "out.flow.json").exists()


def test_a_number_too_large_for_a_float_is_refused(tmp_path: Path) -> None:
    flow = small_flow()
    flow["habit"]["alpha"] = 123.25
    (tmp_path / "big.flow.json").write_text(json.dumps(flow).replace("123.25", "1e400"))
    with pytest.raises(FlowError, match=r"field `habit\.alpha`: .*not a finite number"):
        load_flow(tmp_path / "big.flow.json")


def test_nan_in_a_manifest_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text('{"tools": {"get": "read"}, "docs": {"get": {"weight": NaN}}}')
    with pytest.raises(FlowError, match=r"m\.json: field `docs\.get\.weight`: NaN"):
        load_manifest(manifest)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_over_deep_nesting_is_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.flow.json"
    huge.write_text(nested(200_000))
    with pytest.raises(FlowError, match=r"huge\.flow\.json: nested too deeply"):
        load_flow(huge)
    # deep enough to pass json.loads, not so deep that it is reasonable
    flow = small_flow()
    flow["provenance"]["alpha_fit"]["note"] = json.loads(nested(MAX_DEPTH + 50))
    deep = write_raw(tmp_path / "deep.flow.json", flow)
    with pytest.raises(FlowError, match=r"field `provenance\.alpha_fit\.note(\[0\])+`: nested"):
        load_flow(deep)
    manifest = tmp_path / "m.json"
    manifest.write_text('{"tools": {"get": "read"}, "docs": ' + nested(200_000) + "}")
    with pytest.raises(FlowError, match=r"m\.json: nested too deeply"):
        load_manifest(manifest)


@pytest.fixture
def bad_flows(tmp_path: Path) -> dict[str, Path]:
    huge = tmp_path / "huge.flow.json"
    huge.write_text(nested(200_000))
    flow = small_flow()
    flow["habit"]["alpha"] = math.nan
    return {"huge": huge, "nan": write_raw(tmp_path / "nan.flow.json", flow)}


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_flow_show_says_one_line_and_exits_1(bad_flows, capsys) -> None:
    said = {}
    for name, path in bad_flows.items():
        assert stretto_main(["flow-show", str(path)]) == 1, name
        said[name] = one_line(capsys.readouterr().err)
        assert said[name].startswith(f"stretto: {path}: "), said[name]
    assert "nested too deeply" in said["huge"]
    assert "field `habit.alpha`: NaN is not a finite number" in said["nan"]


def test_flow_diff_exits_2(bad_flows, tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.flow.json"
    write_flow(small_flow(), good)
    for name, path in bad_flows.items():
        assert stretto_main(["flow-diff", str(good), str(path)]) == 2, name
        assert str(path) in one_line(capsys.readouterr().err)


def test_the_proxy_exits_2_on_a_bad_flow_before_anything_starts(
    bad_flows, tmp_path: Path, capsys
) -> None:
    logs = tmp_path / "logs"
    for name, path in bad_flows.items():
        code = proxy_main(["--record", str(logs), "--flow", str(path), "--", "cat"])
        assert code == 2, name
        err = one_line(capsys.readouterr().err)
        assert str(path) in err and ("nested too deeply" in err or "not a finite number" in err)
    assert not logs.exists()


def test_a_file_that_is_not_a_flow_says_so(tmp_path: Path, capsys) -> None:
    for text in ('{"hello": "world"}', "[1, 2]", '"a flow"'):
        path = tmp_path / "other.json"
        path.write_text(text)
        assert stretto_main(["flow-show", str(path)]) == 1
        err = one_line(capsys.readouterr().err)
        assert err == f"stretto: {path}: this is not a stretto flow file (no `stretto_flow` field)"


def test_a_binding_path_that_does_not_parse_is_refused_naming_the_field(tmp_path: Path) -> None:
    for part, index, bad in [
        ("sources", 3, "$.items[*"),
        ("sources", 3, "items.id"),  # no root
        ("lists", 0, "$.items[0]"),  # an index: a binding path takes every element or none
        ("lists", 0, "$..id"),
        ("sources", 3, "$.where"),  # a reserved word of jsonpath: quote it, $."where"
    ]:
        flow = small_flow()
        flow["bindings"][part][index]["found"][-1]["path"] = bad
        last = len(flow["bindings"][part][index]["found"]) - 1
        field = f"bindings.{part}[{index}].found[{last}].path"
        with pytest.raises(FlowError, match=rf"bad\.flow\.json: field `{re.escape(field)}`"):
            load_flow(write_raw(tmp_path / "bad.flow.json", flow))


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_flows_are_written_private_whatever_the_umask(tmp_path: Path, umask_022) -> None:
    new = tmp_path / "new.flow.json"
    write_flow(small_flow(), new)
    assert mode(new) == 0o600
    # a file that exists never keeps more than 0600 ...
    wide = tmp_path / "wide.flow.json"
    wide.write_text("{}")
    wide.chmod(0o644)
    write_flow(small_flow(), wide)
    assert mode(wide) == 0o600
    # ... and keeps a narrower mode
    narrow = tmp_path / "narrow.flow.json"
    narrow.write_text("{}")
    narrow.chmod(0o400)
    write_flow(small_flow(), narrow)
    assert mode(narrow) == 0o400
    assert load_flow(narrow) == small_flow()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
