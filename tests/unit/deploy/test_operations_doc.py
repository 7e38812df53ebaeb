"""docs/operations.md documents every flag of the three components exactly as the code has it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from carico_app import flagdoc

DOC = flagdoc.DOC
README = Path(flagdoc.__file__).resolve().parent.parent / "README.md"


def test_the_generated_flag_tables_are_up_to_date() -> None:
    current = DOC.read_text(encoding="utf-8")
    assert flagdoc.rewrite(current) == current, "run: python -m carico_app.flagdoc"
    assert flagdoc.main(["--check"]) == 0


@pytest.mark.parametrize("component", flagdoc.COMPONENTS)
def test_every_flag_is_documented_with_its_variable_and_default(component: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"#### `carico {component}`", 1)[1].split("####", 1)[0]
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(
            r"^\| `(--[a-z0-9-]+)` \| `(CARICO_[A-Z0-9_]+)` \| ([^|]+) \|", section, re.M
        )
    }
    parser = flagdoc._parser(component)
    flags = {
        o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"
    }
    assert flags and set(rows) == flags
    for action in parser._actions:
        for flag in (o for o in action.option_strings if o in rows):
            env, default = rows[flag]
            assert env == "CARICO_" + flag[2:].replace("-", "_").upper()
            if isinstance(action.default, float | int) and not isinstance(action.default, bool):
                assert default.strip() == f"`{action.default}`", flag


def test_defaults_ignore_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARICO_THRESHOLD", "7.5")
    monkeypatch.setenv("CARICO_STALE_POLICY", "fail-closed")
    rows = {flag: default for _, flag, _, default, _ in flagdoc.flags("extender")}
    assert rows["--threshold"] == "`1.0`" and rows["--stale-policy"] == "`fail-open`"


def test_a_doc_without_the_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="markers"):
        flagdoc.rewrite("# no generated block here\n")


def test_troubleshooting_answers_the_usual_questions() -> None:
    text = DOC.read_text(encoding="utf-8")
    for heading in (
        "### My pod is pending — how to read `/api/v1/explain`",
        "### A node shows stale",
        "### The repacker did nothing",
        "### The extender is down",
    ):
        assert heading in text
    for name in ("carico-agent-tls", "carico-aggregator-tls", "carico-extender-tls"):
        assert name in text


def test_the_readme_links_it_from_an_operations_section_at_the_end() -> None:
    readme = README.read_text(encoding="utf-8")
    last = readme.rsplit("\n## ", 1)[1]
    assert last.startswith("Operations\n") and "docs/operations.md" in last
