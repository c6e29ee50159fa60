"""Local clusters for development, tests and the demo: ``muster up|down|status``.

A local cluster is a state directory holding a config in slurm.conf syntax, a cluster key,
the controller's database and one agent per emulated node, each on its own loopback
address (127.0.0.x on Linux) and port. Nothing here is needed on a real cluster.
"""
