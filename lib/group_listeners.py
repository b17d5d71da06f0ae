"""Who listens on which channel-layer group: a registry the listeners keep themselves, so that a
transition's broadcast (approvals/events.py) is sent only to the groups somebody listens on.

Why it exists: most transitions (an agent's allowed call above all) happen while no page, socket or
decision wait watches their proposal, their tenant's queue or their person, and each still cost the
proposal page's render and a group_send per group, after every commit. channels-redis knows who is in a
group, but only in its own private keys; this registry is ours, in keys of ours, written and read with
redis-py's documented commands only.

How: one Redis set per group, `<layer prefix>:listeners:<group>`, whose members are the listeners (a
socket's channel name, a decision wait's channel). A listener joins (SADD, and EXPIRE of the set to TTL)
before it joins the group and before its first read, and leaves (SREM) when it closes. Each process
refreshes its own listeners' sets every REFRESH seconds (SADD and EXPIRE again, which also puts them
back after Redis lost its keys), so a set left by a process that crashed expires at most TTL after its
last refresh, unless live listeners keep it: then the group is listened on anyway. A sender asks for
all the groups of a message in one round trip (a pipeline of EXISTS) after its commit.

The race: a listener that joined before the sender asked gets the message (or, if the send overtook its
group_add, its first read comes after the send, so after the commit); one that joined after reads after
it, so after the commit. Either way nothing committed is missed: consumers.py registers in authorize(),
before connect() joins the groups and reads the page; decision_wait.py before its read.

Failure mode: toward sending. When the registry cannot be read (Redis down or restarting, no Redis:
the in-memory channel layer), every group counts as listened on: a needless send only costs time, a
missed one leaves a reviewer's page stale. A listener that cannot join (Redis down) fails to open, as it
does when its group_add fails beside it.
"""

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable

import redis
from django.conf import settings

log = logging.getLogger(__name__)

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"  # reviewer/fixed_settings.py
TTL = 90  # seconds a group's set outlives its process's last refresh
REFRESH = 30  # seconds between a process's refreshes of its listeners' sets
TIMEOUT = 2.0  # seconds for a command: past it, the sender sends (and a listener fails to open)


def _config() -> tuple[str, str] | None:
    """(Redis URL, key prefix) of the channel layer when it is channels-redis's, else None."""
    layer = settings.CHANNEL_LAYERS.get("default", {})
    if layer.get("BACKEND") != REDIS_LAYER:
        return None
    config = layer.get("CONFIG", {})
    hosts = config.get("hosts") or []
    host = hosts[0] if hosts else None
    address = host.get("address") if isinstance(host, dict) else host
    if not isinstance(address, str):
        return None
    return address, config.get("prefix", "asgi")


class Registry:
    """This process's side of the registry: its listeners (refreshed) and the Redis client it uses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, redis.Redis] = {}
        # (url, prefix) -> group -> this process's members in it
        self._local: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self._refresher: threading.Thread | None = None
        self._stop = threading.Event()

    def _client(self, url: str) -> redis.Redis:
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = self._clients[url] = redis.Redis.from_url(
                    url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
                )
            return client

    @staticmethod
    def key(prefix: str, group: str) -> str:
        return f"{prefix}:listeners:{group}"

    def join(self, member: str, groups: Iterable[str]) -> None:
        """Register `member` as listening on `groups` (before it joins them and reads). Raises when Redis
        does not answer; nothing to do without a Redis channel layer."""
        config = _config()
        groups = list(groups)
        if config is None or not groups:
            return
        url, prefix = config
        with self._lock:
            for group in groups:
                self._local[config][group].add(member)
        try:
            pipe = self._client(url).pipeline(transaction=False)
            for group in groups:
                pipe.sadd(self.key(prefix, group), member)
                pipe.expire(self.key(prefix, group), TTL)
            pipe.execute()
        except BaseException:
            self._forget(config, member, groups)
            raise
        self._start_refresher()

    def leave(self, member: str, groups: Iterable[str]) -> None:
        """Unregister `member` from `groups`. A failure is logged: its entries expire (TTL)."""
        config = _config()
        groups = list(groups)
        if config is None or not groups:
            return
        url, prefix = config
        self._forget(config, member, groups)
        try:
            pipe = self._client(url).pipeline(transaction=False)
            for group in groups:
                pipe.srem(self.key(prefix, group), member)
            pipe.execute()
        except Exception:
            log.warning("live listeners: could not unregister %s; its entries expire", member, exc_info=True)

    def _forget(self, config: tuple[str, str], member: str, groups: list[str]) -> None:
        with self._lock:
            local = self._local[config]
            for group in groups:
                members = local.get(group)
                if members is not None:
                    members.discard(member)
                    if not members:
                        del local[group]

    def listened(self, groups: Iterable[str]) -> set[str]:
        """The groups among `groups` that somebody listens on, asked in one round trip: all of them when
        the registry cannot be read (no Redis channel layer, Redis down)."""
        groups = list(groups)
        config = _config()
        if config is None or not groups:
            return set(groups)
        url, prefix = config
        try:
            pipe = self._client(url).pipeline(transaction=False)
            for group in groups:
                pipe.exists(self.key(prefix, group))
            found = pipe.execute()
        except Exception:
            log.warning("live listeners: registry unreadable, sending to every group", exc_info=True)
            return set(groups)
        return {group for group, count in zip(groups, found, strict=True) if count}

    def refresh(self) -> None:
        """Add this process's listeners again and push their sets' expiry back (every REFRESH seconds)."""
        with self._lock:
            snapshot = {
                config: {group: list(members) for group, members in groups.items() if members}
                for config, groups in self._local.items()
            }
        for (url, prefix), groups in snapshot.items():
            if not groups:
                continue
            try:
                pipe = self._client(url).pipeline(transaction=False)
                for group, members in groups.items():
                    pipe.sadd(self.key(prefix, group), *members)
                    pipe.expire(self.key(prefix, group), TTL)
                pipe.execute()
            except Exception:
                log.warning("live listeners: refresh failed; retried in %s s", REFRESH, exc_info=True)

    def _start_refresher(self) -> None:
        with self._lock:
            if self._refresher is not None:
                return
            self._refresher = threading.Thread(
                target=self._refresh_forever, name="live-listeners", daemon=True
            )
        self._refresher.start()

    def _refresh_forever(self) -> None:
        while not self._stop.wait(REFRESH):
            self.refresh()


registry = Registry()
join = registry.join
leave = registry.leave
listened = registry.listened
