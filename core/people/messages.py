"""The person-facing texts of the project, as English msgids, grouped by what they are about.

Each constant is marked with `N_` (or `N_plural`) so catalog extraction finds it; translate it
where it is shown: `translator.gettext(NOT_FOUND)`,
`translator.ngettext(*RATE_LIMITED, seconds) % {"seconds": seconds}`. Code may equally write
the same literal inside its own `.gettext(...)` call: the catalogs key on the text, not on the
constant. The comment above each constant says where a person reads it (it also reaches the
translators, as the catalog entry's comment).

Exceptions: none.
"""

from __future__ import annotations

from typing import Final

from core.people.i18n import N_, N_plural

# --- Refusals of a request that can't be served as sent ---------------------------------------

# Shown: the refusal (401) of a request that carries no token.
TOKEN_MISSING: Final = N_(
    "Sign in first: this request carries no token (an Authorization: Bearer header)."
)
# Shown: the refusal (401) of an Authorization header naming Bearer with nothing after it,
# as a pasted command sends when the variable meant to hold the token isn't set.
TOKEN_EMPTY: Final = N_(
    "This request carries no token: its Authorization header says Bearer and nothing after "
    "it. If you pasted a command, set the variable that holds the token (such as $TOKEN) "
    "first."
)
# Shown: the refusal (401) of a token no auth provider recognizes, e.g. at the UI's sign-in.
TOKEN_REFUSED: Final = N_(
    "The server doesn't recognize this token; check it, or ask whoever runs the server for one."
)
# Shown: the refusal of a request whose body isn't JSON.
BODY_NOT_JSON: Final = N_("The request body must be JSON.")
# Shown: the refusal of a request whose JSON body isn't an object.
BODY_NOT_OBJECT: Final = N_("The request body must be a JSON object.")
# Shown: the refusal of a request whose body exceeds the size limit.
BODY_TOO_LARGE: Final = N_("The request body is larger than 1 MiB.")
# Shown: the refusal of a body field of the wrong type; expected is e.g. "a string".
FIELD_WRONG_TYPE: Final = N_('The field "%(field)s" must be %(expected)s.')
# Shown: the refusal of a body with a field the route doesn't know.
FIELD_NOT_ALLOWED: Final = N_('The field "%(field)s" is not allowed here.')
# Shown: the refusal of a body that gives the same key twice.
FIELD_REPEATED: Final = N_('The field "%(field)s" appears more than once; send it once.')
# Shown: the refusal of a request carrying more than one Authorization header.
AUTHORIZATION_REPEATED: Final = N_("Send one Authorization header: this request has several.")
# Shown: the refusal of a turn without text.
TEXT_MISSING: Final = N_('Write some text: "text" is missing or blank.')
# Shown: the refusal of a conversationId with other characters or too long.
CONVERSATION_ID_INVALID: Final = N_(
    "The conversationId may contain only letters, digits, - and _, up to 128 characters."
)
# Shown: the refusal of an opening turn sent without a conversationId.
OPENING_NEEDS_CONVERSATION: Final = N_("An opening turn needs a conversationId.")
# Shown: the refusal of a resumed turn sent without a conversationId.
RESUME_NEEDS_CONVERSATION: Final = N_("A resumed turn needs a conversationId.")
# Shown: the refusal of a confirmation answer missing its token or conversationId.
CONFIRMATION_NEEDS_TOKEN: Final = N_("Both token and conversationId are required.")
# Shown: the answer to a path no route serves.
NOT_FOUND: Final = N_("Not found.")
# Shown: the answer to a known path asked with a method it doesn't serve.
METHOD_NOT_ALLOWED: Final = N_("This route does not accept the %(method)s method.")
# Shown: an unexpected failure on the server, details only in its log.
INTERNAL_ERROR: Final = N_("Something went wrong on our side. Try again in a moment.")
# Shown: the refusal of a turn sent too soon after the previous ones.
RATE_LIMITED: Final = N_plural(
    "Too many messages: wait %(seconds)d second before sending another.",
    "Too many messages: wait %(seconds)d seconds before sending another.",
)

# --- The model and the turn -----------------------------------------------------------------

