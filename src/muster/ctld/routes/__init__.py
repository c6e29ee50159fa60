"""The controller's routes by resource, one module each (``jobs``, ``cluster``,
``reservations``; ``params`` what they read from a request); ``ctld.api`` wires them with the
other route modules (``acct_api``, ``agent_api``, ``stepapi``...) and owns what they share."""
