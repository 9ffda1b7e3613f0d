"""The browser UI reconnects on its own when the server's side drops a turn's connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.server import RunningServer
from tests.ui.conftest import named

pytestmark = [pytest.mark.timeout(120)]


class CuttingProxy:
    """A TCP relay to the server whose open connections can be cut, as a flaky network would."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self.lock:
            sockets, self.open = self.open, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def proxy_to(
    make_server: Callable[..., RunningServer],
) -> Iterator[Callable[[RunningServer], CuttingProxy]]:
    proxies: list[CuttingProxy] = []

    def make(server: RunningServer) -> CuttingProxy:
        proxy = CuttingProxy(server.port)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def test_a_dropped_answer_is_rejoined_and_ends_equal_to_final(
    page: Page,
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    proxy_to: Callable[[RunningServer], CuttingProxy],
) -> None:
    server = make_server(HTTP_SURFACE_REJOIN_S="10")
    named(server)
    proxy = proxy_to(server)
    words = " ".join(f"w{n}" for n in range(40))
    ollama.enqueue(ChatScript.words(words, delay_s=0.1))
    page.goto(proxy.url + "/ui/")
    page.fill("#token", "alice-token")
    page.click("button[type=submit]")
    page.wait_for_selector("#composer")
    page.fill("#composer", "talk")
    page.keyboard.press("Enter")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator(".streamed")).to_contain_text("w5")
    proxy.cut()
    expect(answer.locator("[data-final]")).to_have_text(words, timeout=30_000)
    assert len(ollama.requests) == 1
    assert answer.locator(".error").count() == 0


def test_without_rejoining_a_dropped_answer_says_so(
    page: Page,
    server: RunningServer,
    ollama: OllamaStandIn,
    proxy_to: Callable[[RunningServer], CuttingProxy],
) -> None:
    named(server)
    proxy = proxy_to(server)
    ollama.enqueue(ChatScript.words("word " * 100, delay_s=0.1))
    page.goto(proxy.url + "/ui/")
    page.fill("#token", "alice-token")
    page.click("button[type=submit]")
    page.fill("#composer", "talk")
    page.keyboard.press("Enter")
    answer = page.locator("article.message.assistant").last
    expect(answer.locator(".streamed")).to_contain_text("word word")
    proxy.cut()
    expect(answer.locator(".error")).to_contain_text("can't be recovered", timeout=30_000)
