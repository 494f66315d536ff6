"""No secret of a run in any file it writes or any line `up`, `status` and `down` print.

The stand-in engines echo their args the way the real ones do (SGLang's
`server_args=ServerArgs(..., api_key='...')`, vLLM's `non-default args: {...}`), so the
log lines `status` shows hold the key unless they are masked. vLLM reads VLLM_API_KEY,
so its key goes by environment and is in neither launch.sh nor /proc/PID/cmdline;
SGLang (0.5.10-0.5.23) reads `--api-key` from argv only, so there it stays in argv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specpilot.check.resolved import resolve
from specpilot.cli import cli
from specpilot.cli import commands as registry
from tests.launch.conftest import SpecFactory

TOKEN = "hf_PLANTEDtoken8f3a1"
API_KEY = "sk-PLANTED-key-77c1"
URL_PASSWORD = "pw-PLANTED-url-91d0"  # in a URL's userinfo, in an env value and an arg value


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("up", "status", "logs", "down"):
        monkeypatch.setitem(registry.COMMANDS, name, f"specpilot.cli.up:{name}")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_no_secret_in_any_file_or_output_of_a_run(
    engine: str, make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    name = f"secret-{engine}"
    make_spec(
        f"{engine}_ready",
        engine=engine,
        name=name,
        env={"HF_TOKEN": TOKEN, "HF_ENDPOINT": f"https://mirror:{URL_PASSWORD}@hub.example"},
        args=["--api-key", API_KEY, "--tokenizer", f"https://mirror:{URL_PASSWORD}@hub.example/tok"],
    )
    spec_path = str(tmp_path / f"{name}.toml")
    outputs: dict[str, str] = {}
    started = run("up", spec_path, "--json", "--force")
    outputs["up --json"] = started.output
    pid = json.loads(started.stdout)["pid"]
    try:
        assert started.exit_code == 0, started.output
        # SGLang reads its key from argv only: said under --json too, on stderr (once, not said)
        warned = "warning: --api-key stays in the engine's argv" in started.stderr
        assert warned == (engine == "sglang"), started.stderr
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert f"HF_TOKEN={TOKEN}".encode() in environ.split(b"\0")  # the engine got the real values
        assert f"HF_ENDPOINT=https://mirror:{URL_PASSWORD}@hub.example".encode() in environ.split(b"\0")
        if engine == "vllm":
            assert API_KEY.encode() not in cmdline
            assert f"VLLM_API_KEY={API_KEY}".encode() in environ.split(b"\0")
        else:
            assert API_KEY.encode() in cmdline.split(b"\0")  # SGLang reads no environment variable
        with (tmp_path / "state" / "runs" / name / "engine.log").open("a") as log:  # the shapes a log quotes
            log.write(f"headers: Authorization: Bearer {API_KEY}\n  api_key: {API_KEY}\n")
            log.write(f"pulling https://mirror:{URL_PASSWORD}@hub.example/tok\n")
        for argv in (["status", name, "-n", "100", "--json"], ["status", name, "-n", "100"], ["logs", name]):
            outputs[" ".join(argv)] = run(*argv).output
        shown = json.loads(outputs[f"status {name} -n 100 --json"])["last_lines"]
        echo = "api_key='***'" if engine == "sglang" else None
        assert echo is None or any(echo in line for line in shown), shown
    finally:
        outputs["down --json"] = run("down", name, "--json").output
    run_dir = tmp_path / "state" / "runs" / name  # a local run keeps its files under SPECPILOT_HOME
    files = [p for root in (run_home, tmp_path / "state") for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"launch.sh", "env", "spec.toml", "manifest.json", "state.json", "engine.log"} <= names, names
    for path in files:
        # the engine's own words (SGLang prints its args) and the lines planted above
        if path.name == "engine.log":
            continue
        text = path.read_bytes()
        assert TOKEN.encode() not in text and API_KEY.encode() not in text, path
        assert URL_PASSWORD.encode() not in text, path
    for what, text in outputs.items():
        if what == f"logs {name}":
            continue  # `logs` prints the engine's log as it is
        assert TOKEN not in text and API_KEY not in text and URL_PASSWORD not in text, what
    assert run_dir.is_dir()


@pytest.mark.parametrize(("engine", "warned"), [("sglang", True), ("vllm", False)])
def test_up_warns_of_a_key_left_in_argv(engine: str, warned: bool, make_spec: SpecFactory) -> None:
    """SGLang reads --api-key from argv only: the key is in /proc/PID/cmdline, and `up` says so
    with the file form; vLLM's goes by VLLM_API_KEY, so nothing to say."""
    from specpilot.launch.preflight import run_preflight

    spec = make_spec(f"{engine}_ready", engine=engine, args=["--api-key", API_KEY])
    said = [w for w in run_preflight(resolve(spec)).warnings if "--api-key" in w]
    if not warned:
        assert said == []
        return
    (line,) = said
    assert "/proc/PID/cmdline" in line and "reads no key from the environment" in line
    assert "the key under `api-key`" in line and "--config FILE" in line and API_KEY not in line


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["human", "json"])
def test_a_mistyped_secret_flag_keeps_its_value_out_of_up_s_fix(
    extra: list[str], make_spec: SpecFactory, tmp_path: Path, run_home: Path
) -> None:
    """`up` refuses `--api-ky KEY` before a start, with check's fix (`--api-key` in its place):
    the fix printed the key (`args: --api-key sk-...`), as `check`'s once did."""
    make_spec("vllm_ready", engine="vllm", name="typo", args=["--api-ky", API_KEY])
    result = run("up", str(tmp_path / "typo.toml"), *extra)
    assert result.exit_code == 1, result.output
    assert "--api-ky" in result.output and "--api-key" in result.output
    assert API_KEY not in result.output


def test_a_key_variable_the_key_flag_overrides_stays_out_of_the_run_s_files(
    make_spec: SpecFactory, run_home: Path, tmp_path: Path
) -> None:
    """vLLM's --api-key goes to the engine as VLLM_API_KEY; a spec setting that variable too
    (vLLM takes the flag's) had its own value written into the run's spec.toml."""
    overridden = "sk-PLANTED-env-key-3b9e"
    make_spec(
        "vllm_ready",
        engine="vllm",
        name="twokeys",
        env={"VLLM_API_KEY": overridden},
        args=["--api-key", API_KEY],
    )
    started = run("up", str(tmp_path / "twokeys.toml"), "--json")
    try:
        assert started.exit_code == 0, started.output
    finally:
        run("down", "twokeys")
    run_dir = tmp_path / "state" / "runs" / "twokeys"
    for path in run_dir.iterdir():
        if path.is_file() and not path.name.startswith("engine.log"):
            text = path.read_bytes()
            assert overridden.encode() not in text and API_KEY.encode() not in text, path


def test_up_warns_of_a_url_password_left_in_argv(make_spec: SpecFactory) -> None:
    """A URL's password in an ordinary engine arg reaches the engine through launch.sh's
    variable, so it is in /proc/PID/cmdline as SGLang's --api-key is: said as that one is."""
    from specpilot.launch.preflight import run_preflight

    url = f"https://mirror:{URL_PASSWORD}@hub.example/tok"
    spec = make_spec("vllm_ready", engine="vllm", args=["--tokenizer", url])
    (line,) = [w for w in run_preflight(resolve(spec)).warnings if "URL" in w]
    assert "the password of the URL in --tokenizer stays in the engine's argv" in line
    assert "/proc/PID/cmdline" in line and URL_PASSWORD not in line
