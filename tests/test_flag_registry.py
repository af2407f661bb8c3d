"""The flag registry (xladev/_flags.py): reads, per-thread overrides, unknown names, names it must refuse.

Each test builds its own registry class, since a flag is a descriptor on the registry's class.
"""

from __future__ import annotations

import threading

import pytest

from xladev._flags import Config, ConfigError, Flag, _parse_bool, config


def _registry(monkeypatch, env_value: str | None = None) -> Config:
    class Registry(Config):
        pass

    if env_value is None:
        monkeypatch.delenv("XLADEV_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("XLADEV_TEST_FLAG", env_value)
    registry = Registry()
    registry.define(Flag("test_flag", "XLADEV_TEST_FLAG", _parse_bool, False, "a flag for this test"))
    registry.define(Flag("api_only", None, int, 3, "an API-only flag", choices=(3, 4)))
    return registry


def test_values_come_from_the_environment_and_update(monkeypatch):
    assert _registry(monkeypatch).test_flag is False
    registry = _registry(monkeypatch, "1")
    assert registry.test_flag is True
    registry.update("test_flag", False)
    assert registry.test_flag is False
    assert registry.api_only == 3


def test_an_override_holds_in_its_thread_only_and_ends_with_its_block(monkeypatch):
    registry = _registry(monkeypatch)
    seen = []
    with registry.override(test_flag=True):
        with registry.override(api_only=4):
            assert (registry.test_flag, registry.api_only) == (True, 4)
            worker = threading.Thread(target=lambda: seen.append((registry.test_flag, registry.api_only)))
            worker.start()
            worker.join()
        assert (registry.test_flag, registry.api_only) == (True, 3)
    assert registry.test_flag is False
    assert seen == [(False, 3)]


def test_unknown_names_and_bad_values_are_refused_by_name(monkeypatch):
    registry = _registry(monkeypatch)
    with pytest.raises(AttributeError, match="no setting 'tset_flag'"):
        registry.tset_flag  # noqa: B018
    with pytest.raises(ConfigError, match="no setting 'tset_flag'"):
        registry.update("tset_flag", True)
    with pytest.raises(ConfigError, match="expected one of 3, 4"):
        registry.update("api_only", 5)
    with pytest.raises(ConfigError, match="XLADEV_TEST_FLAG='maybe' is not valid"):
        _registry(monkeypatch, "maybe")


def test_a_flag_may_not_hide_a_method_of_the_registry(monkeypatch):
    registry = _registry(monkeypatch)
    with pytest.raises(ValueError, match="would hide Config.override"):
        registry.define(Flag("override", None, int, 0, "clashes"))
    assert callable(registry.override)


def test_another_registrys_flag_is_not_read_from_this_one(monkeypatch):
    # The descriptor lives on the test registry's class, so the process's registry never sees the test flag.
    _registry(monkeypatch)
    with pytest.raises(AttributeError, match="no setting 'test_flag'"):
        config.test_flag  # noqa: B018
