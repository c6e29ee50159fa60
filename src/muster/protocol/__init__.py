"""What crosses the wire: API paths, request signing and the lean client.

This package is imported by every command, so it uses only cheap parts of the standard
library (socket, json, hmac, hashlib) and never imports the server frameworks.
``stream`` carries job steps between srun and the agents; ``stepcred`` signs their grants.
"""

API_VERSION = "v1"
