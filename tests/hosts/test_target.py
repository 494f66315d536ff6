"""`[host] target` parsing: the three accepted forms, and refusals that say so."""

from __future__ import annotations

import pytest

from specpilot.errors import UserError
from specpilot.hosts import LocalHost, SSHHost, open_host, open_host_section
from specpilot.hosts.errors import BadTarget
from specpilot.hosts.target import Target, parse_target
from specpilot.spec import HostSection


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("local", Target("local", "local")),
        (
            "ssh://ubuntu@gpu-1.example.com:2222",
            Target("ssh://ubuntu@gpu-1.example.com:2222", "ssh", "gpu-1.example.com", 2222, "ubuntu"),
        ),
        ("ssh://10.0.0.5", Target("ssh://10.0.0.5", "ssh", "10.0.0.5", None, None)),
        ("ssh://root@[::1]:22", Target("ssh://root@[::1]:22", "ssh", "::1", 22, "root")),
        ("gpu1", Target("gpu1", "alias", "gpu1")),
        ("lab.gpu_box-2", Target("lab.gpu_box-2", "alias", "lab.gpu_box-2")),
    ],
)
def test_accepted_forms_parse(raw: str, expected: Target) -> None:
    assert parse_target(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "ssh:/x",
        "ssh://host:notaport",
        "ssh://host:0",
        "ssh://host:70000",
        "scp://host",
        "http://host:22",
        "ssh://",
        "ssh://user@",
        "user@host:22",
        "two words",
        "",
        "-oProxyCommand=x",
    ],
)
def test_garbage_is_refused_naming_the_field_and_the_forms(raw: str) -> None:
    with pytest.raises(BadTarget) as caught:
        parse_target(raw)
    message = str(caught.value)
    assert isinstance(caught.value, UserError)
    assert caught.value.exit_code == 2
    assert message.startswith("[host] target:")
    assert "ssh://user@host:port" in message and "local" in message


def test_open_host_picks_the_implementation() -> None:
    assert isinstance(open_host("local"), LocalHost)
    remote = open_host("ssh://u@h:2")
    assert isinstance(remote, SSHHost)
    assert remote.target == "ssh://u@h:2"
    with pytest.raises(BadTarget):
        open_host("ssh:/x")


def test_a_host_section_opens_the_host_it_names() -> None:
    assert isinstance(open_host_section(HostSection()), LocalHost)
    remote = open_host_section(
        HostSection(target="ssh://u@h:2", identity_file="/k", accept_new_host_key=True)
    )
    assert isinstance(remote, SSHHost) and remote.target == "ssh://u@h:2"
    with pytest.raises(BadTarget):
        open_host_section(HostSection(target="ssh:/x"))
