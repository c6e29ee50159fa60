"""musterrestd on a Unix socket (Slurm's ``unix:`` listen, rest_auth/local): its own user
needs no token (SO_PEERCRED proves the peer), anyone else needs one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from restworld import ALICE, BOB, Rest, V
from waiting import wait_for

pytestmark = pytest.mark.integration


def _curl(rest: Rest, sock: str, path: str, uid: int, *headers: str) -> tuple[int, dict]:
    args = ["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", sock]
    for h in headers:
        args += ["-H", h]
    out = rest.h.run([*args, f"http://localhost{path}"], uid=uid)
    body, _, code = out.stdout.rpartition("\n")
    return int(code), json.loads(body)


def test_the_sockets_own_user_needs_no_token_and_others_do(rest: Rest) -> None:
    sock = os.path.join(rest.h.workdir, "rest-alice.sock")
    proc = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={rest.alice}",
            f"--regid={rest.alice}",
            "--clear-groups",
            sys.executable,
            "-m",
            "muster.rest.main",
            f"unix:{sock}",
        ],
        env=rest.h.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def listening() -> bool:
            assert proc.poll() is None, "musterrestd exited"
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(sock)
                except OSError:
                    return False
            return True

        wait_for(listening, 30, interval=0.1, what="musterrestd listening on its socket")
        code, body = _curl(rest, sock, f"{V}/jobs", rest.alice)
        assert code == 200, body
        # the job list is the one alice's squeue sees: submit as alice over the socket
        script = "#!/bin/sh\ntrue\n"
        job = {"job": {"script": script, "current_working_directory": rest.h.workdir, "environment": ["A=1"]}}
        out = rest.h.run(
            [
                "curl",
                "-s",
                "--unix-socket",
                sock,
                "-H",
                "Content-Type: application/json",
                "-d",
                json.dumps(job),
                f"http://localhost{V}/job/submit",
            ],
            uid=rest.alice,
        )
        job_id = json.loads(out.stdout)["job_id"]
        assert rest.h.job(job_id)["user"] == ALICE
        # bob on alice's socket: no token, no service; with his own token, he is bob
        code, body = _curl(rest, sock, f"{V}/jobs", rest.bob)
        assert code == 401 and body["errors"][0]["error_number"] == 1007
        code, body = _curl(
            rest,
            sock,
            f"{V}/job/{job_id}",
            rest.bob,
            f"X-SLURM-USER-NAME: {BOB}",
            f"X-SLURM-USER-TOKEN: {rest.tokens[BOB]}",
        )
        assert code == 404, body  # PrivateData=jobs: bob does not see alice's job
        code, body = _curl(
            rest, sock, f"{V}/jobs", rest.bob, f"X-SLURM-USER-NAME: {BOB}", f"X-SLURM-USER-TOKEN: {rest.tokens[BOB]}"
        )
        assert code == 200 and job_id not in [j["job_id"] for j in body["jobs"]]
    finally:
        proc.terminate()
        proc.wait(10)
