"""The scripted model: a deterministic stand-in for a model server, to try Mercury without one.

``mercury-http dev-model`` serves it on 127.0.0.1 (Ollama's protocol and OpenAI's, one port);
``mercury-http serve --dev --dev-model`` (``scripts/serve --dev-model``) starts it beside the
server and points the server at it. Saying ``/demo <what>`` in a message asks for one of the
events a UI must handle (:data:`dev_model.demo.DEMOS`). The tests script the same server
(``tests/support/ollama_standin.py``). Nothing in ``core``, ``channel_http`` or the bridges
imports it but the command line.

- :mod:`dev_model.ollama`: the HTTP server and Ollama's protocol, scripted by `ChatScript`
- :mod:`dev_model.openai`: OpenAI's chat-completions protocol on the same server
- :mod:`dev_model.demo`: the ``/demo`` answers, the demo services, both protocols on one port
- :mod:`dev_model.command`: the command and the start beside ``serve``
- :mod:`dev_model.threaded`: a server run in a thread with its own loop (the tests' stand-ins
  stand on it too)
"""

from __future__ import annotations

from dev_model.demo import DEMO_SPACE, DEMOS, DevModel, demo_yaml, respond, services_yaml

__all__ = ["DEMOS", "DEMO_SPACE", "DevModel", "demo_yaml", "respond", "services_yaml"]
