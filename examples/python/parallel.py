"""Parallel sessions for an evaluation run: create N desktops at once, run a
task on each, collect the results, delete them all.

    PYTHONPATH=sdk/python python3 examples/python/parallel.py 10
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict

import deskgrid


def task(dg: deskgrid.Client, i: int) -> Dict[str, Any]:
    # Each task gets its own desktop, deleted when the task ends however it ends.
    with dg.sessions.create(width=800, height=600, labels={"eval": "demo", "task": str(i)}) as s:
        s.files.write("input.txt", f"task {i}\n")
        r = s.exec("sh", "-c", "tr a-z A-Z < input.txt")
        png = s.screenshot()
        out = {"task": i, "session": s.id, "exit_code": r.exit_code, "output": r.text.strip(), "screenshot_bytes": len(png)}
        if r.exit_code != 0:
            out["stderr"] = r.stderr.decode("utf-8", "replace").strip()
        return out


def main(n: int) -> None:
    dg = deskgrid.Client()
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda i: task(dg, i), range(n)))
    for r in results:
        print(json.dumps(r))
    passed = sum(r["output"] == f"TASK {r['task']}" for r in results)
    print(f"{passed}/{n} tasks passed")
    sys.exit(0 if passed == n else 1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
