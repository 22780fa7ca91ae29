"""The settings of a command that runs Skald's own parts (`up`, `worker`, `config`, `store ...`):
defaults, a TOML file given with --config, SKALD_* variables, then the command's flags."""

from __future__ import annotations

from pathlib import Path

import click

from skald.runtime.host.config import Config


def command_config(data_dir: Path | None, nats_url: str | None, nats_port: int | None, actors: str | None = None,
         embedder: str | None = None, log_level: str | None = None, log_format: str | None = None) -> Config:
    return Config.from_env(data_dir=data_dir, nats_url=nats_url, nats_port=nats_port, actors=actors,
                           embedder=embedder, log_level=log_level, log_format=log_format,
                           config_file=click.get_current_context().meta.get("skald_config"))


config_option = click.option("--config", type=click.Path(dir_okay=False, path_type=Path), expose_value=False,
                       is_eager=True, callback=lambda ctx, _p, v: ctx.meta.__setitem__("skald_config", v),
                       help="A TOML file of settings (names as in `skald config`; SKALD_* and flags win).")
