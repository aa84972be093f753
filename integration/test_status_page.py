"""The status page as a person sees it: loaded from a live daemon in headless Chromium
(Debian's `chromium`), with a phone-sized screenshot kept in test-artifacts/."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from integration.fires import FireLog, recording_job
from integration.harness import DaemonProcess, run_cli, wait_until

Start = Callable[..., DaemonProcess]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SECRET = "s3cret-Value-42"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "headless Chromium is not installed (apt-get install chromium; scripts/test does)"
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)  # CI must prove the page, never skip it
    pytest.skip(why)


def run_chromium(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Tables(HTMLParser):
    """The text of every table cell, by section heading: {heading: [[cell, ...], ...]}."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[list[str]]] = {}
        self.texts: dict[str, str] = {}  # element id -> its text
        self._heading: str | None = None
        self._in_h2 = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._id_stack: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._id_stack.append((tag, dict(attrs).get("id")))
        if tag == "h2":
            self._in_h2, self._heading = True, ""
        elif tag == "tr" and self._heading is not None:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        while self._id_stack and self._id_stack.pop()[0] != tag:
            pass
        if tag == "h2":
            self._in_h2 = False
            self.sections[self._heading or ""] = []
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._heading is not None:
                self.sections[self._heading].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_h2 and self._heading is not None:
            self._heading += data
        if self._cell is not None:
            self._cell.append(data)
        for _tag, element_id in self._id_stack:
            if element_id:
                self.texts[element_id] = self.texts.get(element_id, "") + data


def test_status_page_in_headless_chromium(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    chromium()  # fail (CI) or skip before starting anything
    started = [
        daemons(extra_args=["--http", "127.0.0.1:0"], labels={"rack": f"r{i}"}) for i in (1, 2)
    ]
    urls = {
        d.member_id: wait_until(lambda d=d: d.events("http"), 15, what="HTTP up")[0]["url"]
        for d in started
    }
    out = tmp_path / "fires.txt"
    jobs = recording_job("tick", out) + (
        "\n[jobs.nightly-report]\n"
        'schedule = "30 2 * * *"\n'
        'timezone = "Europe/Berlin"\n'
        "command = ['/bin/true']\n"
        f'env = {{ API_TOKEN = "{SECRET}" }}\n'
    )
    (tmp_path / "jobs.toml").write_text(jobs)
    applied = run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml"))
    assert applied.returncode == 0, applied.stderr

    # The member that ran `tick` says so in the command's own output.
    wait_until(lambda: len(FireLog(out).lines()) >= 2, 20, what="tick fired twice")
    owner = FireLog(out).lines()[-1][1]
    ids = set(urls)
    assert owner in ids

    dom = run_chromium(tmp_path, "--dump-dom", urls[owner])
    assert SECRET not in dom
    page = Tables()
    page.feed(dom)
    assert page.texts["cluster"] == client_id
    assert page.texts["member"] == owner
    assert page.texts["state"].strip() == "ready"

    members = page.sections["Members"]
    assert {row[0].removesuffix(" (this member)") for row in members} == ids
    for row in members:
        assert row[2] in ("rack=r1", "rack=r2")  # labels
        if row[0].endswith(" (this member)"):
            assert re.fullmatch(r"[+-]\d+ ms", row[4]), row  # its own probe's offset
        else:
            assert row[4] == "unknown"  # others' offsets are in ZooKeeper, never read here

    jobs_rows = {row[0]: row for row in page.sections["Jobs and owners"]}
    tick = jobs_rows["tick"]
    assert tick[1] == "* * * * * *" and tick[2] == "UTC"
    assert tick[3] == f"{owner} (this member)"
    assert tick[5].startswith("ok (exit 0)")  # the last fire's result, seen on its owner
    nightly = jobs_rows["nightly-report"]
    assert nightly[2] == "Europe/Berlin"
    assert nightly[3].removesuffix(" (this member)") in ids
    assert nightly[4].endswith("Z)") or ":30:00Z" in nightly[4]  # next fire, in UTC

    fires = page.sections["Recent fires on this member"]
    assert fires and fires[0][0].startswith("tick@")

    # `zksched status` tells the same story in a terminal, read from ZooKeeper.
    done = run_cli(zk, client_id, "status", "--json")
    assert done.returncode == 0, done.stderr
    overview = json.loads(done.stdout)
    assert {m["member_id"] for m in overview["members"]} == ids
    assert {m["member_id"]: m["owned_jobs"] for m in overview["members"]}[owner] >= 1
    by_name = {j["name"]: j for j in overview["jobs"]}
    assert by_name["tick"]["owner"] == owner
    assert by_name["tick"]["last_result"] in ("ok", "running")  # the newest may be mid-run
    assert by_name["nightly-report"]["timezone"] == "Europe/Berlin"
    assert SECRET not in done.stdout
    text = run_cli(zk, client_id, "status")
    assert text.returncode == 0 and f"cluster {client_id}: 2 members, 2 jobs" in text.stdout
    assert "rack=r1" in text.stdout and SECRET not in text.stdout

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "status-page.png"
    shot.unlink(missing_ok=True)
    run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=412,915", urls[owner])
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 5_000  # a rendered page, not a blank image