# Shown: the error of a turn whose model server doesn't answer.
MODEL_UNREACHABLE: Final = N_(
    "The model %(model)s at %(host)s can't be reached. Check that Ollama is running there."
)
# Shown: the error of a turn whose OpenAI-compatible model server (vLLM, llama-server, …)
# doesn't answer.
MODEL_SERVER_UNREACHABLE: Final = N_(
    "The model %(model)s at %(host)s can't be reached. "
    "Check that its model server is running there."
)
# Shown: the error of a turn whose model server answered with an error.
MODEL_FAILED: Final = N_("The model %(model)s at %(host)s answered with an error: %(reason)s")
# Shown: the error of a turn whose model stream broke off.
MODEL_STOPPED: Final = N_(
    "The model %(model)s at %(host)s stopped answering in the middle of the reply."
)
# Shown: the error of a turn cut short by the server shutting down.
SHUTTING_DOWN: Final = N_(
    "The server is stopping; this turn was interrupted. Send it again in a moment."
)
# Shown: the final text of a turn that used up its tool steps.
STEP_LIMIT: Final = N_plural(
    "The assistant stopped after %(steps)d step without finishing.",
    "The assistant stopped after %(steps)d steps without finishing.",
)

# --- Confirmations ----------------------------------------------------------------------------

# Shown: the reply to a confirmed action that ran.
CONFIRMED_DONE: Final = N_("Confirmed and done.")
# Shown: the reply to a confirmed action that failed; error is the action's own message.
CONFIRMED_FAILED: Final = N_("Confirmed, but it failed: %(error)s")
# Shown: the reply to an answer for a token that isn't pending.
NO_PENDING_CONFIRMATION: Final = N_(
    "There is no pending confirmation for this token: it may have expired, been used "
    "already, or never existed."
)
# Shown: what the model is handed when an action waits for the person's confirmation.
ACTION_PENDING: Final = N_("Action pending, waiting for confirmation.")
# Shown: the final text of a resumed turn with nothing left to resume.
RESUME_UNAVAILABLE: Final = N_("The answer to this confirmation is no longer available.")
# Shown: the label of the choice that replaces a wiki note's content.
CHOICE_REPLACE_NOTE: Final = N_("Replace the note")
# Shown: the label of the choice that appends to a wiki note.
CHOICE_APPEND_NOTE: Final = N_("Append to the note")
# Shown: the summary of a pending overwrite of a wiki note.
OVERWRITE_NOTE: Final = N_("Overwrite the note %(path)s")
# Shown: the summary of a pending promotion of a private note to the shared wiki.
PROMOTE_NOTE: Final = N_("Promote %(path)s to the shared wiki as %(target)s")
# Shown: the summary of a staged deletion of the facts remembered on a topic.
FORGET_TOPIC: Final = N_("Forget what I know about %(topic)s")

# --- Tool status lines ------------------------------------------------------------------------

# Shown: the status line while a tool reads the wiki.
STATUS_READING_WIKI: Final = N_("Reading the wiki…")
# Shown: the status line while a tool writes to the wiki.
STATUS_WRITING_WIKI: Final = N_("Writing to the wiki…")
# Shown: the status line while a tool searches the wiki.
STATUS_SEARCHING_WIKI: Final = N_("Searching the wiki…")
# Shown: the status line while a tool reads memory.
STATUS_CONSULTING_MEMORY: Final = N_("Consulting memory…")
# Shown: the status line while a tool deletes what memory holds on a topic.
STATUS_FORGETTING: Final = N_("Forgetting…")
# Shown: the status line while the assistant shows the person a list, table or text.
STATUS_SHOWING: Final = N_("Showing…")
# Shown: the status line while a tool saves to memory.
STATUS_SAVING_MEMORY: Final = N_("Saving to memory…")
# Shown: the status line while the assistant captures a fact worth keeping.
STATUS_NOTING: Final = N_("Noting something important…")
# Shown: the status line of any other tool; tool is its name.
STATUS_USING_TOOL: Final = N_("Using %(tool)s…")
# Shown: the scope of a wiki search over every document.
ALL_WIKI_DOCUMENTS: Final = N_("All wiki documents")

# --- The directory of people --------------------------------------------------------------------

# Shown: the refusal of a person the directory doesn't admit.
NOT_ADMITTED: Final = N_(
    "This assistant only talks to the people it knows. Ask an administrator for access."
)
# Shown: the refusal when the directory can't be consulted.
DIRECTORY_UNAVAILABLE: Final = N_(
    "I can't check who you are right now. Try again in a few minutes."
)

# --- The person's settings ----------------------------------------------------------------------

