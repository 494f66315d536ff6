"""Stand-in for Hugging Face `datasets`, which SGLang 0.5.17's bench_serving imports at start-up
(its MMMU loader) even for a local custom dataset; the H200 image and the carry lack it. Only
`sglang.bench_serving` runs with this folder on its path, never the server."""


def load_dataset(*args: object, **kwargs: object) -> object:
    raise RuntimeError("datasets is not installed here: use a local --dataset-path")
