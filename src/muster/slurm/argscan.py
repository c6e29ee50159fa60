"""The command-line scanner every command uses: ``getopt``, a small GNU ``getopt_long``
work-alike, with ``Opt`` (one option) and ``OptionTable`` (options indexed for it).

It accepts ``--opt=val``, ``--opt val``, ``-Jname``, ``-J name``, clustered flags (``-Hv``),
unique prefixes of long names (``--part``), ``--`` as the end of options, and either
permutes operands (squeue, scancel) or stops at the first one (sbatch, whose script
arguments follow the script). Its error texts are glibc's, which Slurm users and scripts
know. It lives apart from ``muster.slurm.options`` (the job options' table, which re-exports
these names) so that the query commands (squeue, sinfo, scontrol) import neither that
table nor the value parsers behind it: start-up time.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

from muster.core.errors import CommandError

NO_ARG, REQUIRED, OPTIONAL = 0, 1, 2


class OptionError(Exception):
    """A command line that getopt rejects; ``str()`` is the text after ``<prog>: ``."""


class Opt:
    """One option: long names, optional short letter, argument mode, and what it does.

    ``key`` identifies the option to the command that reads the parsed list; ``env`` names
    the input environment variables that set it (sbatch's ``SBATCH_*``); ``apply`` is a
    function ``(request, value)`` for job options, None for a command's own options.
    """

    __slots__ = ("longs", "short", "arg", "key", "env", "apply")

    def __init__(
        self,
        longs: str | tuple[str, ...],
        short: str | None = None,
        arg: int = REQUIRED,
        key: str | None = None,
        env: tuple[str, ...] = (),
        apply: object = None,
    ) -> None:
        self.longs = (longs,) if isinstance(longs, str) else longs
        self.short = short
        self.arg = arg
        self.key = key or (self.longs[0] if self.longs else short or "")
        self.env = env
        self.apply = apply

    @property
    def name(self) -> str:
        """How messages name the option: ``--time``, or ``-X`` for a short-only option."""
        return f"--{self.longs[0]}" if self.longs else f"-{self.short}"

    def __repr__(self) -> str:
        return f"Opt({self.name})"


class OptionTable:
    """Options indexed for getopt; build once per command (cheap: dict building only)."""

    __slots__ = ("opts", "by_long", "by_short")

    def __init__(self, *groups: tuple[Opt, ...]) -> None:
        self.opts: list[Opt] = [o for group in groups for o in group]
        self.by_long: dict[str, Opt] = {}
        self.by_short: dict[str, Opt] = {}
        for o in self.opts:
            for name in o.longs:
                self.by_long[name] = o
            if o.short:
                self.by_short[o.short] = o

    def find_long(self, typed: str) -> tuple[Opt, str]:
        """The option a (possibly abbreviated) long name means, and its full name."""
        opt = self.by_long.get(typed)
        if opt is not None:
            return opt, typed
        matches = [name for name in self.by_long if name.startswith(typed)]
        if not matches:
            raise KeyError(typed)
        distinct = {id(self.by_long[m]) for m in matches}
        if len(distinct) > 1:
            listed = " ".join(f"'--{m}'" for m in matches)
            raise OptionError(f"option '--{typed}' is ambiguous; possibilities: {listed}")
        return self.by_long[matches[0]], matches[0]


Parsed = list[tuple[Opt, "str | None"]]


def getopt(argv: list[str], table: OptionTable, *, permute: bool = True) -> tuple[Parsed, list[str]]:
    """Split ``argv`` into (option, value) pairs and operands, like ``getopt_long``.

    With ``permute`` operands may appear anywhere; without it (sbatch's ``+`` mode) the
    first operand ends option parsing and it and everything after it are operands.
    Raises ``OptionError`` with glibc's wording.
    """
    parsed: Parsed = []
    operands: list[str] = []
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        i += 1
        if word == "--":
            operands.extend(argv[i:])
            break
        if word.startswith("--"):
            body = word[2:]
            typed, eq, value = body.partition("=")
            try:
                opt, full = table.find_long(typed)
            except KeyError:
                raise OptionError(f"unrecognized option '{word}'") from None
            if eq:
                if opt.arg == NO_ARG:
                    raise OptionError(f"option '--{full}' doesn't allow an argument")
                parsed.append((opt, value))
            elif opt.arg == REQUIRED:
                if i >= n:
                    raise OptionError(f"option '--{full}' requires an argument")
                parsed.append((opt, argv[i]))
                i += 1
            else:
                parsed.append((opt, None))
            continue
        if word.startswith("-") and len(word) > 1:
            pos = 1
            while pos < len(word):
                letter = word[pos]
                pos += 1
                short = table.by_short.get(letter)
                if short is None:
                    raise OptionError(f"invalid option -- '{letter}'")
                opt = short
                if opt.arg == NO_ARG:
                    parsed.append((opt, None))
                    continue
                rest = word[pos:]
                if rest:
                    parsed.append((opt, rest))
                elif opt.arg == REQUIRED:
                    if i >= n:
                        raise OptionError(f"option requires an argument -- '{letter}'")
                    parsed.append((opt, argv[i]))
                    i += 1
                else:
                    parsed.append((opt, None))
                break
            continue
        if not permute:
            operands.append(word)
            operands.extend(argv[i:])
            break
        operands.append(word)
    return parsed, operands


def option_error(prog: str, message: object, rc: int = 1) -> CommandError:
    """The CommandError for getopt's complaint plus Slurm's hint (the text of
    ``cli.common.usage_error``)."""
    return CommandError(f'{prog}: {message}\nTry "{prog} --help" for more information', rc, raw=True)
