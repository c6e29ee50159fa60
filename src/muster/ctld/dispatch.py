"""The only place where the controller calls agents.

Each action becomes one signed HTTP request to the node's agent. Failures are reported
back to the controller (a launch that cannot reach its node is requeued); the scheduler
never waits on the network.
"""

from __future__ import annotations

import logging

from muster.core.job import Job
from muster.ctld.actions import Action, Launch, NewLimit, SignalJob, Terminate
from muster.ctld.controller import Controller
from muster.ctld.steps import StepSignal
from muster.protocol.httpd import DaemonRequestError, SignedClient

log = logging.getLogger("musterctld.dispatch")


class Dispatcher:
    def __init__(self, controller: Controller, client: SignedClient) -> None:
        self.ctl = controller
        self.client = client

    def _url(self, node_name: str, path: str) -> str:
        node = self.ctl.nodes[node_name]
        return f"http://{node.addr}:{node.port}{path}"

    async def run(self, action: Action) -> None:
        try:
            if isinstance(action, Launch):
                await self._launch(action)
            elif isinstance(action, Terminate):
                job = self.ctl.jobs.get(action.job_id)
                for node in action.nodes:
                    await self._post(node, "/v1/terminate", {
                        "job_id": action.job_id,
                        "restart_count": action.attempt,
                        "reason": action.reason,
                        "kill_wait": self.ctl.config.kill_wait,
                        **({"job": _epilog_view(job, action.nodes)} if job is not None else {}),
                    })
            elif isinstance(action, NewLimit):
                await self._post(action.node, "/v1/update", {
                    "job_id": action.job_id,
                    "time_limit": action.time_limit,
                })
            elif isinstance(action, SignalJob):
                for node in action.nodes:
                    await self._post(node, "/v1/signal", {
                        "job_id": action.job_id,
                        "signal": action.signal,
                        "batch_only": action.batch_only,
                    })
            elif isinstance(action, StepSignal):  # scancel N.S
                for node in action.nodes:
                    await self._post(node, "/v1/step_signal", action.body())
        except Exception:  # a surprise must not kill the controller's loop
            log.exception("dispatch of %r failed", action)

    async def _post(self, node: str, path: str, body: dict[str, object]) -> bool:
        try:
            await self.client.post(self._url(node, path), body, to=node)
            return True
        except (DaemonRequestError, OSError, Exception) as e:  # noqa: B014 - httpx errors too
            log.warning("node %s: %s %s failed: %s", node, path, body.get("job_id"), e)
            return False

    async def _launch(self, action: Launch) -> None:
        job = action.job
        host = job.batch_host
        assert host is not None
        body = {
            "job": job.to_dict(),
            "cluster": self.ctl.config.cluster_name,
            "kill_wait": self.ctl.config.kill_wait,
        }
        try:
            await self.client.post(self._url(host, "/v1/launch"), body, to=host)
        except DaemonRequestError as e:
            # The agent answered why it could not start the job, and whose fault it is (it
            # also saved a report saying so, for the case this answer is lost).
            log.warning("job %s: launch refused by %s: %s", job.job_id, host, e)
            if e.data.get("code") == "launch_failed":
                self.ctl.launches.launch_failed(job.job_id, job.restart_count, e.message,
                                       str(e.data.get("fault") or "node"))
            else:
                self.ctl.launches.launch_done(job.job_id)
        except Exception as e:
            log.warning("job %s: cannot reach %s to launch: %s", job.job_id, host, e)
            self.ctl.launches.launch_failed(job.job_id, job.restart_count, str(e))
        else:
            self.ctl.launches.launch_done(job.job_id)


def _epilog_view(job: Job, nodes: list[str]) -> dict[str, object]:
    """What a node's Epilog is told of the job whose end reaches it."""
    return {
        "user": job.user,
        "uid": job.uid,
        "gid": job.gid,
        "partition": job.partition,
        "spec": {"name": job.spec.name, "workdir": job.spec.workdir},
        "alloc": [{"node": a.node, "gpu_ids": list(a.gpu_ids)} for a in job.alloc]
        or [{"node": n} for n in nodes],
    }
