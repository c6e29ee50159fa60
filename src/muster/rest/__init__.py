"""musterrestd: Slurm's REST API (OpenAPI, data_parser v0.0.40) in front of the controller.

It owns the translation between Slurm's REST bodies and the controller's own API, and the
OpenAPI document it serves; it owns no state and no secret: every request is made to the
controller as the caller (their JWT, which the controller verifies, or the local socket's
peer), so the commands' permission rules apply unchanged.
"""
