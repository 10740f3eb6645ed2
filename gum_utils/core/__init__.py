"""The training core: one run, RunConfig in, RunResult out (gum_utils.core.run.train)."""