# Shown: the refusal of a time zone that isn't an IANA name.
TIME_ZONE_INVALID: Final = N_(
    'The field "%(field)s" must be a time zone name such as Europe/Rome, not "%(value)s".'
)
# Shown: the refusal of a settings change naming neither a time zone nor a language.
SETTING_MISSING: Final = N_('The body must contain "timeZone" or "language".')
# Shown: the refusal of a language that isn't shipped; choices lists the shipped ones.
LANGUAGE_INVALID: Final = N_('The field "%(field)s" must be one of %(choices)s, not "%(value)s".')

# --- Linking accounts by code -------------------------------------------------------------------

# Shown: the reply to a link code that is unknown, expired or used.
LINK_CODE_INVALID: Final = N_(
    "That code isn't valid: it may have expired or been used already. Ask for a new one on "
    "the account you want to link to."
)
# Shown: the reply to a link code sent from the account that asked for it.
LINK_CODE_SAME_ACCOUNT: Final = N_("That code is for linking another account to this one.")
# Shown: the question before a link; name is the person the account will join.
LINK_CONFIRM: Final = N_(
    "This will link this account to %(name)s: from then on the assistant treats them as one "
    "person, with %(name)s's private area and roles. Send the same code again to confirm."
)
# Shown: the reply when the account can't be checked against the directory.
LINK_UNAVAILABLE: Final = N_(
    "I can't check this account right now. Ask for a new code and try again in a few minutes."
)
# Shown: the refusal of a link for an account the directory gives to another person.
LINK_CONFLICT: Final = N_(
    "This account belongs to someone else in the directory: it can't be linked to %(name)s."
)
# Shown: the reply to a link that went through.
LINKED: Final = N_("Linked: this account is now %(name)s.")

# --- Logins to outside services -----------------------------------------------------------------

# Shown: the login page after a successful login to a service.
LOGIN_DONE: Final = N_(
    "You're logged in to %(service)s. Go back to the conversation and ask again."
)
# Shown: the login page when the service refused; reason is what the service said.
LOGIN_REFUSED: Final = N_(
    "The login didn't happen (%(reason)s). Ask the assistant again for a new link."
)
# Shown: the login page reached without the code or state it needs.
LOGIN_INCOMPLETE: Final = N_(
    "The login link came back without a code or a state. Ask the assistant again for a new link."
)
# Shown: the login page for a link that is expired or used.
LOGIN_EXPIRED: Final = N_(
    "This login link has expired or was already used: ask the assistant again for a new one."
)
# Shown: the login page for a callback whose issuer isn't the server the login was sent to.
LOGIN_WRONG_ISSUER: Final = N_(
    "This sign-in came back from a server it wasn't sent to, so it was refused. Ask the "
    "assistant again for a new link."
)
# Shown: the refusal (404) to remove a connection to an MCP server the person hasn't got.
CONNECTION_UNKNOWN: Final = N_(
    "You aren't signed in to a server called %(server)s, so there is nothing to remove."
)
# Shown: the login page when exchanging the code with the service failed.
LOGIN_FAILED: Final = N_(
    "The %(service)s login didn't go through. Ask the assistant again for a new link."
)
# Shown: a tool's answer when the person hasn't logged in to the service it needs.
LOGIN_REQUIRED: Final = N_("You need to log in to %(service)s first.")

# --- Read-only queries --------------------------------------------------------------------------

# Shown: the refusal of a limit that isn't a whole number in range.
LIMIT_INVALID: Final = N_("The limit must be a whole number from 1 to 500.")
# Shown: the refusal of a memory collection that doesn't exist.
UNKNOWN_COLLECTION: Final = N_("Unknown collection: %(name)s.")
# Shown: the refusal of a query without a parameter it needs.
QUERY_PARAMETER_REQUIRED: Final = N_('The query parameter "%(name)s" is required.')
# Shown: the refusal of a search pattern that doesn't compile.
PATTERN_INVALID: Final = N_("The pattern is not a valid regular expression: %(reason)s")
# Shown: the refusal of a page cursor this server didn't issue.
OFFSET_INVALID: Final = N_("The offset is not one this server gave; start again without it.")
# Shown: the refusal of a request while another process holds the database locked.
DATABASE_BUSY: Final = N_("The server is busy; try again in a few seconds.")
# Shown: a request head past HTTP_SURFACE_MAX_HEADER_BYTES (431), before anyone is known.
HEADERS_TOO_LARGE: Final = N_("The request's headers are too large.")
# Shown: a request head slower than HTTP_SURFACE_HEADER_TIMEOUT_S (408).
HEADERS_TOO_SLOW: Final = N_("The request's headers took too long to arrive.")
# Shown: a Last-Event-ID that names another turn, or isn't an id this server gave.
REJOIN_BAD_EVENT_ID: Final = N_(
    "Last-Event-ID is not an id of this turn; leave it out to read the turn from its start."
)
# Shown: rejoining a turn that is unknown, no longer kept, or someone else's (404).
REJOIN_NOT_FOUND: Final = N_(
    "That turn can't be rejoined: it ended too long ago, or it isn't yours. "
    "Send your message again."
)

