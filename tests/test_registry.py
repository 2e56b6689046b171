import pytest

import tau_env
from tau_env import registry
from tau_env.error import RegistrationError, UnknownEnvError


def test_make_unknown_suggests():
    with pytest.raises(UnknownEnvError, match="No environment 'harbor-bank-v1'.*Did you mean \"harbor-bank-v0\""):
        tau_env.make("harbor-bank-v1")


def test_register_scoped(domain):
    with registry.scoped():
        tau_env.register("tiny-v0", lambda: domain, description="tiny", max_steps=7)
        env = tau_env.make("tiny-v0")
        assert env.max_steps == 7 and env.domain is domain
        assert tau_env.make("tiny-v0", max_steps=9).max_steps == 9
        with pytest.raises(RegistrationError, match="already registered"):
            tau_env.register("tiny-v0", lambda: domain)
    assert "tiny-v0" not in registry.ids()
    with pytest.raises(RegistrationError, match="must be lower-case"):
        tau_env.register("Bad Id", lambda: domain)


def test_loader_kwargs_pass_through(domain):
    seen = {}

    def loader(**kw):
        seen.update(kw)
        return domain

    with registry.scoped():
        tau_env.register("tiny-v1", loader, flavour="x")
        tau_env.make("tiny-v1", max_steps=5, data_dir="/somewhere")
    assert seen == {"flavour": "x", "data_dir": "/somewhere"}


def test_shipped_domain_is_shared_between_envs():
    a, b = tau_env.make("harbor-bank-v0"), tau_env.make("harbor-bank-v0")
    assert a.domain is b.domain
