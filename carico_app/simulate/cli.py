"""``carico simulate``: compare schedulers on the dissertation's workloads in the cluster model.

Prints the seed and the model parameters, then a table (or JSON with ``--json``); ``--out DIR``
also writes PNG plots. Exit codes: 0 done, 1 a run hit the simulated time limit, 2 bad input or
a scheduler that is not available.

Neighbours: ``scenarios.py`` (what can be run), ``engine.py`` (running), ``report.py`` (output).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from carico_app.simulate import scenarios
from carico_app.simulate.calibration import comparison_table, evaluate
from carico_app.simulate.engine import CaseResult, run_case
from carico_app.simulate.params import ModelParams, override
from carico_app.simulate.report import header, table, to_json, write_plots
from carico_app.simulate.schedulers import SchedulerSpec, parse_spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default="cpu-jobs",
        help=f"one of: {', '.join(scenarios.SCENARIOS)} (default: cpu-jobs)",
    )
    parser.add_argument(
        "--cases",
        default="",
        help="comma-separated cases to run, by label or leading number ('1000' or '500+20'); "
        "default: all of the scenario's cases",
    )
    parser.add_argument(
        "--schedulers",
        default="",
        help="comma-separated: default (the scenario's own requests), default:<cpu>m, "
        "default:<cpu>m/<mem>Mi, carico, carico:p=<cost>,level=<L> (agent options);"
        " default: the scenario's list",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", type=Path, help="write PNG plots into this directory")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a model parameter, e.g. --set startup_max=2 --set node.cores=8 "
        "(repeatable; every parameter is printed with each run)",
    )
    parser.add_argument("--list", action="store_true", help="list scenarios and cases, then exit")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="run the default rows of the dissertation's tables and print simulated vs measured; "
        "exit 1 if a calibration target is outside its band",
    )


def _pick_cases(scenario: scenarios.Scenario, text: str) -> list[scenarios.Case]:
    if not text.strip():
        return list(scenario.cases)
    picked: list[scenarios.Case] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        match = [c for c in scenario.cases if c.label == item or c.label.split(" ")[0] == item]
        if not match:
            known = ", ".join(c.label for c in scenario.cases)
            raise ValueError(f"scenario {scenario.name} has no case {item!r}; cases: {known}")
        picked.extend(m for m in match if m not in picked)
    return picked


def split_schedulers(text: str) -> list[str]:
    """The comma-separated scheduler list; a carico spec's own options are comma-separated too,
    so an item that is only ``key=value`` continues the spec before it.

    >>> split_schedulers("default:500m,carico:level=0.9,shape=0:0+100:10,carico")
    ['default:500m', 'carico:level=0.9,shape=0:0+100:10', 'carico']
    """
    names: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if names and names[-1].startswith("carico:") and re.match(r"^[a-z]+=", item):
            names[-1] += "," + item
        else:
            names.append(item)
    return names


def run(args: argparse.Namespace) -> int:
    if args.list:
        for s in scenarios.SCENARIOS.values():
            print(f"{s.name}: {s.description}")
            print(f"  cases: {', '.join(c.label for c in s.cases)}")
            print(f"  schedulers: {', '.join(s.schedulers)}")
        return 0
    if args.calibrate:
        return _calibrate(args)
    try:
        scenario = scenarios.get(args.scenario)
        cases = _pick_cases(scenario, args.cases)
        names = split_schedulers(args.schedulers) or list(scenario.schedulers)
        specs: list[SchedulerSpec] = [parse_spec(x) for x in names]
        params = override(ModelParams(), args.overrides)
    except ValueError as exc:
        print(f"carico simulate: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(f"scenario={scenario.name} ({scenario.description}); nodes={scenario.nodes}")
        print(header(args.seed, params))
        print(flush=True)
    results: list[CaseResult] = []
    for case in cases:
        for spec in specs:
            results.append(run_case(scenario, case, spec, params, args.seed))
    if args.json:
        print(json.dumps(to_json(results, args.seed, params), indent=1))
    else:
        print(table(results))
    if args.out is not None:
        paths = write_plots(results, args.out)
        print(f"wrote {len(paths)} plots to {args.out}", file=sys.stderr)
    if not all(r.finished for r in results):
        print("carico simulate: some runs hit the simulated time limit", file=sys.stderr)
        return 1
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    try:
        params = override(ModelParams(), args.overrides)
    except ValueError as exc:
        print(f"carico simulate: {exc}", file=sys.stderr)
        return 2
    print(header(args.seed, params))
    print(flush=True)
    rows = evaluate(params, args.seed, progress=lambda m: print(m, file=sys.stderr, flush=True))
    text, ok = comparison_table(rows)
    print(text)
    print()
    print("calibration: all targets inside their bands" if ok else "calibration: FAILED")
    return 0 if ok else 1
