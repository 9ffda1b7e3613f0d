"""A person's workspace on disk: the wiki vault and the files of their turns.

``wiki`` holds :class:`Vault`, the curated notes and each person's own, every path
checked by one rule; ``files`` holds :class:`PersonFiles`, the inbox a turn's files
arrive in and the outbox the model writes to, in the person's private area of the
vault; ``file_types`` says what a file is from its bytes and how large it is.
"""