# --- Probes ---------------------------------------------------------------------------------

# Shown: /readyz when the state store doesn't answer within its bound (503).
NOT_READY_STATE: Final = N_("The state database doesn't answer.")
# Shown: /readyz when the memory store doesn't answer within its bound (503).
NOT_READY_MEMORY: Final = N_("The memory store doesn't answer.")
# Shown: /readyz when the model server doesn't answer within its bound (503).
NOT_READY_MODEL: Final = N_("The model host doesn't answer.")
# Shown: /readyz once the shutdown has begun (503).
NOT_READY_STOPPING: Final = N_("The server is stopping; send new turns to another instance.")
# Shown: /readyz when Ollama lacks a model the settings name (503).
MODELS_MISSING_OLLAMA: Final = N_("The model host lacks %(models)s; on it run: %(command)s")
# Shown: /readyz when an OpenAI-compatible server doesn't list a model the settings name (503).
MODELS_MISSING_OPENAI: Final = N_(
    "The model server doesn't list %(models)s; load them there or set OPENAI_MODEL to a "
    "model it lists."
)

# --- Chat and files (POST /chat) ----------------------------------------------------------------

# Shown: the refusal of a POST /chat body over the size its files may take.
CHAT_BODY_TOO_LARGE: Final = N_(
    "The request is larger than the limit of %(limit)s of files per turn."
)
# Shown: the refusal of a file sent without a name.
FILE_NAME_EMPTY: Final = N_("A file has no name; give every file a name such as notes.txt.")
# Shown: the refusal of a file name with control or invisible characters.
FILE_NAME_INVISIBLE: Final = N_(
    'The file name "%(name)s" holds control or invisible characters; rename the file.'
)
# Shown: the refusal of a file name that is a path.
FILE_NAME_PATH: Final = N_(
    'The file name "%(name)s" is a path; send the file\'s own name, without folders.'
)
# Shown: the refusal of a hidden file's name.
FILE_NAME_HIDDEN: Final = N_(
    'The file name "%(name)s" starts with a dot (a hidden file); rename the file.'
)
# Shown: the refusal of a file name with spaces at either end.
FILE_NAME_SPACES: Final = N_(
    'The file name "%(name)s" starts or ends with a space; rename the file.'
)
# Shown: the refusal of a file name that is too long.
FILE_NAME_LONG: Final = N_('The file name "%(name)s" is too long; shorten it.')
# Shown: the refusal of a file over the per-file limit; limit is e.g. "10 MiB".
FILE_TOO_LARGE: Final = N_('The file "%(name)s" is larger than the limit of %(limit)s per file.')
# Shown: the refusal of files over the per-turn limit together.
FILES_TOO_LARGE: Final = N_("The files are larger together than the limit of %(limit)s per turn.")
# Shown: the refusal of too many files in one request.
TOO_MANY_FILES: Final = N_("Send at most %(count)d files with one message.")
# Shown: the refusal of a field that must be base64.
FIELD_NOT_BASE64: Final = N_('The field "%(field)s" must be base64.')
# Shown: the refusal of a body missing a required field.
FIELD_REQUIRED: Final = N_('The field "%(field)s" is required.')
# Shown: the refusal of the bridge fields from a caller without the bridge role.
BRIDGE_ONLY: Final = N_(
    'Only a bridge may send "callerId", "authorName" or "spaceId": '
    "the directory must give the caller the role %(role)s."
)
# Shown: the refusal of a callerId that isn't <platform>:<id>.
CALLER_ID_INVALID: Final = N_('The "callerId" must be a platform and an id, such as discord:1234.')
# Shown: the refusal of a bridge naming an identity that signs in here itself.
BRIDGE_LOCAL_IDENTITY: Final = N_(
    'A bridge can\'t act for "%(provider)s" identities: they sign in themselves.'
)
# Shown: the refusal of both spaceId and conversationId with different values.
SPACE_AND_CONVERSATION: Final = N_('Give "spaceId" or "conversationId", or the same value in both.')
# Shown: the answer of a POST /chat turn that ran past its time limit.
CHAT_TIMED_OUT: Final = N_plural(
    "The turn took longer than %(seconds)d second and was stopped; "
    "ask something shorter or try again.",
    "The turn took longer than %(seconds)d seconds and was stopped; "
    "ask something shorter or try again.",
)
# Shown: the status line while the model lists the person's inbox.
LOOKING_AT_FILES: Final = N_("Looking at your files…")
# Shown: the status line while the model reads a file of the inbox.
READING_FILE: Final = N_("Reading your file…")
# Shown: the status line while the model writes a file to the outbox.
WRITING_FILE: Final = N_("Writing a file for you…")

