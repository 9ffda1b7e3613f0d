"""The engine: a turn from the person's message to ``final``.

``sessions`` holds :class:`SessionManager`, the one façade a channel calls; the steps
of a turn are its collaborators: ``conversation_order`` (one conversation's turns in
arrival order across instances), ``history`` (a conversation as held in memory),
``answering`` (the model's steps and the tools it calls), ``capturing`` (a session's
words into long-term memory, after a turn and before it is freed), ``confirmations`` and
``confirming`` (actions staged until their owner confirms), ``transcript`` (what the
person saw, on the shared state store) and ``tool_log`` (each person's recent tool
calls). What comes out: ``events`` (one tagged union of msgspec Structs) through
``turn_events`` (the batches the channel's reader takes).
"""
