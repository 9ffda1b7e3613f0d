"""Configuration: the settings, read once at start-up, and the kinds of values they hold.

``settings`` holds :class:`Settings` (frozen, built once and passed down), the table of
every setting (:data:`SETTINGS`), which drives the parsing, the reference in
``docs/configuration.md`` and ``--help``, and :class:`ConfigurationError`; ``kinds``
reads one kind of value (a duration, a URL, a list, a declared REST service) from the
environment's text or the file's YAML.
"""
