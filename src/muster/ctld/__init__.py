"""musterctld, the controller: it owns the truth about jobs, nodes and partitions.

Modules: ``main`` (process entry), ``app`` (wiring and background loops), ``api`` (HTTP
routes, validation, authn/authz; no scheduling logic), ``controller`` (in-memory state and
every state change, each persisted before it is acknowledged), ``nodes`` (node runtime
state), ``view`` (builds the scheduler's snapshot from memory), ``wire`` (job/node/partition
views sent to clients), ``dispatch`` (the only place that calls agents), ``store``
(SQLite: event log plus projections), ``steps`` and ``stepapi`` (job steps inside
allocations, srun/salloc's interactive allocations; see docs/steps.md).
"""
