"""Job files (TOML, YAML or JSON by extension), read strictly: an unknown key is an error."""

import os

from attrs import field, frozen

from qex.base.errors import SpecError


@frozen
class Resources:
    cpu: str | int | float | None = None
    mem: str | int | None = None
    gpu: int | None = None
    vram: str | int | None = None
    claims: dict[str, int | str | dict] = field(factory=dict)
    locks: list[str] = field(factory=list)


@frozen
class JobFile:
    command: list[str] | str
    name: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(factory=dict)
    env_capture: str | None = None
    tags: list[str] = field(factory=list)
    priority: int | None = None
    timeout: str | int | float | None = None
    retries: int | None = None
    oom_retries: int | None = None
    max_queue_time: str | int | float | None = None
    needs: list[str] = field(factory=list)
    after: list[str] = field(factory=list)
    dedupe_key: str | None = None
    nice: int | None = None
    resources: Resources = field(factory=Resources)


def read_document(path: str, what: str = "job file") -> dict:
    """Parse a TOML, YAML or JSON file into a dict; every failure names the file."""
    from qex.store import fs

    ext = os.path.splitext(path)[1].lower()
    if ext not in (".toml", ".yaml", ".yml", ".json"):
        raise SpecError(f"{what} {path}: unknown extension {ext or '(none)'!r}; use .toml, .yaml, .yml or .json")
    try:
        raw = fs.read_bytes(path, 16 << 20)
    except FileNotFoundError:
        raise SpecError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise SpecError(f"{what} {path} cannot be read: {exc.strerror or exc}; it must be a regular file") from None
    if len(raw) > 16 << 20:
        raise SpecError(f"{what} {path} is larger than 16MB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} {path} is not UTF-8 (byte {exc.start})") from None
    try:
        if ext == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif ext == ".json":
            import json

            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # each parser has its own error class; all mean "not valid"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(f"{what} {path} is not valid {ext[1:].upper()}: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must hold a table (a mapping) at the top")
    return data


def load(path: str) -> JobFile:
    return structure(read_document(path), path)


def structure(data: dict, where: str) -> JobFile:
    from qex.store import codec

    try:
        job = codec.strict().structure(data, JobFile)
    except Exception as exc:
        raise SpecError(f"{where}: {codec.describe(exc, os.path.basename(where))}") from None
    return job
