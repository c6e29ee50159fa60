"""musterrestd's routes by plugin and resource (``cluster`` and ``jobs``: slurm's; ``slurmdb``:
accounting), each handler a method over ``kit``, what they all share; ``rest.app`` lists the
routes of each served version."""
