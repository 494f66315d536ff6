"""Stand-in for `deep_gemm`, which the GPU carry leaves out.

SGLang imports it at module level from its DeepSeek sparse-attention backend, which the EAGLE v2
draft worker imports while capturing CUDA graphs; no model specpilot measures calls it
(SGLANG_ENABLE_JIT_DEEPGEMM=0 is set too). Any real use fails loudly.
"""


def __getattr__(name: str) -> object:
    raise AttributeError(f"deep_gemm is not carried to this machine (asked for {name!r})")
