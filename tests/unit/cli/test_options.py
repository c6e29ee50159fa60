"""The getopt work-alike, #SBATCH directive parsing and the job option table."""

from __future__ import annotations

import pytest

from muster.cli.directives import script_directives
from muster.core.optionvalues import (
    OptionValueError,
    parse_array_option,
    parse_nodes,
    parse_signal_option,
)
from muster.slurm.jobrequest import JobRequest, current_umask, export_environment
from muster.slurm.options import (
    JOB_OPTIONS,
    NO_ARG,
    OPTIONAL,
    Opt,
    OptionError,
    OptionTable,
    apply_options,
    env_options,
    getopt,
)

TABLE = OptionTable(
    (
        Opt("job-name", "J"),
        Opt("hold", "H", NO_ARG),
        Opt("verbose", "v", NO_ARG),
        Opt("nice", None, OPTIONAL),
        Opt("partition", "p"),
        Opt("parsable", None, NO_ARG),
    )
)


def _pairs(argv: list[str], permute: bool = True) -> tuple[list[tuple[str, str | None]], list[str]]:
    parsed, rest = getopt(argv, TABLE, permute=permute)
    return [(o.key, v) for o, v in parsed], rest


@pytest.mark.parametrize(
    "argv",
    [["-J", "x"], ["-Jx"], ["--job-name", "x"], ["--job-name=x"], ["--job=x"], ["--job", "x"]],
)
def test_every_spelling_of_an_option_with_a_value(argv) -> None:
    assert _pairs(argv) == ([("job-name", "x")], [])


def test_clustered_flags_and_a_trailing_value() -> None:
    assert _pairs(["-HvJname"]) == ([("hold", None), ("verbose", None), ("job-name", "name")], [])


def test_a_value_may_start_with_a_dash() -> None:
    assert _pairs(["-J", "-1"]) == ([("job-name", "-1")], [])


def test_optional_values_only_attach_with_equals() -> None:
    assert _pairs(["--nice", "5"]) == ([("nice", None)], ["5"])
    assert _pairs(["--nice=5"]) == ([("nice", "5")], [])


def test_permute_collects_operands_anywhere_and_stops_at_double_dash() -> None:
    assert _pairs(["a", "-H", "b", "--", "-v"]) == ([("hold", None)], ["a", "b", "-v"])


def test_without_permute_the_first_operand_ends_the_options() -> None:
    assert _pairs(["-H", "script.sh", "-v", "--x"], permute=False) == (
        [("hold", None)],
        ["script.sh", "-v", "--x"],
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unrecognized option '--bogus'"),
        (["--bogus=1"], "unrecognized option '--bogus=1'"),
        (["-k"], "invalid option -- 'k'"),
        (["-J"], "option requires an argument -- 'J'"),
        (["--job-name"], "option '--job-name' requires an argument"),
        (["--hold=yes"], "option '--hold' doesn't allow an argument"),
        (["--pa"], "option '--pa' is ambiguous; possibilities: '--partition' '--parsable'"),
    ],
)
def test_errors_use_glibc_wording(argv, message) -> None:
    with pytest.raises(OptionError) as err:
        getopt(argv, TABLE)
    assert str(err.value) == message


def test_directives_stop_at_the_first_command() -> None:
    script = "#!/bin/bash\n#SBATCH -J a\n\n# a comment\n#SBATCH --time=5\necho hi\n#SBATCH -p late\n"
    assert script_directives(script) == ["-J", "a", "--time=5"]


def test_directives_handle_quotes_and_comments() -> None:
    script = "#!/bin/sh\n#SBATCH --job-name=\"my job\" --comment 'a # b' # trailing comment\n#SBATCH -o out.txt#x\n"
    assert script_directives(script) == [
        "--job-name=my job",
        "--comment",
        "a # b",
        "-o",
        "out.txt#x",
    ]


def test_indented_directives_are_comments() -> None:
    assert script_directives("#!/bin/sh\n  #SBATCH -J x\n#SBATCH -H\n") == ["-H"]


def test_export_forms() -> None:
    env = {"HOME": "/h", "PATH": "/bin", "SLURM_CONF": "/c"}
    assert export_environment("ALL", env) == env
    assert export_environment("NONE", env) == {}
    assert export_environment("ALL,A=1", env) == {**env, "A": "1"}
    assert export_environment("HOME,B=2", env) == {"HOME": "/h", "B": "2", "SLURM_CONF": "/c"}
    assert export_environment('ALL,C="x,y"', env)["C"] == "x,y"


def test_node_counts() -> None:
    assert parse_nodes("4") == (4, 4)
    assert parse_nodes("2-8") == (2, 8)
    # an empty minimum is one node, as Slurm reads -N-3 ("at most 3")
    assert parse_nodes("-3") == (1, 3) and parse_nodes("-1") == (1, 1)
    for bad, message in (
        ("-", '"-" is not a valid node count'),
        ("-0", '"-0" is not a valid node count'),
        ("0", '"0" is not a valid node count'),
        ("x", '"x" is not a valid node count'),
        ("4-2", "Maximum node count 2 is less than minimum node count 4"),
    ):
        with pytest.raises(OptionValueError) as err:
            parse_nodes(bad)
        assert str(err.value) == message and err.value.rc == 255


