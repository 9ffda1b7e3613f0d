"""The model's tools and the plugins that bring them.

``registry`` is the plugin API: :class:`Tool`, :class:`Skill`, :class:`Plugin`, the
call's context and reply, the errors a tool raises, and :class:`ToolRegistry`, which
decides per person what is offered. The plugins: ``builtin_plugins`` (the wiki, the
person's settings, ``present``), ``memory_tools``, ``file_tools``, ``wiki_tools``,
``display_tools`` over ``displays`` (what the model shows verbatim), ``space_tools`` (a
shared space's preferences and mutes, over the stores of :mod:`core.spaces`), and
``rest_plugin`` (a declared REST service), which acts as the person through
``logins`` (OAuth 2.0 logins to the services plugins call).
"""
