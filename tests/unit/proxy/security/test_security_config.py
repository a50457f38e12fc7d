"""Security settings (issue 16): names, secrets kept out of reprs, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import ConfigError, load_config

SECRET = "s3cr3t-Pa55word"


def test_password_from_the_environment_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("PURGATORY_PROXY_UPSTREAM__SASL__USERNAME", "proxy")
    monkeypatch.setenv("PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD", SECRET)
    config = load_config()
    assert config.upstream.sasl.read_password() == SECRET
    for text in (repr(config), str(config), config.model_dump_json(), repr(config.upstream)):
        assert SECRET not in text


def test_password_file_is_read_at_use(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("first\n")
    path = tmp_path / "c.toml"
    path.write_text(
        f'[upstream.sasl]\nmechanism = "PLAIN"\nusername = "u"\npassword_file = "{secret_file}"\n'
    )
    sasl = load_config(path).upstream.sasl
    assert sasl.read_password() == "first"
    secret_file.write_text("second\n")
    assert sasl.read_password() == "second"


def test_client_auth_takes_passthrough_and_nothing_unknown(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[proxy]\nclient_auth = "passthrough"\n')
    assert load_config(path).proxy.client_auth == "passthrough"
    path.write_text('[proxy]\nclient_auth = "pass"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = [line for line in str(caught.value).splitlines() if "client_auth" in line]
    assert len(lines) == 1


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ('[proxy.tls]\ncert_file = "c.pem"\n', "proxy.tls", "set together"),
        ('[proxy.tls]\nclient_ca_file = "ca.pem"\n', "proxy.tls", "client_ca_file"),
        ('[upstream.tls]\nkey_file = "k.pem"\n', "upstream.tls", "set together"),
        ('[upstream.sasl]\nmechanism = "GSSAPI"\n', "upstream.sasl.mechanism", "PLAIN"),
        ('[upstream.sasl]\nmechanism = "PLAIN"\n', "upstream.sasl", "username"),
        ('[upstream.sasl]\nmechanism = "PLAIN"\nusername = "u"\n', "upstream.sasl", "password"),
        ('[upstream.sasl]\nmechanism = "OAUTHBEARER"\n', "upstream.sasl", "token_file"),
        ("[upstream.tls]\nenabeld = true\n", "upstream.tls.enabeld", "enabeld"),
    ],
)
def test_bad_security_settings_name_the_key(
    tmp_path: Path, text: str, key: str, words: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert key in str(caught.value)
    assert words in str(caught.value)


def test_wrong_password_setting_error_does_not_echo_the_password(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'[upstream.sasl]\nmechanism = "PLAIN"\nusername = "u"\npassword = "{SECRET}"\n'
        'password_file = "/nowhere"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert SECRET not in str(caught.value)


def test_the_tls_scram_sidecar_example_loads_and_holds_no_secret() -> None:
    """examples/sidecar-tls-scram/proxy.toml is what docs/security.md tells people to copy."""
    example = Path(__file__).resolve().parents[4] / "examples" / "sidecar-tls-scram" / "proxy.toml"
    config = load_config(example)
    assert config.upstream.tls.enabled
    assert config.upstream.tls.check_hostname
    assert config.upstream.sasl.mechanism == "SCRAM-SHA-512"
    assert config.upstream.sasl.password_file == "/etc/kafka-credentials/password"
    assert config.upstream.sasl.password.get_secret_value() == ""
    assert config.proxy.client_auth == "none"
