"""Every key of an archive edited six ways (deleted, null, a string, -1, [], {}), resealed as
a careful editor would, then read by report, audit, gate, crossover, report --format json
and export --csv: one line per distinct traceback (command, edit, error, where), then the
number of keys edited. A clean reader prints only that last line.

    TRITON_INTERPRET=1 python fuzz.py smoke-aa.json.gz

(the seventeenth session's review; ``smoke-aa.json.gz`` is a CPU sweep of the smoke protocol,
eager against eager~twin)
"""

import contextlib
import copy
import json
import os
import sys
import tempfile
import traceback

os.environ["TRITON_INTERPRET"] = "1"

from typer.testing import CliRunner

from qkbench import archive as archives
from qkbench import seal
from qkbench.cli import app

EDITS = [("del", None), ("none", None), ("str", "x"), ("neg", -1), ("list", []), ("dict", {})]
COMMANDS = [["report"], ["audit"], ["gate"], ["crossover"], ["report", "--format", "json"],
            ["export", "--csv"]]


def keys(x, path):
    if isinstance(x, dict):
        for k, v in x.items():
            yield [*path, k]
            yield from keys(v, [*path, k])
    elif isinstance(x, list) and x:
        yield [*path, 0]
        yield from keys(x[0], [*path, 0])


def reseal(run: dict) -> None:
    for p in run.get("passes", []) if isinstance(run.get("passes"), list) else []:
        if isinstance(p, dict):
            p["digest"] = seal.pass_digest(p, None)
    with contextlib.suppress(Exception):  # a header edited past sealing: refused anyway
        seal.seal(run, None)


def main(source: str) -> None:
    run = archives.read(source)
    paths = list(keys(run, []))
    edited_file = os.path.join(tempfile.mkdtemp(), "edited.json")
    seen = set()
    for path in paths:
        where_edited = "/".join(map(str, path))
        for name, value in EDITS:
            edited = copy.deepcopy(run)
            table = edited
            for k in path[:-1]:
                table = table[k]
            if name == "del":
                del table[path[-1]]
            else:
                table[path[-1]] = copy.deepcopy(value)
            reseal(edited)
            with open(edited_file, "w") as f:
                json.dump(edited, f)
            for command in COMMANDS:
                result = CliRunner().invoke(app, [*command, edited_file])
                if result.exception is None or isinstance(result.exception, SystemExit):
                    continue
                e = result.exception
                tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                last = tb.strip().splitlines()[-1]
                where = [line for line in tb.splitlines() if "qkbench" in line and "File" in line]
                key = (command[0], last[:80], tuple(where[-1:]))
                if key not in seen:
                    seen.add(key)
                    print(f"{command[0]} | {where_edited} {name} | {last[:150]} | {where[-1:]}",
                          flush=True)
    print("done", len(paths))


if __name__ == "__main__":
    main(sys.argv[1])
