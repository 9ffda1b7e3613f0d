"""The composition root's part for spaces and chat bridges: stores, pipeline, connections.

:func:`open_bridging` builds the space stores on the state store, the pipeline on the session
manager, and the bridges the settings turn on (or those given, for tests), starts each
gateway bridge's connection, keeps the leases of the deliveries in hand renewed and runs
again what a dead instance took and never handled, and keeps the expired state swept;
:meth:`Bridging.close` stops taking deliveries over, lets the messages being handled finish
(an answer being written gets its last edit), then stops the connections and closes the
bridges.

A connection only one instance may hold (a :class:`~bridges.port.HeldBridge`: Discord's
gateway) runs only while this instance holds its lease (:mod:`bridges.holding`, #39): the
instance stands by, looking every third of a lease, until it acquires it; restores the last
holder's checkpoint; runs the bridge while the lease is renewed with the bridge's checkpoint
every third of a lease; and cancels the run (closing the connection) the moment a renewal
finds another instance holds it, or the state store has not confirmed the lease for two
thirds of it (before another may take it over). Then it stands by again. A clean stop
releases the lease with the last checkpoint, so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from bridges.deliveries import Deliveries
from bridges.freshness import staleness
from bridges.holding import ConnectionLeases
from bridges.notices import NoticeClaims
from bridges.pipeline import Pipeline, PipelineStores
from bridges.port import (
    Admission,
    BridgeError,
    GatewayBridge,
    HeldBridge,
    InvitedBridge,
    PlatformBridge,
    Pressed,
    Received,
    WebhookBridge,
)
from bridges.stops import TurnStops
from core.clock import Clock
from core.people.people import Admitted, Refused
from core.people.principal import Principal
from core.spaces.ambient import Ambient
from core.spaces.bot_turns import BotTurns
from core.spaces.members import Spaces
from core.spaces.mutes import Mutes
from core.spaces.preferences import SpacePreferences
from core.spaces.settings import SpaceSettings

if TYPE_CHECKING:
    from core.config.settings import Settings
    from core.engine.sessions import SessionManager
    from core.people.i18n import Catalogs
    from core.people.pairing import Pairing
    from core.people.people import People
    from core.people.person_settings import PersonSettings
    from core.state import Database
    from core.workspace.files import PersonFiles

__all__ = ["Bridging", "open_space_stores", "start_bridging"]

log = logging.getLogger("mercury.bridges")

#: Seconds between sweeps of expired mutes, old delivery ids and expired pairing codes.
_SWEEP_S: Final = 300.0
#: Seconds a held connection's run is given to end before it is cancelled again.
_CANCEL_AGAIN_S: Final = 1.0


@dataclass(slots=True)
class Bridging:
    """The pipeline and the bridges running in this process."""

    stores: PipelineStores
    pipeline: Pipeline
    bridges: Sequence[PlatformBridge]
    webhooks: Mapping[str, WebhookBridge]
    #: How old a message may be and still run (``bridges.max_message_age_s``).
    max_message_age: timedelta
    clock: Clock
    #: The leases of the connections only one instance holds (None: every bridge runs here).
    leases: ConnectionLeases | None = None
    #: The gateway bridges whose connection ended for good (the platform refused the bot).
    ended: set[str] = field(default_factory=set)
    #: The sweeps and the deliveries' upkeep (stopped first on close).
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: Each gateway bridge's connection (stopped once the messages in hand are answered).
    _connections: list[asyncio.Task[None]] = field(default_factory=list)

    def gateways(self) -> dict[str, bool]:
        """Each bridge that holds a connection of its own, and whether it still runs (False:
        it ended for good, the platform refused its credentials, and receives nothing)."""
        return {
            b.platform: b.platform not in self.ended
            for b in self.bridges
            if isinstance(b, GatewayBridge)
        }

    def held_connections(self) -> dict[str, bool]:
        """Each connection only one instance may hold that this one runs, and whether this
        instance holds it now (False: it stands by)."""
        held = self.leases.held if self.leases is not None else set()
        return {
            b.connection_name: b.connection_name in held
            for b in self.bridges
            if isinstance(b, HeldBridge)
        }

    async def take(self, bridge: PlatformBridge, message: Received) -> bool:
        """Hand ``message`` to the pipeline unless it is stale; True when it was taken.

        The one place every platform's messages pass, webhook and gateway alike, so the
        stale-message window (:mod:`bridges.freshness`) holds on every path. A stale message
        is answered as handled (the platform must not send it again) and logged.
        """
        why = staleness(message.sent_at, self.clock(), self.max_message_age)
        if why is not None:
            log.warning(
                "a %s message (delivery %s) was dropped as stale: %s",
                message.platform,
                message.delivery_id[:80],
                why,
            )
            return False
        return await self.pipeline.submit(bridge, message)

    async def take_press(self, bridge: PlatformBridge, press: Pressed) -> bool:
        """Hand ``press`` to the pipeline unless it is stale; True when it was taken."""
        why = staleness(press.sent_at, self.clock(), self.max_message_age)
        if why is not None:
            log.warning(
                "a %s press (delivery %s) was dropped as stale: %s",
                press.platform,
                press.delivery_id[:80],
                why,
            )
            return False
        return await self.pipeline.submit_press(bridge, press)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop: no delivery is taken over any more; the messages being handled finish
        (an answer being written gets its last edit: its final, or the words so far and
        that the server stopped) while every connection and client is still open; only
        then are the connections stopped and the bridges closed."""
        for task in self._tasks:
            task.cancel()
        await _gone(self._tasks)
        await self.pipeline.settled(timeout_s)
        for task in self._connections:
            task.cancel()
        await _gone(self._connections)
        for bridge in self.bridges:
            try:
                await bridge.close()
            except Exception:
                log.exception("closing the %s bridge failed", bridge.platform)


