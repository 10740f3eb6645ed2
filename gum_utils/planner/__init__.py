"""The memory planner: will a training step fit, and what fits a budget, without allocating it.

    trace.py         `plan(config)`: the step traced on fake tensors with PyTorch's MemTracker
    reference.py     `measured_peak(config)`: the same step run for real, the instrument it is checked against
    search.py        the largest micro-batch per strategy within a budget; changes that would fit
    record.py        a run's plan and reference peak, once per configuration, for its summary
    cache.py         the folder of plans (torch-free: the grid checks it before its first cell)
    model_config.py  a reader's own transformers config.json

It sits above the training core (it builds a run's model, optimizer and strategy as a run does)
and below the study, which records its plans; the command line is `python -m gum_utils.plan`.
"""
