"""Pipelines written the way users write them, kept apart from the lab's built-in workloads.

They exist to judge the prediction model and the verdicts on pipelines that did not shape them
(`bench/predict.py --pipelines`). Each module has a dataset factory and a model factory, named as plugins:

    tokenizer.py    pure-Python text tokenising (hashed words and bigrams) into an embedding + MLP
    spectrogram.py  numpy framing, FFT and a mel filterbank as a matrix product (OpenBLAS) into a small conv net
    storage.py      object-storage-like reads (a heavy-tailed lognormal latency, median 3 ms) + a light numpy decode
    features.py     tabular rows parsed and bucketed in Python into a logistic regression: a tiny step beside
                    its Python producer

None declares `thread_safe`, and none draws from the global random generators: each item's randomness comes
from a generator seeded by its own index, as a user's code often does.

    .venv/bin/python -m engine run --workload bench.pipelines.tokenizer:build \
        --model bench.pipelines.tokenizer:model --loader threads --workers 2
"""