# --- Shared spaces and the chat bridges ----------------------------------------------------

# Shown: in a chat, the answer to "stop" when a turn was running.
STOPPED: Final = N_("Stopped.")
# Shown: in a chat, the answer to "stop" when nothing was running.
NOTHING_RUNNING: Final = N_("Nothing is running here.")
# Shown: in a chat, the answer to "compact".
COMPACTED: Final = N_("Done: this conversation starts afresh from a summary.")
# Shown: the refusal (403) of POST /chat from a bridge for a person muted in the space.
MUTED_IN_SPACE: Final = N_(
    "You are muted in this space: the assistant reads nothing you send here until the mute "
    "ends or an admin of the space lifts it."
)
# Shown: in a chat, once per window, to a person over the space's rate limit.
SPACE_RATE_LIMITED: Final = N_("Rate limit exceeded. Try again shortly.")
# Shown: in a chat, after an answer that staged an action; choices are "label: token" pairs.
CONFIRM_WITH_TOKEN: Final = N_("To confirm, answer with the token (%(choices)s).")
# Shown: in a chat, the status line of an answer being written, until its first words.
THINKING: Final = N_("Thinking…")
# Shown: in a chat, the button under an answer being written that stops its turn.
STOP_BUTTON: Final = N_("Stop")
# Shown: in a chat, the button of a confirmation that has a single way to answer.
CONFIRM_BUTTON: Final = N_("Confirm")
# Shown: in a chat, to a person alone, who pressed the button of someone else's confirmation.
PRESS_NOT_YOURS: Final = N_("This isn't yours to answer.")
# Shown: in a chat, to a person alone, who pressed a confirmation's button once it was
# answered already or had expired.
PRESS_SPENT: Final = N_("Already answered or expired.")
# Shown: in a chat, on a confirmation's message once a button was pressed; choice is the
# button's label.
PRESS_CHOSEN: Final = N_("Chosen: %(choice)s")
# Shown: in a chat, to a person alone (never in the group), a link to sign in to a service
# a tool needs, e.g. "Sign in to Calendar: https://…".
SIGN_IN_PRIVATELY: Final = N_("Sign in to %(service)s: %(url)s")
# Shown: in a group chat, to a person a sign-in link could not be sent to privately (they
# never started a chat with the bot, or take no direct messages); link opens a private chat
# with the bot, e.g. "https://t.me/mercury_bot?start=sign-in". Never holds the sign-in link.
SIGN_IN_HINT_LINKED: Final = N_(
    "%(name)s, I can't send you the link to sign in to %(service)s privately. Open a "
    "private chat with me (%(link)s) and ask there."
)
# Shown: the same, on a platform with no link to a private chat.
SIGN_IN_HINT: Final = N_(
    "%(name)s, I can't send you the link to sign in to %(service)s privately. Open a "
    "direct chat with me and ask there."
)
# Shown: the refusal of a webhook delivery for a platform whose bridge is off.
NO_SUCH_BRIDGE: Final = N_('No "%(platform)s" bridge runs on this server.')
# Shown: the refusal of a webhook delivery with a wrong or stale signature.
DELIVERY_FORGED: Final = N_("The delivery's signature or secret doesn't match: nothing was run.")
# Shown: the refusal of a signed webhook delivery that can't be read.
DELIVERY_MALFORMED: Final = N_("The delivery could not be read: nothing was run.")
# Shown: the refusal of a webhook delivery that gives a header or query key (a signature,
# a verify token) twice; name is the header or key as sent.
DELIVERY_REPEATED: Final = N_(
    'The delivery gives "%(name)s" more than once, so which one counts would be a guess: '
    "nothing was run."
)
# Shown (to the platform, and in its logs): a webhook delivery that could not be checked
# because the platform itself (asked who the bot is, say) did not answer.
DELIVERY_UNCHECKED: Final = N_(
    "The platform could not be reached to check this delivery; send it again in a few seconds."
)
# Shown: the refusal of a malformed space id in a /spaces path.
SPACE_ID_INVALID: Final = N_(
    "A space id is a platform and its ids, such as slack:C0123ABC, telegram:-1001234, "
    "discord:<guild>:<channel>, whatsapp:<number>, teams:<tenant>:<conversation> or "
    "matrix:<room id>."
)
# Shown: the refusal of a member whose role lacks the permission; role is admin or member.
SPACE_ADMIN_ONLY: Final = N_("Only an admin of %(space)s may do this; your role there is %(role)s.")
# Shown: the refusal of a space the caller isn't in (or that doesn't exist).
SPACE_NOT_YOURS: Final = N_("You are not in the space %(space)s.")
# Shown: the refusal of a preference key the space doesn't have.
PREFERENCE_NOT_FOUND: Final = N_('%(space)s has no preference "%(key)s".')
# Shown: the refusal of a malformed preference key.
PREFERENCE_KEY_INVALID: Final = N_(
    'A preference key is 1 to 64 lower-case letters, digits, ".", "_" or "-", '
    "starting with a letter or a digit."
)
# Shown: the refusal of a preference value that is too long.
PREFERENCE_VALUE_TOO_LONG: Final = N_("A preference's value holds at most %(count)d characters.")
# Shown: the refusal of a preference value that is empty or only blanks.
PREFERENCE_VALUE_BLANK: Final = N_(
    "A preference's value is empty or only blanks; write what the assistant should follow."
)
# Shown: the refusal of a preference value holding a control or invisible character.
PREFERENCE_VALUE_INVISIBLE: Final = N_(
    "A preference's value is plain text: control characters (such as NUL) and invisible "
    "formatting characters (such as U+202E) are refused; tabs and line breaks are fine."
)
# Shown: the refusal of a new preference in a space that holds the most it may.
PREFERENCES_FULL: Final = N_(
    "A space holds at most %(count)d preferences; delete one before adding another."
)
# Shown: the refusal of a mute without a usable person.
MUTE_PERSON_INVALID: Final = N_(
    '"person" names who to mute as the space knows them (slack:U0123), without '
    "spaces or invisible characters."
)
# Shown: the refusal of a mute reason too long or holding control or invisible characters.
MUTE_REASON_INVALID: Final = N_(
    '"reason" is plain text of at most %(count)d characters, without control or '
    "invisible characters."
)
# Shown: the refusal of a mute of someone who is an admin of the space, under any name.
MUTE_ADMIN: Final = N_("%(person)s is an admin of %(space)s; an admin can't be muted.")
# Shown: the refusal of a mute while the directory can't say who the person is.
MUTE_UNCHECKED: Final = N_(
    "Who %(person)s is can't be checked right now; try again in a few minutes."
)
# Shown: to an admin who asked to mute someone, before the mute is confirmed (the UI and the
# command line show it above their own Confirm).
MUTE_NOTICE: Final = N_(
    "Nothing has changed yet. Muting %(person)s drops everything they write in "
    "%(space)s, unread and unanswered, until the time you gave runs out. Mute someone "
    "who was warned and went on being abusive, spamming or trying to get at secrets."
)
# Shown: after MUTE_NOTICE, to an API client: how to confirm the mute over HTTP.
MUTE_CONFIRM_OVER_HTTP: Final = N_(
    "To mute them, send the same request again with confirm set to true."
)
# Shown: the refusal of a mute duration that isn't minutes, hours or days within the limits.
MUTE_DURATION_INVALID: Final = N_(
    '"duration" is minutes, hours or days, from 1 minute to %(days)d days, such as 10m, 1h, '
    "24h or 7d."
)
# Shown: the refusal of an unmute for someone who isn't muted.
NOT_MUTED: Final = N_("%(person)s is not muted in %(space)s.")
