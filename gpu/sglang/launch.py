"""Start SGLang's HTTP server as `python -m sglang.launch_server` does, for a random-weight start.

A model folder holding only config.json (weights from `--load-format dummy`) has no tokenizer or
image-processor files. With `--skip-tokenizer-init` SGLang still builds the Hugging Face
processor of a multimodal checkpoint (Qwen3.5/3.6 are `...ForConditionalGeneration`), which
needs those files. This launcher skips only that step: requests send token ids, so nothing
reads the processor. The model, its vision tower and SGLang's memory settings are unchanged.
Set SPECPILOT_KEEP_MM_PROCESSOR=1 to build the processor anyway.
"""

import os
import sys


def _skip_processor_without_tokenizer() -> None:
    from sglang.srt.managers import tokenizer_manager

    manager = tokenizer_manager.TokenizerManager
    original = getattr(manager, "init_tokenizer_and_processor", None)
    if original is None:  # a release that builds the processor elsewhere: leave it alone
        return

    def init_tokenizer_and_processor(self):  # type: ignore[no-untyped-def]
        args = self.server_args
        if args.skip_tokenizer_init and self.model_config.is_multimodal:
            print("[launch.py] --skip-tokenizer-init on a multimodal model: no HF processor", flush=True)
            self.mm_processor = self.processor = self.tokenizer = None
            self.async_dynamic_batch_tokenizer = None
            return None
        return original(self)

    manager.init_tokenizer_and_processor = init_tokenizer_and_processor


if __name__ == "__main__":
    if os.environ.get("SPECPILOT_KEEP_MM_PROCESSOR") != "1":
        _skip_processor_without_tokenizer()
    from sglang.launch_server import run_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    try:
        from sglang.srt.plugins import load_plugins
    except ImportError:  # older releases have no plugin loader
        pass
    else:
        load_plugins()
    server_args = prepare_server_args(sys.argv[1:])
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
