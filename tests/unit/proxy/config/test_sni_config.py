"""[proxy.sni]: SNI mode is one TLS port for the whole cluster, so it is refused without TLS,
beside per-broker ports, or with a broker name pattern that cannot name a node."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import Config, ConfigError, load_config

TLS = '[proxy.tls]\ncert_file = "server.pem"\nkey_file = "server.key"\n'


def load_config_of(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return load_config(path)


SNI = (
    '[proxy.sni]\nbootstrap_host = "bootstrap.kafka.test"\nbroker_host = "b-{node_id}.kafka.test"\n'
)


def test_sni_mode_with_tls_loads(tmp_path: Path) -> None:
    config = load_config_of(tmp_path, TLS + SNI + "advertised_port = 443\n")
    assert config.proxy.sni.enabled
    assert (config.proxy.sni.broker_host, config.proxy.sni.advertised_port) == (
        "b-{node_id}.kafka.test",
        443,
    )


def test_sni_mode_is_off_by_default() -> None:
    assert not load_config().proxy.sni.enabled


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (SNI, "needs [proxy.tls]"),
        ("[proxy]\nfirst_broker_port = 9093\n" + TLS + SNI, "leave first_broker_port"),
        ("[proxy.broker_ports]\n1 = 9093\n" + TLS + SNI, "leave first_broker_port"),
        (TLS + '[proxy.sni]\nbootstrap_host = "bootstrap.kafka.test"\n', "set together"),
        (
            TLS + '[proxy.sni]\nbootstrap_host = "b.kafka.test"\nbroker_host = "b.kafka.test"\n',
            "{node_id} exactly once",
        ),
    ],
)
def test_what_sni_mode_cannot_work_with_is_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config_of(tmp_path, text)
    assert says in str(error.value)
