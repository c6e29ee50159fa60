"""The client side of the wire: how a command, or the REST server speaking for a user,
reads the configuration's few client keys, proves who it is and reaches the controller
(the active one when ``SlurmctldHost`` lists several).

The commands import it on their start-up path, so it follows ``muster.cli``'s rules: only
cheap standard-library modules at load time, no ``from __future__ import annotations``
(it would cost a plain submission the ``__future__`` module), the lean HTTP client
(``muster.protocol.client``) imported when a request is first made.
"""
