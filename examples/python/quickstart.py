"""Quickstart: create a desktop, act on it, run a command in its sandbox,
save a screenshot, and delete the desktop.

    bin/deskgrid up &
    export DESKGRID_API_KEY=$(cat /var/lib/deskgrid/admin.key)
    PYTHONPATH=sdk/python python3 examples/python/quickstart.py shot.png
"""

import sys

import deskgrid


def main(out: str) -> None:
    with deskgrid.Client() as dg, dg.sessions.create(width=1024, height=768) as s:
        print(f"session {s.id} ({s.width}x{s.height})")
        s.click(512, 384)
        s.type("hello")
        r = s.exec("sh", "-c", "echo hello from $(uname -s) > hello.txt && cat hello.txt")
        print(f"exec: exit {r.exit_code}, {r.text}", end="")
        s.files.write("notes.txt", "written by the Python SDK\n")
        print("notes.txt:", s.files.read_text("notes.txt"), end="")
        png = s.screenshot()
        with open(out, "wb") as f:
            f.write(png)
        print(f"saved {out} ({len(png)} bytes)")
    # leaving the with block deleted the session


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shot.png")
