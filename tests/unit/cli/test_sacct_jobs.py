"""sacct as submitit's watcher calls it (issue 7)."""

from __future__ import annotations

from muster.cli import sacct


def test_repeated_job_options_add_up() -> None:
    # submitit asks ``sacct -o JobID,State,NodeList --parsable2 -j A -j B``
    req = sacct.parse_args(["-o", "JobID,State", "--parsable2", "-j", "12", "-j", "14_2"], {}, 0.0)
    assert not isinstance(req, str)
    assert req.params["job_id"] == ["12", "14_2"]
