"""Several ``mercury-http serve`` processes behind a real HAProxy: the multi-instance topology.

Each instance is a real child process (``python -m channel_http serve``) on a free port with
a data directory of its own; what they share comes in through ``shared`` (the state store's
URL, the wiki's folder, …). Tests talk to the balancer for round robin and to
``cluster[i]`` directly when something must happen "through A" and then "through B".
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.reliability.support import ChildServer, child_env
from tests.support.balancer import HAProxy

__all__ = ["Cluster"]


class Cluster:
    """``count`` instances, named ``a``, ``b``, ``c`` …, and HAProxy in front of them."""

    def __init__(
        self,
        workdir: Path,
        ollama_url: str,
        *,
        count: int = 3,
        shared: Mapping[str, str] | None = None,
        per_instance: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.workdir = workdir
        self.names = [chr(ord("a") + i) for i in range(count)]
        self.instances: dict[str, ChildServer] = {}
        for name in self.names:
            env = child_env(
                workdir / f"data-{name}",
                ollama_url,
                **dict(shared or {}),
                **dict((per_instance or {}).get(name, {})),
            )
            self.instances[name] = ChildServer(env, workdir / f"instance-{name}.log")
        self.balancer = HAProxy(
            workdir,
            [(name, server.url.removeprefix("http://")) for name, server in self.instances.items()],
        )
        self._stack = ExitStack()
        #: The shared state store's URL, when the test gave one.
        self.state_url = ""

    def __getitem__(self, name: str) -> ChildServer:
        return self.instances[name]

    @property
    def url(self) -> str:
        """The balancer's URL: requests go round robin over the live instances."""
        return self.balancer.url

    def start(self) -> Self:
        with ExitStack() as stack:
            for server in self.instances.values():
                stack.callback(server.stop)
            # Start them side by side: each spends seconds importing on a busy machine.
            with ThreadPoolExecutor(len(self.instances)) as pool:
                for started in [pool.submit(s.start, 120.0) for s in self.instances.values()]:
                    started.result()
            stack.enter_context(self.balancer)
            self._stack = stack.pop_all()
        return self

    def logs(self) -> str:
        parts = [f"--- {name}\n{server.log()}" for name, server in self.instances.items()]
        return "\n".join([*parts, f"--- haproxy\n{self.balancer.log()}"])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.close()
