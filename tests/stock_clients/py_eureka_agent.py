"""Runs an unmodified py-eureka-client in its own process, driven by commands on stdin.

Usage: python py_eureka_agent.py SERVER_URL APP PORT INTERVAL_SECS
Commands (one per line): `view` prints the client's own copy of the registry, `register`
re-registers (what the client does after a 404 or a restart), `call APP` calls `/health` on an
instance of APP the client picks (an UP one, as it always does), `stop` stops the client (it
registers DOWN, then cancels) and exits. Every answer is one JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys

# The client logs to stdout; answers get the real stdout, its logs go to stderr.
ANSWERS = sys.stdout
sys.stdout = sys.stderr

from py_eureka_client.eureka_client import EurekaClient  # noqa: E402


def say(**fields: object) -> None:
    print(json.dumps(fields), file=ANSWERS, flush=True)


async def main(server: str, app: str, port: int, interval: int) -> None:
    client = EurekaClient(
        eureka_server=server,
        app_name=app,
        instance_ip="127.0.0.1",
        instance_host="localhost",
        instance_port=port,
        renewal_interval_in_secs=interval,
        duration_in_secs=interval * 3,
    )
    await client.start()
    say(event="started")
    loop = asyncio.get_running_loop()
    while True:
        command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if command == "view":
            view = {
                application.name: {i.instanceId: i.status for i in application.instances}
                for application in client.applications.applications
            }
            say(event="view", applications=view)
        elif command == "register":
            await client.register()
            say(event="registered")
        elif command.startswith("call "):
            try:
                body = await client.do_service(command.split()[1], "/health", timeout=2)
                say(event="called", body=body)
            except Exception as exc:  # none UP to pick, or the call failed: say which
                say(event="call_failed", error=type(exc).__name__)
        else:  # "stop", or stdin closed
            await client.stop()
            say(event="stopped")
            return


if __name__ == "__main__":
    url, app_name, port_text, interval_text = sys.argv[1:5]
    asyncio.run(main(url, app_name, int(port_text), int(interval_text)))
