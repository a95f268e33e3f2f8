"""The secrets a loaded config holds, registered with `pipeline.redact` so that they are
masked wherever they show up: which fields hold secrets is the config's knowledge."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config.sources import SourceConfig
from pipeline.redact import register, secret_key, url_secrets, user_info

if TYPE_CHECKING:
    from pipeline.config import Config


def register_source(source: SourceConfig) -> None:
    """A camera's secrets: its URL's password and secret query values, its secret-named
    FFmpeg options (a camera added while running brings its own)."""
    if source.uri:
        register(*url_secrets(source.uri))
    register(*(v for k, v in source.options.items() if secret_key(k)))


def register_config(config: Config) -> None:
    """Register every secret of a loaded config, so that it is masked wherever it shows
    up (a library's error, an echoed request): the cameras' URL passwords and secret
    query values and secret-named FFmpeg options, the MQTT password, the web token,
    and the webhook URL's user info and secret query values."""
    for source in config.sources:
        register_source(source)
    if config.outputs.web is not None:
        register(config.outputs.web.token)
    events = config.outputs.events
    if events.mqtt is not None:
        register(events.mqtt.password)
    if events.webhook is not None and events.webhook.url:
        register(*url_secrets(events.webhook.url), *user_info(events.webhook.url))