def test_signal_and_array_checks() -> None:
    assert parse_signal_option("B:USR1@90") == "B:USR1@90"
    assert parse_signal_option("SIGTERM") == "SIGTERM"
    assert parse_signal_option("10@30") == "10@30"
    for bad in ("NOPE", "USR1@x", ""):
        with pytest.raises(OptionValueError, match="Invalid --signal specification"):
            parse_signal_option(bad)
    assert parse_array_option("0-15%4") == "0-15%4"
    assert parse_array_option("1,3,5-7:2") == "1,3,5-7:2"
    for bad in ("a", "5-1", "1-3%x", "1:2", "1-5%0", "1-5%", "1-5%2147483648"):
        with pytest.raises(OptionValueError, match="Invalid job array specification"):
            parse_array_option(bad)


def _request(argv: list[str], environ: dict[str, str] | None = None) -> dict:
    table = OptionTable(JOB_OPTIONS)
    parsed, _ = getopt(argv, table)
    req = JobRequest()
    apply_options(req, env_options(table, environ or {}) + parsed)
    return req.finish({"HOME": "/h"}, "/work", now=1_000_000.0)


def test_job_options_fill_jobspec_fields() -> None:
    spec = _request(
        [
            "-J",
            "train",
            "-p",
            "gpu,debug,gpu",
            "-N",
            "2",
            "-n",
            "16",
            "--ntasks-per-node=8",
            "-c",
            "4",
            "--mem=64G",
            "--gres=gpu:a100:8",
            "-t",
            "1-00:00:00",
            "--time-min=30",
            "-o",
            "out-%j.txt",
            "-D",
            "sub",
            "--exclusive",
            "-w",
            "node[1-2]",
            "-x",
            "node3",
            "--requeue",
            "--nice",
            "-A",
            "acct",
            "-q",
            "high",
            "--comment=c",
            "-C",
            "ib",
            "-d",
            "afterok:5",
            "--open-mode=a",
            "--signal=USR1@60",
            "--array=0-3",
            "--begin=now+60",
            "-H",
        ]
    )
    assert spec["name"] == "train"
    assert spec["partitions"] == ["gpu", "debug"]
    assert (
        spec["min_nodes"],
        spec["max_nodes"],
        spec["ntasks"],
        spec["ntasks_per_node"],
        spec["cpus_per_task"],
    ) == (2, 2, 16, 8, 4)
    assert spec["mem_per_node"] == 65536
    assert (spec["gpus_per_node"], spec["gpu_type"]) == (8, "a100")
    assert (spec["time_limit"], spec["time_min"]) == (86400, 1800)
    assert spec["stdout"] == "out-%j.txt" and spec["workdir"] == "/work/sub"
    assert spec["exclusive"] is True and spec["requeue"] is True and spec["hold"] is True
    assert spec["nodelist"] == ["node1", "node2"] and spec["exclude"] == ["node3"]
    assert spec["nice"] == 100 and spec["open_mode"] == "append"
    assert spec["begin_time"] == 1_000_060.0
    assert spec["environment"] == {"HOME": "/h", "SLURM_UMASK": current_umask()}  # the umask always travels


def test_memory_options_replace_each_other() -> None:
    spec = _request(["--mem=4G", "--mem-per-cpu=500"])
    assert spec.get("mem_per_cpu") == 500 and "mem_per_node" not in spec


def test_time_zero_and_unlimited_mean_no_limit() -> None:
    assert _request(["-t", "0"])["time_limit"] is None
    assert _request(["-t", "UNLIMITED"])["time_limit"] is None


def test_gpu_options() -> None:
    spec = _request(["--gpus=v100:4", "--gpus-per-task=1"])
    assert (spec["gpus"], spec["gpu_type"], spec["gpus_per_task"]) == (4, "v100", 1)
    assert _request(["-G", "2"])["gpus"] == 2


