"""A stand-in engine: takes the engine's argv, prints a scenario's real log lines, ends as the
engine would (exit code, SIGKILL of its own group, serving, or hanging).

    python fake_engine.py --model-path M --host 127.0.0.1 --port 30000 ...
    env: SPECPILOT_FAKE_SCENARIO=<name in scenarios.SCENARIOS>
         SPECPILOT_FAKE_MARK=<file>   (optional: time.time() of the fatal line, for the bench;
                                      <file>.ended is written if the stand-in reaches its own end)
         SPECPILOT_FAKE_LINGER_S=<s>  (optional: stay alive this long after the last line)
         SPECPILOT_FAKE_TRIGGER=<file> (a scenario's after_ready lines are printed once it exists)
         SPECPILOT_FAKE_STUBBORN_CHILD=<file> (optional: one more helper in our group that
                                      ignores SIGTERM, as multiprocessing's resource_tracker
                                      does (vLLM's outlives a SIGKILLed engine); its pid goes to <file>)
         SPECPILOT_FAKE_BUSY=<file>   (optional: while it exists, /health and /v1/models answer
                                      only after 30 s, as an engine busy generating may)
         SPECPILOT_FAKE_ORPHAN=1      (optional: before ending, SIGKILL our parent (the launch
                                      watcher), so a non-reaping init adopts us and we end a zombie)
         SPECPILOT_FAKE_ANSWER_S=<s>  (optional: answer chat completions after this long, as
                                      tests/generate/fake_server.py does; else never answer)
         SPECPILOT_FAKE_TRUNCATE=<text> (optional: a prompt ending in <text> is answered as cut at
                                      max_tokens, finish_reason "length", as random weights are)
         SPECPILOT_FAKE_DIE_AFTER=<n> (optional: after the n-th answer, print the scenario's
                                      after_ready lines and SIGKILL our group, as SGLang's
                                      kill_process_tree does; with SPECPILOT_FAKE_DIE_ONCE=<file>
                                      only while that file is absent (it is written then; a
                                      "{port}" in its name is our port: once per server); with
                                      SPECPILOT_FAKE_DIE_UNLESS=<flag> not when argv has that flag)
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import SCENARIOS, Scenario, Step


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model-path", "--model", dest="model", default="model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--api-key", default=None)
    known, _ = parser.parse_known_args(argv)
    return known


def _serve(host: str, port: int, served: str) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            busy = os.environ.get("SPECPILOT_FAKE_BUSY")
            if busy and Path(busy).exists():
                time.sleep(30)
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": served}]}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            answer_s = os.environ.get("SPECPILOT_FAKE_ANSWER_S")
            if answer_s is None:
                time.sleep(3600)  # a request the engine never answers (it died): the client waits
                return
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(float(answer_s))
            _count_answer()
            prompt = str(request["messages"][-1]["content"])
            message = {"role": "assistant", "content": f"answer: {prompt}"}
            cut = os.environ.get("SPECPILOT_FAKE_TRUNCATE")
            truncated = bool(cut) and prompt.endswith(str(cut))
            if request.get("chat_template_kwargs", {}).get("enable_thinking"):
                message["reasoning_content"] = f"thinking about {prompt}"
            body = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": request["model"],
                    "choices": [
                        {
                            "index": 0,
                            # tests.generate.fake_server.answer_for, which the tests recompute
                            "message": message,
                            "finish_reason": "length" if truncated else "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt.split()),
                        "completion_tokens": 4,
                        "total_tokens": 9,
                    },
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_ANSWERS = [0]
_ANSWERS_LOCK = threading.Lock()
_PORT = [0]


def _should_die() -> bool:
    """SPECPILOT_FAKE_DIE_AFTER and its conditions (module docstring)."""
    once = os.environ.get("SPECPILOT_FAKE_DIE_ONCE")
    unless = os.environ.get("SPECPILOT_FAKE_DIE_UNLESS")
    if unless and unless in sys.argv:
        return False
    if once:
        marker = Path(once.replace("{port}", str(_PORT[0])))
        if marker.exists():
            return False
        marker.write_text(str(os.getpid()))
    return True


def _count_answer() -> None:
    after = os.environ.get("SPECPILOT_FAKE_DIE_AFTER")
    with _ANSWERS_LOCK:
        _ANSWERS[0] += 1
        if after is None or _ANSWERS[0] != int(after) or not _should_die():
            return
    scenario = SCENARIOS[os.environ["SPECPILOT_FAKE_SCENARIO"]]

    def die() -> None:
        for step in scenario.after_ready:
            sys.stdout.write(step.text.replace("{ts}", time.strftime("%Y-%m-%d %H:%M:%S")) + "\n")
        sys.stdout.flush()
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()


def _spawn_children(count: int) -> None:
    """Helper processes in our process group, as SGLang's scheduler/detokenizer are."""
    for _ in range(count):
        subprocess.Popen(
            [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
            stdin=subprocess.DEVNULL,
        )


#: multiprocessing.resource_tracker's main() ignores SIGINT and SIGTERM
#: (https://github.com/python/cpython/blob/main/Lib/multiprocessing/resource_tracker.py)
_STUBBORN = "import signal, time\nfor s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\nwhile True: time.sleep(1)"


def _spawn_stubborn(pid_file: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _STUBBORN], stdin=subprocess.DEVNULL)
    pid_file.write_text(str(child.pid))


