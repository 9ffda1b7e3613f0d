"""Observation: the Prometheus metrics and the OpenTelemetry spans of the service.

``metrics`` holds :class:`Metrics`, one registry per application, whose labels take
their values from closed sets; ``telemetry`` opens the spans of the model call, the
tools and the stores through the OpenTelemetry API. Neither knows a turn: the engine,
the stores and the channel call them, never the reverse.
"""
