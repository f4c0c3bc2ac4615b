"""What the load generators send: each workload as a wrk Lua script and as a Python generator.

Both forms send the same requests in the same order, so figures from wrk and from the Python
fallback differ only in the client's own speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

APPS = 20  # instances are spread over this many applications
CHURN_LAG = 64  # a churn DELETE cancels the instance registered this many requests earlier
DIRTY_MS = 1_735_689_000_000


def instance_body(app: str, iid: str, ip: str) -> dict[str, object]:
    """A registration as the Netflix Java client sends it, with a lease long enough for a run."""
    return {
        "instance": {
            "instanceId": iid,
            "hostName": ip,
            "app": app,
            "ipAddr": ip,
            "status": "UP",
            "overriddenStatus": "UNKNOWN",
            "port": {"$": 8080, "@enabled": "true"},
            "securePort": {"$": 443, "@enabled": "false"},
            "countryId": 1,
            "dataCenterInfo": {
                "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                "name": "MyOwn",
            },
            "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 3600},
            "metadata": {"management.port": "8080"},
            "homePageUrl": f"http://{ip}:8080/",
            "statusPageUrl": f"http://{ip}:8080/actuator/info",
            "healthCheckUrl": f"http://{ip}:8080/actuator/health",
            "vipAddress": app.lower(),
            "secureVipAddress": app.lower(),
            "isCoordinatingDiscoveryServer": "false",
            "lastUpdatedTimestamp": str(DIRTY_MS),
            "lastDirtyTimestamp": str(DIRTY_MS),
        }
    }


def bench_instance(k: int) -> tuple[str, str, str]:
    """(app, instance id, ip) of the k-th benchmark instance."""
    ip = f"10.{k // 65536 % 256}.{k // 256 % 256}.{k % 256}"
    return f"BENCH{k % APPS}", f"bench-{k}", ip


Request = tuple[str, str, bytes | None]  # method, path, body


@dataclass(frozen=True)
class Workload:
    name: str
    lua: str
    next_request: Callable[[int], Request]
    headers: dict[str, str] = field(default_factory=dict)


def heartbeats(instances: int, path_prefix: str = "/eureka/apps") -> Workload:
    """PUT heartbeats cycling over `instances` registered benchmark instances."""
    lua = f"""
counter = 0
request = function()
  local k = counter % {instances}
  counter = counter + 1
  return wrk.format("PUT", "{path_prefix}/BENCH" .. (k % {APPS}) .. "/bench-" .. k ..
    "?status=UP&lastDirtyTimestamp={DIRTY_MS}")
end
"""

    def next_request(counter: int) -> Request:
        k = counter % instances
        path = f"{path_prefix}/BENCH{k % APPS}/bench-{k}?status=UP&lastDirtyTimestamp={DIRTY_MS}"
        return "PUT", path, None

    return Workload("heartbeat", lua, next_request)


def paced(workload: Workload, delay_ms: int) -> Workload:
    """`workload` with each connection waiting `delay_ms` before each request: a steady load
    of about connections x 1000 / (delay_ms + latency) requests a second, not a saturating one.

    wrk has no rate option; its `delay` hook is the nearest (millisecond granularity). The
    Python generator reads the same pause from its spec's `delay_ms`.
    """
    lua = f"{workload.lua}\ndelay = function()\n  return {delay_ms}\nend\n"
    return Workload(f"{workload.name}-paced", lua, workload.next_request, workload.headers)


def churn() -> Workload:
    """Alternating registrations of new instances and cancels of ones registered earlier."""
    template = json.dumps(instance_body("CHURN", "churn-KEY", "10.200.0.1"))
    head, tail = template.split("churn-KEY")
    lua = f"""
counter = 0
head = {json.dumps(head)}
tail = {json.dumps(tail)}
request = function()
  local n = math.floor(counter / 2)
  local register = counter % 2 == 0 or n < {CHURN_LAG}
  counter = counter + 1
  if register then
    return wrk.format("POST", "/eureka/apps/CHURN", {{["Content-Type"] = "application/json"}},
      head .. "churn-" .. n .. tail)
  end
  return wrk.format("DELETE", "/eureka/apps/CHURN/churn-" .. (n - {CHURN_LAG}))
end
"""

    def next_request(counter: int) -> Request:
        n = counter // 2
        if counter % 2 == 0 or n < CHURN_LAG:
            return "POST", "/eureka/apps/CHURN", f"{head}churn-{n}{tail}".encode()
        return "DELETE", f"/eureka/apps/CHURN/churn-{n - CHURN_LAG}", None

    return Workload("churn", lua, next_request, {"Content-Type": "application/json"})


def gets(path: str, headers: dict[str, str], name: str) -> Workload:
    """The same GET over and over."""
    header_lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items())
    lua = f'wrk.method = "GET"\nwrk.path = "{path}"\n{header_lines}\n'
    return Workload(name, lua, lambda counter: ("GET", path, None), headers)


# Appended to every wrk script: one JSON line with the figures the runner reads.
LUA_REPORT = """
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    '{"requests": %d, "seconds": %f, "errors": %d, "non_2xx": %d, "p50_ms": %f, "p99_ms": %f}\\n',
    summary.requests, summary.duration / 1e6, errors, summary.errors.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""
