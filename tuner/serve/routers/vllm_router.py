"""vLLM's router (`vllm-router` on PyPI, a Python launcher around a compiled core), pinned at
0.1.17 (the `router` extra): `vllm-router --worker-urls URL... --policy P --host H --port N
--prometheus-port M`, flags and policies as its own --help lists them at that version.

What tuner passes besides the workers, and why:
- `--policy` always: the router's default (cache_aware) would otherwise decide a trial that
  meant another.
- its own `--port` and `--prometheus-port`: the metrics port defaults to 29000, so two routers
  on one node (parallel trials, a head-to-head) would collide.
- `--disable-retries` and `--disable-circuit-breaker`: by default the router retries a failed
  request (up to 5 times) on another worker and stops sending to a worker that keeps failing.
  In a measurement both hide a failing replica: its errors would come back as successes with a
  longer latency, from the other replicas. A failed request must count as failed, as it does
  against one server.
- `--worker-startup-check-interval 1`: it waits for every worker's health before it serves,
  and checks every 30 s by default, so a router started beside replicas still loading would
  answer up to 30 s after they were ready.
"""

from __future__ import annotations

from tuner.serve.engines.base import LaunchPlan

POLICIES = ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two",
            "consistent_hash", "sticky_least_loaded")


class VllmRouter:
    name = "vllm-router"
    default_executable = "vllm-router"
    policies = POLICIES
    default_policy = "cache_aware"  # the router's own default, named

    def infeasibility(self, policy: str) -> str | None:
        if policy not in POLICIES:
            return (f"router_policy {policy!r} is not a policy of {self.name} (its policies: "
                    f"{', '.join(POLICIES)})")
        if policy == "kv_aware":
            # It routes on KV-cache events each worker publishes over ZMQ (--kv-event-source),
            # which tuner's replicas are not started with.
            return ("router_policy kv_aware needs KV-cache event feeds from the replicas, "
                    "which tuner does not set up: use cache_aware (the router's own view of "
                    "each replica's prefixes)")
        return None

    def deploy_command(self, workers: list[str], policy: str, *, executable: str, host: str,
                       port: int) -> list[str]:
        """The router of an exported deployment: the policy the trial measured, and the
        router's own retries and circuit breaker, which a deployment wants (a measurement turns
        them off to count every failed request). Workers may take long to load a real model:
        it waits up to an hour for them."""
        return [executable, "--worker-urls", *workers, "--policy", policy,
                "--host", host, "--port", str(port), "--worker-startup-timeout-secs", "3600"]

    def launch_plan(self, workers: list[str], policy: str, *, executable: str, host: str,
                    port: int, metrics_port: int, model: str,
                    ready_timeout_s: float) -> LaunchPlan:
        argv = [executable, "--worker-urls", *workers, "--policy", policy,
                "--host", host, "--port", str(port),
                "--prometheus-host", host, "--prometheus-port", str(metrics_port),
                "--disable-retries", "--disable-circuit-breaker",
                "--worker-startup-timeout-secs", str(max(1, int(ready_timeout_s))),
                "--worker-startup-check-interval", "1"]
        return LaunchPlan(engine=self.name, argv=argv, env={}, files={}, host=host, port=port,
                          model=model, gpus=0, health_path="/health", version_path=None,
                          extra={"policy": policy, "workers": list(workers),
                                 "metrics_port": metrics_port})
