"""Settings from the environment, failing loudly: typed readers (`NAME_FILE` wins over `NAME` for
container secrets) and the development secrets generated once into the data folder."""

import os
import secrets
from pathlib import Path

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


def development_secret(data_dir: Path, filename: str) -> str:
    """Generated once into the data folder, so restarts keep sessions; never used with DEBUG off."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / filename
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()
