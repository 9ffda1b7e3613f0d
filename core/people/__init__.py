"""People: who a request comes from, what the instance knows of them, and their language.

``principal`` holds the principal an auth provider or a bridge names and the person
the core talks to; ``people`` identifies the person behind a principal and admits or
refuses them; ``directory`` is the port of the directory of people, with its adapter
``directory_static`` (one setting); ``linking`` joins a person's accounts by a code;
``person_settings`` keeps what each person asked to be remembered (name, language,
time zone); ``timezones`` reads IANA zones and stamps messages. Languages: ``i18n``
(translators, negotiation, catalogs read from ``core/locales/``), ``messages`` (the
person-facing texts as msgids) and ``catalogs`` (their upkeep, run as a command).
"""
