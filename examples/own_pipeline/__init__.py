"""A user's own pipeline, measured by LoaderLab: an ImageFolder-style dataset and a small ResNet.

    data.py     build(...) -> FolderImages: JPEGs in class folders, its own PIL/numpy augmentations
    nets.py     resnet(...) -> an nn.Sequential ResNet with GroupNorm (so split can cut it, fused can vmap it)
    sweep.toml  loaders x workers over this pipeline

From the checkout's root (the current directory is on the import path, as for `python -m`):

    .venv/bin/python -m engine run --workload examples.own_pipeline.data:build \
        --model examples.own_pipeline.nets:resnet --loader threads --workers 2
    .venv/bin/python -m engine sweep examples/own_pipeline/sweep.toml
"""