async def _gone(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Wait until each of ``tasks`` (cancelled) has ended."""
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def open_space_stores(
    db: Database, settings: Settings, people: People, clock: Clock, *, pairing: Pairing
) -> PipelineStores:
    """The space stores, their schemas migrated; roles resolve the file's names by ``people``."""
    stores = PipelineStores(
        pairing=pairing,
        spaces=Spaces(db, settings.spaces, people=people, clock=clock),
        preferences=SpacePreferences(db, clock=clock),
        mutes=Mutes(db, clock=clock),
        ambient=Ambient(
            db,
            max_messages=settings.ambient.max_messages,
            max_chars=settings.ambient.max_chars,
        ),
        deliveries=Deliveries(db, lease_s=settings.state.lease_s, clock=clock),
        settings=SpaceSettings(db, settings, clock=clock),
        notices=NoticeClaims(db, clock=clock),
        stops=TurnStops(db),
        bot_turns=BotTurns(
            db,
            clock=clock,
            max_turns=settings.bridges.bot_turns,
            reply_s=settings.bridges.bot_reply_s,
        ),
    )
    await stores.spaces.ensure_schema()
    await stores.preferences.ensure_schema()
    await stores.mutes.ensure_schema()
    await stores.ambient.ensure_schema()
    await stores.deliveries.ensure_schema()
    await stores.pairing.ensure_schema()
    await stores.settings.ensure_schema()
    await stores.notices.ensure_schema()
    await stores.bot_turns.ensure_schema()
    await stores.stops.start()
    return stores


def start_bridging(
    bridges: Sequence[PlatformBridge],
    stores: PipelineStores,
    *,
    settings: Settings,
    manager: SessionManager,
    people: People,
    person_settings: PersonSettings,
    catalogs: Catalogs,
    files: PersonFiles,
    clock: Clock,
    leases: ConnectionLeases | None = None,
) -> Bridging:
    """The pipeline over ``bridges``, each gateway bridge's connection started: a held one
    (:class:`~bridges.port.HeldBridge`) only while this instance holds its lease in
    ``leases`` (without them, at once, as on one instance)."""
    pipeline = Pipeline(
        settings=settings,
        manager=manager,
        people=people,
        person_settings=person_settings,
        catalogs=catalogs,
        files=files,
        stores=stores,
        clock=clock,
    )
    webhooks = {b.platform: b for b in bridges if isinstance(b, WebhookBridge)}
    bridging = Bridging(
        stores=stores,
        pipeline=pipeline,
        bridges=bridges,
        webhooks=webhooks,
        max_message_age=timedelta(seconds=settings.bridges.max_message_age_s),
        clock=clock,
        leases=leases,
    )
    loop = asyncio.get_running_loop()
    for bridge in bridges:
        if isinstance(bridge, InvitedBridge):
            bridge.admit_by(functools.partial(_admits, people, bridge.platform))
        if isinstance(bridge, HeldBridge) and leases is not None:
            bridging._connections.append(loop.create_task(_held(bridge, bridging, leases)))
        elif isinstance(bridge, GatewayBridge):
            bridging._connections.append(loop.create_task(_connected(bridge, bridging)))
    bridging._tasks.append(loop.create_task(_sweep(stores)))
    if bridges:
        platforms = {b.platform: b for b in bridges}
        bridging._tasks.append(loop.create_task(_keep_deliveries(stores, pipeline, platforms)))
    if bridges:
        log.info("Chat bridges on: %s.", ", ".join(b.platform for b in bridges))
    return bridging


async def _held(bridge: HeldBridge, bridging: Bridging, leases: ConnectionLeases) -> None:
    """Run ``bridge`` whenever this instance holds its connection's lease, until cancelled."""
    name = bridge.connection_name
    every_s = leases.lease_s / 3
    while True:
        try:
            holding = await leases.acquire(name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("asking for the %s connection's lease failed", name)
            holding = None
        if holding is None:
            await asyncio.sleep(every_s)
            continue
        log.info("This instance holds the %s connection now.", name)
        if holding.checkpoint is not None:
            try:
                bridge.restore(holding.checkpoint)
            except Exception:
                log.exception("the %s connection's checkpoint can't be restored", name)
        run = asyncio.get_running_loop().create_task(_connected(bridge, bridging))
        try:
            lost = await _keep_lease(bridge, leases, run)
        except asyncio.CancelledError:
            await _ended(run)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(every_s):
                    await leases.release(name, bridge.checkpoint())
            raise
        leases.lost(name)  # no longer reported as held, from the moment that is decided
        if lost:
            log.warning(
                "This instance lost the %s connection's lease: its connection is closed, it "
                "stands by.",
                name,
            )
        await _ended(run)
        if not lost:  # the run ended by itself (the platform refused the bot, logged)
            with contextlib.suppress(Exception):
                await leases.release(name, bridge.checkpoint())
            return
        await asyncio.sleep(every_s)


async def _ended(run: asyncio.Task[None]) -> None:
    """Cancel ``run`` until it has ended. One cancellation can be lost: Python 3.11's
    ``asyncio.wait_for`` drops it when what it waits for completes at the same moment (a
    gateway reconnecting), and the connection would go on without its lease."""
    while not run.done():
        run.cancel()
        await asyncio.wait({run}, timeout=_CANCEL_AGAIN_S)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        run.result()


async def _keep_lease(
    bridge: HeldBridge, leases: ConnectionLeases, run: asyncio.Task[None]
) -> bool:
    """Renew the lease with the bridge's checkpoint while ``run`` runs; True when the lease
    is lost (another holds it, or the store has not confirmed it in time), False when the
    run ended by itself."""
    name = bridge.connection_name
    every_s = leases.lease_s / 3
    confirmed = time.monotonic()
    while True:
        done, _ = await asyncio.wait({run}, timeout=every_s)
        if done:
            return False
        try:
            async with asyncio.timeout(every_s):
                if not await leases.renew(name, bridge.checkpoint()):
                    return True
            confirmed = time.monotonic()
        except (Exception, TimeoutError):
            log.warning("renewing the %s connection's lease failed", name, exc_info=True)
        # A lapsed lease may be taken over: let go before it could be, a third ahead.
        if time.monotonic() - confirmed + every_s >= leases.lease_s:
            return True


async def _connected(bridge: GatewayBridge, bridging: Bridging) -> None:
    async def deliver(message: Received | Pressed) -> None:
        # Back-pressure: a full pipeline holds the connection's next message back (Socket
        # Mode leaves its envelope unacknowledged) instead of queueing without bound.
        await bridging.pipeline.room()
        if isinstance(message, Pressed):
            await bridging.take_press(bridge, message)
        else:
            await bridging.take(bridge, message)

    try:
        await bridge.run(deliver)
    except asyncio.CancelledError:
        raise
    except BridgeError as refused:
        # The platform refused the bot for good (a wrong token): its sentence says what to
        # set; nothing of ours failed, so no traceback.
        log.error("%s", refused)
    except Exception:
        log.exception("the %s bridge's connection ended", bridge.platform)
    bridging.ended.add(bridge.platform)


async def _admits(people: People, platform: str, account: str, name: str | None) -> Admission:
    """Whether the instance talks to ``account`` of ``platform`` (an inviter), as it decides
    for every message: the directory, or anyone when there is none; a stranger of a
    ``pairing`` platform may be given a code in a DM (:class:`~core.spaces.routing.Stranger`)."""
    principal = Principal(id=account, provider=platform, display_name=name)
    found = await people.identify(principal)
    if isinstance(found, Admitted):
        return "admitted"
    if (
        isinstance(found, Refused)
        and found.reason == "unknown"
        and people.dm_policy(platform) == "pairing"
    ):
        return "pairing"
    return "refused"


async def _sweep(stores: PipelineStores) -> None:
    while True:
        await asyncio.sleep(_SWEEP_S)
        try:
            await stores.mutes.purge_expired()
            await stores.deliveries.purge()
            await stores.pairing.purge_expired()
        except Exception:
            log.exception("sweeping expired mutes, delivery ids and pairing codes failed")


async def _keep_deliveries(
    stores: PipelineStores, pipeline: Pipeline, bridges: Mapping[str, PlatformBridge]
) -> None:
    """Renew the leases of the deliveries in hand (one statement for all), and run again
    what a dead instance took and never handled: at start, then every third of a lease."""
    deliveries = stores.deliveries
    while True:
        try:
            await deliveries.renew()
            await pipeline.recover(bridges)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("renewing or recovering the bridges' deliveries failed")
        await asyncio.sleep(deliveries.lease_s / 3)
