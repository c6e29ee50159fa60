"""Pure domain code shared by every part of muster.

Nothing here performs I/O or reads the wall clock (``clock`` is the single, explicit
exception: it is the only module allowed to read time, and everything else takes ``now``
as a parameter). Modules: ``clock``, ``errors``, ``states``, ``hostlist``, ``timefmt``,
``conftext``, ``config``, ``resources``, ``job``, ``lifecycle``, ``steps`` (job step placement).
"""
