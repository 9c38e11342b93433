"""A computer-use loop skeleton: screenshot -> model -> actions, until the
model says it is done. Plug your model client into `decide`.

    PYTHONPATH=sdk/python python3 examples/python/agent_loop.py

`decide` gets the task, the screen (PNG bytes) and the steps so far, and
returns the actions to perform next (builders from deskgrid.actions), or
None when the task is finished. The one here is scripted so the example
runs without a model: it clicks, types a line into a file through the
session's shell, and stops once the file says so.
"""

import base64
import sys
from typing import Callable, List, Optional

import deskgrid
from deskgrid import actions

Decide = Callable[[str, bytes, List[str]], Optional[List[actions.Action]]]


def scripted(s: deskgrid.Session) -> Decide:
    def decide(task: str, png: bytes, steps: List[str]) -> Optional[List[actions.Action]]:
        # A real model client would send `task` and `png` (base64) to the
        # model here and turn its tool calls into actions.
        _ = base64.b64encode(png)
        if not steps:
            return [actions.click(100, 100), actions.type("hello")]
        if len(steps) == 1:
            s.shell("echo done > result.txt")  # a tool besides the computer
            return [actions.key("Return")]
        return None

    return decide


def run(dg: deskgrid.Client, task: str, max_steps: int = 10, decide: Optional[Decide] = None) -> List[str]:
    with dg.sessions.create(width=1024, height=768) as s:
        decide = decide or scripted(s)
        steps: List[str] = []
        png = s.screenshot(scale_to=(1024, 768))
        for _ in range(max_steps):
            todo = decide(task, png, steps)
            if todo is None:
                break
            # Perform the actions and get the next screen in one call.
            r = s.act(*todo, screenshot=True)
            png = base64.b64decode(r["screenshot"]["data"])
            steps.append(", ".join(next(iter(a)) for a in todo))
        steps.append("result: " + s.files.read_text("result.txt").strip())
        return steps


if __name__ == "__main__":
    for i, step in enumerate(run(deskgrid.Client(), "write 'done' to result.txt"), 1):
        print(f"step {i}: {step}")
    sys.exit(0)
