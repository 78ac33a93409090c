"""LLM endpoint configuration: one typed model, layered sources (STYLE.md 10).

Layers, later wins: defaults < ``[llm]`` table of ``<user config dir>/config.toml`` <
environment (``OPENAI_BASE_URL``, ``FORGE_LLM_MODEL``) < command-line flags (``--base-url``,
``--model``). Unknown keys in the file are an error naming the key.

The API key is *not* part of the configuration: it is read from ``OPENAI_API_KEY`` when a
client is built (:func:`api_key`), and never stored in a run, a transcript or a log.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlparse, urlsplit

from forge_tui.core.errors import ForgeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib


class ConfigError(ForgeError, ValueError):
    """A configuration problem, explained in one line."""


#: What a local server (vLLM, Ollama, llama.cpp) accepts when it checks no key at all.
NO_KEY = "sk-no-key-required"


@dataclass(frozen=True)
class LLMConfig:
    """How to reach the model.

    base_url: OpenAI-compatible endpoint (``.../v1``); empty means the openai client's default.
    model: model name; empty means "the first model the endpoint lists".
    timeout_s: the longest wait for the server to start answering a request (seconds): queue,
        model load, and (without streaming) the whole reply.
    idle_timeout_s: the longest silence inside a streamed reply (seconds).
    stream: ask for streamed replies (SSE); a server that refuses is asked without.
    max_retries: retries after the first attempt on rate limits, timeouts, connection errors, 5xx.
    retry_wait_s: first backoff (seconds); doubles per retry, with full jitter.
    retry_max_wait_s: the longest single backoff (seconds).
    retry_budget_s: total time across attempts before giving up (seconds); it bounds the wait for
        a server that never answers too (each attempt's wait is cut to what is left of it).
    wait_notice_s: how often a request still waiting for its first token says so, on the run's
        output and in the app's transcript ("waiting for the first token from URL, 90 s");
        0: never.
    temperature / max_tokens: sampling settings sent with every request.
    prices: ``{model: {"input": $, "output": $}}`` per 1M tokens, from ``[llm.prices]``; the
        cost shown is computed from these only (none are built in).
    """

    base_url: str = ""
    model: str = ""
    timeout_s: float = 300.0
    idle_timeout_s: float = 120.0
    stream: bool = True
    max_retries: int = 4
    retry_wait_s: float = 1.0
    retry_max_wait_s: float = 30.0
    retry_budget_s: float = 900.0
    wait_notice_s: float = 30.0
    temperature: float = 0.7
    max_tokens: int = 16384
    prices: dict = field(default_factory=dict)

    def run_config(self) -> dict:
        """What is stored in a run's ``config_json`` (no API key: there is none in here)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "config", strict: bool = True) -> "LLMConfig":
        """Build from a mapping; unknown keys raise ConfigError (or are skipped when not strict)."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, val in data.items():
            if key not in known:
                if strict:
                    raise ConfigError(f"unknown key {key!r} in {where}; known keys: {', '.join(known)}")
                continue
            values[key] = _coerce(key, val, known[key].type, where)
        cfg = replace(cls(), **values)
        cfg.validate(where)
        return cfg

    def validate(self, where: str = "config") -> None:
        if self.timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ConfigError(f"timeout_s and idle_timeout_s must be above 0 (in {where})")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more (in {where})")
        if self.max_tokens <= 0:
            raise ConfigError(f"max_tokens must be above 0 (in {where})")
        if self.retry_wait_s < 0 or self.retry_max_wait_s < 0 or self.retry_budget_s <= 0:
            raise ConfigError(f"retry times must be positive (in {where})")
        if self.wait_notice_s < 0:
            raise ConfigError(f"wait_notice_s must be 0 or more (in {where})")


def _prices(val: Any, where: str) -> dict:
    """``[llm.prices]``: ``{model: {"input": float, "output": float}}`` (dollars per 1M tokens)."""
    if not isinstance(val, dict):
        raise ConfigError(f"prices in {where} must be a table ([llm.prices]) keyed by model")
    out: dict[str, dict[str, float]] = {}
    for model, p in val.items():
        if not isinstance(p, dict) or set(p) - {"input", "output"} or not p:
            raise ConfigError(
                f"prices.{model} in {where} must be a table with input and output (dollars per 1M tokens)"
            )
        try:
            out[str(model)] = {k: float(v) for k, v in p.items() if not isinstance(v, bool)}
        except (TypeError, ValueError):
            raise ConfigError(f"prices.{model} in {where}: input and output must be numbers") from None
        if any(v < 0 for v in out[str(model)].values()) or len(out[str(model)]) != len(p):
            raise ConfigError(f"prices.{model} in {where}: input and output must be numbers of 0 or more")
    return out


def _coerce(key: str, val: Any, typ: Any, where: str) -> Any:
    name = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    if key == "prices":
        return _prices(val, where)
    try:
        if name == "bool":
            if not isinstance(val, bool):
                raise TypeError
            return val
        if name == "str":
            if not isinstance(val, str):
                raise TypeError
            return val
        if name == "int":
            if isinstance(val, bool) or isinstance(val, float) and not val.is_integer():
                raise TypeError
            return int(val)
        if name == "float":
            if isinstance(val, bool):
                raise TypeError
            return float(val)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{key} in {where} must be a {name}, not {val!r}")


def config_path() -> Path:
    """``config.toml`` in the user config dir (``$XDG_CONFIG_HOME/forge-tui`` on Linux)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("forge-tui")) / "config.toml"