def _after_ready(steps: tuple[Step, ...], trigger: Path) -> None:
    """Serve until the trigger file appears, then print the lines of a crash (and linger,
    as an engine whose API server outlives its dead core does)."""
    while not trigger.exists():
        time.sleep(0.02)
    mark = os.environ.get("SPECPILOT_FAKE_MARK")
    for step in steps:
        time.sleep(step.delay_s)
        sys.stdout.write(step.text + "\n")
        sys.stdout.flush()
        if step.fatal and mark:
            Path(mark).write_text(repr(time.time()))


def _orphan_self() -> None:
    """Lose the parent that would reap us; return once another process adopted us."""
    parent = os.getppid()
    os.kill(parent, signal.SIGKILL)
    while os.getppid() == parent:
        time.sleep(0.005)


def run(scenario: Scenario, args: argparse.Namespace) -> None:
    values = {
        "{host}": args.host,
        "{port}": str(args.port),
        "{pid}": str(os.getpid()),
        "{model}": args.model,
        "{api_key}": repr(args.api_key),
        "{api_key_arg}": "" if args.api_key is None else f", 'api_key': [{args.api_key!r}]",
    }
    mark = os.environ.get("SPECPILOT_FAKE_MARK")
    _spawn_children(scenario.children)
    escaped = os.environ.get("SPECPILOT_FAKE_SETSID_PID_FILE")
    if escaped:  # a helper in its own session, as an engine's daemonised worker is
        child = subprocess.Popen(
            [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        Path(escaped).write_text(str(child.pid))
    if os.environ.get("SPECPILOT_FAKE_STUBBORN_CHILD"):
        _spawn_stubborn(Path(os.environ["SPECPILOT_FAKE_STUBBORN_CHILD"]))
    server = None
    for step in scenario.steps:
        time.sleep(step.delay_s)
        if scenario.serve_before_ready and server is None and "Uvicorn running on" in step.text:
            server = _serve(args.host, args.port, args.served_model_name or args.model)
        text = step.text.replace("{ts}", time.strftime("%Y-%m-%d %H:%M:%S"))
        for key, value in values.items():
            text = text.replace(key, value)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        if step.fatal and mark:
            Path(mark).write_text(repr(time.time()))
    time.sleep(float(os.environ.get("SPECPILOT_FAKE_LINGER_S", "0")))
    if os.environ.get("SPECPILOT_FAKE_ORPHAN") == "1":
        _orphan_self()
    if mark:
        Path(mark + ".ended").write_text(scenario.end)
    if scenario.end == "exit":
        os._exit(scenario.exit_code)
    if scenario.end == "sigkill":
        os.killpg(os.getpgid(0), signal.SIGKILL)  # SGLang's kill_process_tree, itself included
    if scenario.end == "serve" and server is None:
        server = _serve(args.host, args.port, args.served_model_name or args.model)
    if scenario.after_ready and "SPECPILOT_FAKE_TRIGGER" in os.environ:
        _after_ready(scenario.after_ready, Path(os.environ["SPECPILOT_FAKE_TRIGGER"]))
    while True:  # serve or hang until signalled
        time.sleep(1)


def main() -> None:
    scenario = SCENARIOS[os.environ["SPECPILOT_FAKE_SCENARIO"]]
    args = _parse_args(sys.argv[1:])
    _PORT[0] = args.port
    run(scenario, args)


if __name__ == "__main__":
    main()