@pytest.mark.parametrize(
    ("argv", "message", "rc"),
    [
        (["-t", "abc"], "Invalid --time specification", 255),
        (["-t", "1:2:3:4"], "Invalid --time specification", 255),
        (["-n", "0"], 'Invalid numeric value "0" for --ntasks.', 255),
        (["-c", "-2"], 'Invalid numeric value "-2" for --cpus-per-task.', 255),
        (["--mem=lots"], "Invalid --mem specification", 255),
        (["--gres=tpu:1"], "Invalid generic resource (gres) specification", 1),
        (["--gres=gpu:x:y:z"], "Invalid generic resource (gres) specification", 1),
        (["--gpus=many"], "Invalid --gpus specification", 255),
        (["--open-mode=sideways"], "Invalid --open-mode specification: sideways", 255),
        (["--begin=whenever"], "Invalid --begin specification", 255),
        (["-w", "node[3-1]"], "Invalid --nodelist specification", 255),
        # numbers Slurm cannot hold (32-bit counts, minutes) and digits that are not ASCII
        (["-t", "99999999999"], "Invalid time limit specification", 255),
        (["-n", "99999999999999999999"], 'Invalid numeric value "99999999999999999999" for --ntasks.', 255),
        (["-n", "2147483648"], 'Invalid numeric value "2147483648" for --ntasks.', 255),
        (["-n", "\u00b2"], 'Invalid numeric value "\u00b2" for --ntasks.', 255),
        (["-N", "99999999999"], '"99999999999" is not a valid node count', 255),
        (["-N", "\u0662"], '"\u0662" is not a valid node count', 255),
        (["--nice=99999999999999"], "Invalid nice value", 255),
        (["--gres=gpu:99999999999"], "Invalid generic resource (gres) specification", 1),
        (["--gres=gpu:a100:\u00b2"], "Invalid generic resource (gres) specification", 1),
    ],
)
def test_bad_values(argv, message, rc) -> None:
    with pytest.raises(OptionValueError) as err:
        _request(argv)
    assert str(err.value).startswith(message)
    assert err.value.rc == rc


def test_environment_variables_set_options() -> None:
    spec = _request(
        [],
        {
            "SBATCH_JOB_NAME": "envname",
            "SBATCH_TIMELIMIT": "10",
            "SBATCH_NO_REQUEUE": "1",
            "SBATCH_EXCLUSIVE": "",
        },
    )
    assert (spec["name"], spec["time_limit"], spec["requeue"], spec["exclusive"]) == (
        "envname",
        600,
        False,
        True,
    )


def test_command_line_beats_environment() -> None:
    assert _request(["-J", "cli"], {"SBATCH_JOB_NAME": "env"})["name"] == "cli"


def test_ignored_options_are_accepted() -> None:
    table = OptionTable(JOB_OPTIONS)
    parsed, _ = getopt(["--mail-type=END", "--wckey=x", "--cpus-per-gpu=4"], table)
    req = JobRequest()
    apply_options(req, parsed)
    assert req.ignored == ["wckey", "cpus-per-gpu"]


@pytest.mark.parametrize(
    ("text", "types"),
    [
        ("END", ["END"]),
        ("begin,end", ["BEGIN", "END"]),
        ("ALL", ["BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND", "STAGE_OUT"]),
        (
            "ALL,TIME_LIMIT_50,ARRAY_TASKS",
            ["BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT_50", "ARRAY_TASKS"],
        ),
        ("NONE", []),
    ],
)
def test_mail_type_reads_slurms_names(text: str, types: list[str]) -> None:
    assert _request([f"--mail-type={text}", "--mail-user=ops@example.org"])["mail_type"] == types
    assert _request(["--mail-user=ops@example.org"])["mail_user"] == "ops@example.org"


def test_an_unknown_mail_type_is_refused_by_name() -> None:
    with pytest.raises(OptionValueError, match="--mail-type=BEGIN,SOON invalid"):
        _request(["--mail-type=BEGIN,SOON"])


@pytest.mark.parametrize(
    ("argv", "fields"),
    [
        (["--switches=2"], {"switches": 2, "switch_wait": None}),
        (["--switches=1@10:00"], {"switches": 1, "switch_wait": 600}),
        (["--switches", "4@2-0"], {"switches": 4, "switch_wait": 2 * 86400}),
        (["--segment=4"], {"segment": 4}),
        (["--exclusive=topo"], {"exclusive": True, "exclusive_topo": True}),
        (["--exclusive"], {"exclusive": True, "exclusive_topo": False}),
    ],
)
def test_topology_options_fill_the_spec(argv: list[str], fields: dict[str, object]) -> None:
    spec = _request(argv)
    assert {k: spec.get(k) for k in fields} == {k: v or None for k, v in fields.items()}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--switches=0"], "Invalid --switches specification: 0"),
        (["--switches=two"], "Invalid --switches specification: two"),
        (["--switches=1@soon"], "Invalid --switches specification"),
        (["--segment=0"], "Invalid --segment specification: 0"),
        (["--exclusive=rack"], "Invalid --exclusive specification: rack"),
    ],
)
def test_bad_topology_options_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(OptionValueError, match=message):
        _request(argv)


def test_sbatch_req_switch_sets_switches() -> None:
    assert _request([], {"SBATCH_REQ_SWITCH": "3"})["switches"] == 3


def test_requeue_takes_expedite_and_refuses_other_values() -> None:
    assert _request(["--requeue"])["requeue"] is True and not _request(["--requeue"]).get("expedite")
    spec = _request(["--requeue=expedite"])
    assert spec["requeue"] is True and spec["expedite"] is True
    assert _request([], {"SBATCH_REQUEUE": "1"})["requeue"] is True
    with pytest.raises(OptionValueError, match="Invalid --requeue specification: sometimes"):
        _request(["--requeue=sometimes"])