def read_file(path: Optional[Path] = None) -> dict:
    """The ``[llm]`` table of the config file ({} when the file does not exist). Raises ConfigError."""
    path = path or config_path()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from exc
    unknown = [k for k in data if k != "llm"]
    if unknown:
        raise ConfigError(f"unknown table or key {unknown[0]!r} in {path}; known: [llm]")
    table = data.get("llm", {})
    if not isinstance(table, dict):
        raise ConfigError(f"'llm' in {path} must be a table ([llm])")
    if "api_key" in table:
        raise ConfigError(f"api_key in {path}: keep the key out of files; set OPENAI_API_KEY instead")
    LLMConfig.from_dict(table, where=str(path))  # unknown keys and types are reported here
    return table


def load(args=None, *, path: Optional[Path] = None, env: Optional[Mapping[str, str]] = None) -> LLMConfig:
    """The effective configuration: defaults < file < environment < flags. Raises ConfigError."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = dict(read_file(path))
    where = "the config file and environment"
    if env.get("OPENAI_BASE_URL"):
        merged["base_url"] = env["OPENAI_BASE_URL"]
    if env.get("FORGE_LLM_MODEL"):
        merged["model"] = env["FORGE_LLM_MODEL"]
    if args is not None:
        if getattr(args, "base_url", None):
            merged["base_url"] = args.base_url
        if getattr(args, "model", None):
            merged["model"] = args.model
        if getattr(args, "timeout", None):
            merged["timeout_s"] = args.timeout
    return LLMConfig.from_dict(merged, where=where)


def api_key(env: Optional[Mapping[str, str]] = None) -> str:
    """``OPENAI_API_KEY``, or a placeholder local servers accept (they check no key)."""
    env = os.environ if env is None else env
    return env.get("OPENAI_API_KEY") or NO_KEY


def default_proposer(args) -> str:
    """``llm`` when an endpoint is configured (flag, OPENAI_BASE_URL or the file), else ``tune``."""
    if getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL"):
        return "llm"
    try:
        return "llm" if read_file().get("base_url") else "tune"
    except ConfigError:
        return "tune"  # the error is reported when the llm proposer is actually asked for


def llm_run_config(args) -> dict:
    """The LLM settings stored in a run's config (never the API key). Raises ConfigError."""
    return load(args).run_config()


#: Where the openai client sends requests when no base URL is configured.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _addresses(host: str, timeout_s: float) -> list[str]:
    """IP addresses of ``host`` ([] when it does not resolve within ``timeout_s`` seconds)."""
    try:
        return [str(ipaddress.ip_address(host.split("%")[0]))]
    except ValueError:
        pass
    found: list[str] = []

    def resolve() -> None:
        try:
            found.extend(sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)}))
        except (OSError, UnicodeError):
            pass

    t = threading.Thread(target=resolve, name="resolve-endpoint", daemon=True)
    t.start()
    t.join(timeout_s)
    return list(found)


