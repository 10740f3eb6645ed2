"""CGD's strong-Wolfe search on an ill-conditioned quadratic, in float32 and float64, beside scipy.

f(x) = x'Ax/2 - b'x, n = 50, eigenvalues of A from 1 to kappa = 1e4 (tests/test_cgd.spd_problem's
construction). Prints, per dtype, the steps to gradient norm 1e-4 (if reached), the gradient norm at
a few steps, closure evaluations in all and per step over the last 500 steps, and how many steps
stopped on a bracket below float resolution; then scipy.optimize.minimize(method="CG")'s iterations.

    python benchmarks/cgd_line_search.py [--steps 3000] [--beta pr+]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize

from gum_utils.optim.cgd import CGD

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import quadratic_closure  # noqa: E402 (the tests' quadratic, one copy)

N, LOG10_KAPPA, GTOL = 50, 4.0, 1e-4


def problem(seed=0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((N, N)))
    return q @ np.diag(np.logspace(0, LOG10_KAPPA, N)) @ q.T, rng.standard_normal(N)


def run_ours(a, b, dtype, steps, beta):
    x = torch.zeros(N, dtype=dtype, requires_grad=True)
    optimizer = CGD([x], beta=beta, line_search="strong_wolfe")
    closure = quadratic_closure(x, a, b, optimizer)

    norms, evals, reached = [], [], None
    for step in range(1, steps + 1):
        optimizer.step(closure)
        norms.append(float(x.grad.norm()))
        evals.append(optimizer.stats["n_evals"])
        if reached is None and norms[-1] <= GTOL:
            reached = step
    return norms, evals, reached, optimizer.stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--beta", default="pr+")
    args = parser.parse_args()
    a, b = problem()
    for dtype in (torch.float32, torch.float64):
        norms, evals, reached, stats = run_ours(a, b, dtype, args.steps, args.beta)
        marks = {s: f"{norms[s - 1]:.3g}" for s in (100, 200, 500, 1000, args.steps) if s <= args.steps}
        tail = evals[-500:]
        print(f"{dtype}: gradient norm <= {GTOL} at step {reached}; norms {marks}; "
              f"evals {sum(evals)} in all, {sum(tail) / len(tail):.2f}/step over the last {len(tail)}; "
              f"stalled steps {stats.get('n_stalled')}, restarts {stats['n_restarts']}")
    reference = minimize(lambda x: 0.5 * x @ a @ x - b @ x, np.zeros(N), jac=lambda x: a @ x - b,
                         method="CG", options=dict(gtol=GTOL, norm=2, maxiter=10 * args.steps))
    print(f"scipy CG: {reference.nit} iterations, {reference.nfev} evaluations, gradient norm "
          f"{np.linalg.norm(a @ reference.x - b):.3g}")


if __name__ == "__main__":
    main()
