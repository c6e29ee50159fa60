"""The pages a command server's runner copies while it waits (``cli.cmdserver``).

A runner is a fork of the server: it shares the server's pages until it writes one, and
each first write then costs a page fault and a copy, in the command's time. The runner
forked ahead copies in advance, while it waits for its client, the pages that commands
write: those its predecessors found no longer shared once their command had run
(``written_pages``, from ``/proc/self/pagemap``), about half of the server's writable
pages. Copying all of them instead took a runner forked during a command several
milliseconds of CPU from it.

A runner copies only once it has waited ``POPULATE_AFTER`` seconds without a client: in
a quick succession of commands (a script's loop) the copying, beside the command that
runs, slowed it more than it saved the next (``sbatch --version`` back to back: 5.5 ms a
call copying at once, 4.6-4.7 copying nothing or after 10 ms; 10-30 ms apart, 5.6-5.7 at
once, 4.7-5.5 after 10 ms, 5.6-6.7 copying nothing; on this project's 2-core machine).
"""

from __future__ import annotations

PAGE_SHIFT = 12
WRITTEN = 1 << 63 | 1 << 56  # a pagemap entry's bits: present, mapped by this process alone
POPULATE_AFTER = 0.01  # seconds a runner waits for a client before it copies
HOT_MAX = 8192  # pages a runner reports written (one datagram)


def writable_ranges() -> list[tuple[int, int]]:
    """This process's private writable mappings (not the kernel's [vdso] and the like)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1][1] == "w" and fields[1][3] == "p" and not (len(fields) > 5 and fields[5].startswith("[v")):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def written_pages(ranges: list[tuple[int, int]]) -> list[int]:
    """The pages of ``ranges`` this process has written since the fork: those no longer
    shared with the server (present and exclusively mapped, in ``/proc/self/pagemap``)."""
    pages: list[int] = []
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for start, end in ranges:
            first = start >> PAGE_SHIFT
            pagemap.seek(first * 8)
            entries = memoryview(pagemap.read((end - start) >> PAGE_SHIFT << 3)).cast("Q")
            pages.extend(first + i for i, entry in enumerate(entries) if entry & WRITTEN == WRITTEN)
    return pages


def populate(hot: set[int]) -> None:
    """Copy, while waiting, the pages of the server's that commands write (``hot``, learnt
    from the runners before): a command then writes its objects without a page fault each
    (MADV_POPULATE_WRITE, Linux 5.14). Only those pages, about half of them, so that a
    runner forked during a command takes less from it. All of them before the runner looks
    at the socket: a runner that took a client half-way, having been on a CPU already,
    would beat the one that waits ready to it."""
    try:
        import ctypes

        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError, ImportError):
        return
    runs: list[list[int]] = []
    for page in sorted(hot):
        if runs and page - runs[-1][1] <= 8:  # a small gap: one call rather than two
            runs[-1][1] = page + 1
        else:
            runs.append([page, page + 1])
    for first, end in runs:
        madvise(first << PAGE_SHIFT, (end - first) << PAGE_SHIFT, 23)