def _is_own_address(ip: str) -> bool:
    """True for a loopback or unspecified address, or one bound to an interface of this host."""
    try:
        addr = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return False
    if addr.is_loopback or addr.is_unspecified:
        return True
    family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((ip, 0))  # only succeeds for an address this host owns
        return True
    except OSError:
        return False


def is_local_endpoint(base_url: str, *, timeout_s: float = 3.0) -> bool:
    """True when ``base_url`` points at this machine: ``localhost``, 127.0.0.0/8, ``::1``, or a
    name or address of one of this host's interfaces. An empty URL is the hosted OpenAI API."""
    host = (urlsplit(base_url or DEFAULT_BASE_URL).hostname or "").lower().rstrip(".")
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    if host in {socket.gethostname().lower(), socket.getfqdn().lower()}:
        return True
    return any(_is_own_address(ip) for ip in _addresses(host, timeout_s))


def endpoint_overrides(stored: dict, args=None, env: Optional[Mapping[str, str]] = None) -> dict:
    """What ``resume`` changes in a run's stored endpoint: ``{"base_url"?, "model"?}``.

    A run keeps the endpoint it was started with (its config is the default); the
    environment (``OPENAI_BASE_URL``, ``FORGE_LLM_MODEL``) overrides it, and the flags
    (``--base-url``, ``--model``) override both. Only values that differ from the stored
    ones are returned. The config file does not override a run. The key is never part of it.
    """
    env = os.environ if env is None else env
    new: dict[str, str] = {}
    for key, var, flag in (("base_url", "OPENAI_BASE_URL", "base_url"), ("model", "FORGE_LLM_MODEL", "model")):
        value = getattr(args, flag, None) or env.get(var) or ""
        if value and value != stored.get(key, ""):
            new[key] = value
    return new


def endpoint_problem(who: str = "--proposer llm") -> Optional[str]:
    """Why no LLM endpoint can be used here, from the environment and the config file (no
    flags), as :func:`missing` says it, or a broken config file's one line; None when one can.
    The one check ``capture``'s hints and ``optimize``'s proposer choice share."""
    try:
        return missing(load(), who=who)
    except ConfigError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def missing(
    cfg: LLMConfig, env: Optional[Mapping[str, str]] = None, *, path: Optional[Path] = None, who: str = "--proposer llm"
) -> Optional[str]:
    """Why ``cfg`` cannot drive an LLM search, as one line naming how to fix it; None when it can.

    A local server (see :func:`is_local_endpoint`) needs only its base URL: no key, and the
    model defaults to the first one it lists. A hosted API needs a key (``OPENAI_API_KEY``)
    and a model. No base URL and no key means nothing is configured at all.
    """
    env = os.environ if env is None else env
    where = path or config_path()
    key = env.get("OPENAI_API_KEY")
    if cfg.base_url:
        parts = urlparse(cfg.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"the base URL {cfg.base_url!r} is not an http(s) URL (e.g. http://localhost:8000/v1)"
    if not cfg.base_url and not key:
        if who == "optimize":  # no endpoint flags there: the environment or the config file
            return (
                f"{who} needs an endpoint for the LLM: set OPENAI_BASE_URL (e.g. http://localhost:8000/v1) "
                f"or base_url in the [llm] table of {where}; a hosted API also needs OPENAI_API_KEY and "
                "FORGE_LLM_MODEL"
            )
        return (
            f"{who} needs an endpoint: pass --base-url URL (e.g. http://localhost:8000/v1), "
            f"set OPENAI_BASE_URL, or set base_url in the [llm] table of {where}; "
            f"a hosted API also needs OPENAI_API_KEY and --model"
        )
    url = cfg.base_url or DEFAULT_BASE_URL
    if is_local_endpoint(url):
        return None
    if not key:
        return f"no API key for the hosted endpoint {url}: set OPENAI_API_KEY (a server on this machine needs none)"
    if not cfg.model:
        return (
            f"no model for the hosted endpoint {url}: pass --model NAME, set FORGE_LLM_MODEL, "
            f"or set model in the [llm] table of {where}"
        )
    return None
