"""Settings from the environment, failing loudly: typed readers (`NAME_FILE` wins over `NAME` for
container secrets) and the development secrets generated once into the data folder."""

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    """A string from the environment; NAME_FILE (a path) wins over NAME, for container secrets."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        return Path(file_path).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def database_settings(url: str, **options: Any) -> dict[str, Any]:
    """Django's DATABASES entry for a database URL (dj-database-url), PostgreSQL's multi-host form too:
    `postgres://user@db-a:5432,db-b:5432/reviewer?target_session_attrs=read-write` gives libpq both
    hosts (HOST "db-a,db-b", PORT "5432,5432"), which it tries in turn for a read-write server: after a
    standby is promoted, new connections find it (docs/operations.md, "PostgreSQL failover")."""
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    if "," not in hosts or not parts.scheme.startswith("postgres"):
        return dict(dj_database_url.parse(url, **options))
    names, ports = [], []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL names an empty host in {hosts!r}")
        names.append(name)
        ports.append(port or "5432")
    first = f"{credentials}@{names[0]}" if credentials else names[0]
    settings = dict(dj_database_url.parse(urlunsplit(parts._replace(netloc=first)), **options))
    settings["HOST"], settings["PORT"] = ",".join(names), ",".join(ports)
    return settings


def development_secret(data_dir: Path, filename: str) -> str:
    """Generated once into the data folder, so restarts keep sessions; never used with DEBUG off."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / filename
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()
