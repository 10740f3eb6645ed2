"""CGD against the textbook (Nocedal & Wright, ch. 3 and 5), scipy, and its own contracts."""

import io

import numpy as np
import pytest
import torch
from scipy.optimize import minimize, rosen, rosen_der

from gum_utils.optim.cgd import CGD
from helpers import quadratic_closure

BETAS = ("pr+", "fr", "hs", "dy")
N = 20


def spd_problem(n=N, log10_condition=1.0, seed=0):
    """A = Q diag(eigenvalues) Q^T with eigenvalues spread from 1 to 10**log10_condition."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = q @ np.diag(np.logspace(0, log10_condition, n)) @ q.T
    b = rng.standard_normal(n)
    return a, b


def solve_quadratic(beta, line_search, max_steps, **options):
    a, b = spd_problem()
    x_star = np.linalg.solve(a, b)
    x = torch.zeros(N, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([x], beta=beta, line_search=line_search, **options)
    closure = quadratic_closure(x, a, b, optimizer)
    for steps in range(1, max_steps + 1):
        optimizer.step(closure)
        if np.linalg.norm(x.detach().numpy() - x_star) < 1e-6:
            return steps
    return None


# --- 1. convergence on a strictly convex quadratic -----------------------------------------

@pytest.mark.parametrize("beta", BETAS)
def test_quadratic_strong_wolfe_converges_in_about_n_steps(beta):
    # Textbook fact (N&W sec. 5.1): with exact line searches CG minimizes an n-dimensional
    # strictly convex quadratic in at most n steps; a strong Wolfe search (c2 = 0.1) is
    # inexact, so allow 2n.
    steps = solve_quadratic(beta, "strong_wolfe", max_steps=2 * N)
    print(f"strong_wolfe {beta}: {steps} steps (n = {N})")
    assert steps is not None and steps <= 2 * N


@pytest.mark.parametrize("beta", BETAS)
def test_quadratic_armijo_converges(beta):
    # Backtracking ignores curvature, so conjugacy is lost: only a looser bound holds.
    steps = solve_quadratic(beta, "armijo", max_steps=5 * N)
    print(f"armijo {beta}: {steps} steps (n = {N})")
    assert steps is not None


# --- 2. exact line search: nonlinear FR = linear CG --------------------------------------------

def linear_cg_iterates(a, b, x, steps):
    """Textbook linear CG (N&W Algorithm 5.2)."""
    r = a @ x - b
    p = -r
    iterates = []
    for _ in range(steps):
        alpha = (r @ r) / (p @ a @ p)
        x = x + alpha * p
        r_new = r + alpha * (a @ p)
        p = -r_new + (r_new @ r_new) / (r @ r) * p
        r = r_new
        iterates.append(x)
    return iterates


def test_exact_line_search_fletcher_reeves_is_linear_cg():
    a, b = spd_problem(log10_condition=2.0, seed=1)
    expected = linear_cg_iterates(a, b, np.zeros(N), steps=8)
    x = torch.zeros(N, dtype=torch.float64, requires_grad=True)
    # c2 = 1e-8 makes the search effectively exact; on a quadratic the cubic interpolant is phi itself.
    optimizer = CGD([x], lr=1.0, beta="fr", line_search="strong_wolfe", c1=1e-10, c2=1e-8)
    closure = quadratic_closure(x, a, b, optimizer)
    for want in expected:
        optimizer.step(closure)
        np.testing.assert_allclose(x.detach().numpy(), want, rtol=0, atol=1e-9)
    assert optimizer.stats["n_restarts"] == 0


# --- 3. Rosenbrock, against scipy ------------------------------------------------------------------

@pytest.mark.parametrize("beta", BETAS)
def test_rosenbrock_strong_wolfe_matches_scipy(beta):
    reference = minimize(rosen, [-1.2, 1.0], jac=rosen_der, method="CG")
    assert reference.success and np.allclose(reference.x, 1.0, atol=1e-4)

    x = torch.tensor([-1.2, 1.0], dtype=torch.float64, requires_grad=True)
    optimizer = CGD([x], lr=1e-3, beta=beta, line_search="strong_wolfe")
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        optimizer.zero_grad()
        loss = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
        loss.backward()
        return loss

    steps = None
    for step in range(1, 501):
        optimizer.step(closure)
        if x.grad.abs().max() <= 1e-5:  # scipy's default gtol, same infinity norm
            steps = step
            break
    print(f"rosenbrock {beta}: ours {steps} steps / {calls} evals, scipy {reference.nit} / {reference.nfev}")
    assert steps is not None and steps <= 3 * reference.nit + 20
    assert calls == optimizer.stats["total_evals"]
    assert np.allclose(x.detach().numpy(), 1.0, atol=1e-4)
    assert float(closure().detach()) < 1e-8


# --- 4. restart rules (fixed-step mode, gradients set by hand) -----------------------------------

def hand_step(optimizer, param, grad):
    param.grad = torch.tensor(grad, dtype=torch.float64)
    optimizer.step()
    return optimizer.state[param]["direction"].clone()


@pytest.mark.parametrize("beta", ["pr+", "hs"])
def test_negative_beta_restarts(beta):
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta=beta, restart_every=100)
    hand_step(optimizer, p, [1.0, 0.0])
    assert optimizer.stats["restart_reason"] == "first step" and optimizer.stats["n_restarts"] == 0
    # g2.(g2 - g1) = 0.25 - 0.5 < 0, so PR < 0; HS too, as d1.(g2 - g1) = 0.5 > 0.
    d = hand_step(optimizer, p, [0.5, 0.0])
    assert torch.equal(d, torch.tensor([-0.5, 0.0], dtype=torch.float64))
    assert optimizer.stats["restart_reason"] == "negative beta" and optimizer.stats["n_restarts"] == 1


def test_non_descent_direction_restarts():
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta="fr", restart_every=100)
    hand_step(optimizer, p, [1.0, 0.0])
    # FR beta = |g2|^2 / |g1|^2 = 4.01 > 0, but g2.d = -4.01 + 4.01 * g2.d1 = -4.01 + 4.01 * 2 > 0.
    d = hand_step(optimizer, p, [-2.0, 0.1])
    assert torch.equal(d, torch.tensor([2.0, -0.1], dtype=torch.float64))
    assert optimizer.stats["restart_reason"] == "not a descent direction" and optimizer.stats["n_restarts"] == 1


def test_restart_every_k_steps():
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta="fr", restart_every=3)
    g = [1.0, 1.0]  # a constant gradient: FR beta = 1, d_k = -k g, always a descent direction
    multiples = [float(-hand_step(optimizer, p, g)[0]) for _ in range(10)]
    assert multiples == [1, 2, 3, 1, 2, 3, 1, 2, 3, 1]
    assert optimizer.stats["n_restarts"] == 3 and optimizer.stats["restart_reason"] == "schedule"


def test_default_restart_every_is_the_number_of_elements():
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta="fr")
    multiples = [float(-hand_step(optimizer, p, [1.0, 1.0, 1.0])[0]) for _ in range(7)]
    assert multiples == [1, 2, 3, 1, 2, 3, 1]


# --- 5. fixed step = the hand formulas --------------------------------------------------------------

def textbook_beta(rule, g, g_prev, d_prev):
    """FR, PR+, HS as in N&W sec. 5.2; Dai & Yuan (1999): g.g / d_prev.y."""
    y = g - g_prev
    return {
        "fr": (g @ g) / (g_prev @ g_prev),
        "pr+": max(0.0, (g @ y) / (g_prev @ g_prev)),
        "hs": (g @ y) / (d_prev @ y),
        "dy": (g @ g) / (d_prev @ y),
    }[rule]


@pytest.mark.parametrize("beta", BETAS)
def test_fixed_step_matches_hand_formula(beta):
    lr = 0.1
    # Two parameter tensors: the dot products must run over their concatenation.
    a = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([a, b], lr=lr, beta=beta, restart_every=100)
    grads = [np.array([1.0, 0.0, 0.5, -1.0, 0.0]),
             np.array([0.3, 1.0, 0.2, -0.4, 0.7]),
             np.array([-0.2, 0.9, 0.6, 0.1, 0.5])]
    d = None
    for g_prev, g in zip([None] + grads, grads):
        before = np.concatenate([a.detach().numpy(), b.detach().numpy()])
        a.grad, b.grad = torch.tensor(g[:2]), torch.tensor(g[2:])
        optimizer.step()
        after = np.concatenate([a.detach().numpy(), b.detach().numpy()])
        if d is None:
            d = -g
        else:
            beta_value = textbook_beta(beta, g, g_prev, d)
            d = -g + beta_value * d
            assert beta_value > 0 and g @ d < 0  # guards the test: no restart happens here
        np.testing.assert_allclose(after - before, lr * d, rtol=1e-12, atol=1e-15)
    assert optimizer.stats["n_restarts"] == 0


# --- 6. memory: state is exactly 2x the parameters ------------------------------------------------

@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_state_is_twice_the_parameter_bytes(line_search):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    inputs, targets = torch.randn(16, 4), torch.randn(16, 2)
    optimizer = CGD(model.parameters(), line_search=line_search)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        return loss

    for _ in range(2):
        optimizer.step(closure)
    state_tensors = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    parameter_bytes = sum(p.nbytes for p in model.parameters())
    assert sum(t.nbytes for t in state_tensors) == 2 * parameter_bytes
    assert all(set(optimizer.state[p]) == {"prev_grad", "direction"} for p in model.parameters())
    scalars = optimizer.state["global"]
    assert not any(isinstance(v, torch.Tensor) for v in scalars.values())
    assert isinstance(scalars["n_evals"], int) and isinstance(scalars["n_restarts"], int)


def test_state_dict_round_trip():
    p = torch.zeros(3, requires_grad=True)
    optimizer = CGD([p], beta="fr")
    for g in ([1.0, 2.0, 3.0], [0.5, 1.0, 1.0]):
        p.grad = torch.tensor(g)
        optimizer.step()
    twin_p = p.detach().clone().requires_grad_()
    twin = CGD([twin_p], beta="fr")
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    twin.load_state_dict(torch.load(buffer))  # weights_only: the scalars must be plain Python
    for opt, param in ((optimizer, p), (twin, twin_p)):
        param.grad = torch.tensor([0.2, 0.1, 0.3])
        opt.step()
    assert torch.equal(p, twin_p)
    assert twin.stats == optimizer.stats


# --- 7. bad arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(beta="polak"), "pr\\+, fr, hs, dy"),
    (dict(line_search="wolfe"), "None, armijo, strong_wolfe"),
    (dict(lr=0.0), "lr"),
    (dict(lr=-1.0), "lr"),
    (dict(c1=0.5, c2=0.1), "c1 < c2"),
    (dict(c2=1.0), "c1 < c2"),
    (dict(restart_every=0), "restart_every"),
    (dict(restart_every=2.5), "restart_every"),
    (dict(max_evals=1), "max_evals"),
    (dict(tolerance_grad=-1.0), "tolerance_grad"),
    (dict(same_batch_y=1), "same_batch_y"),
    (dict(same_batch_y=True, line_search="armijo"), "same_batch_y"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CGD([torch.zeros(2, requires_grad=True)], **kwargs)


def test_only_one_param_group():
    groups = [{"params": [torch.zeros(2, requires_grad=True)]}, {"params": [torch.zeros(2, requires_grad=True)]}]
    with pytest.raises(ValueError, match="one parameter group"):
        CGD(groups)


@pytest.mark.parametrize("line_search", ["armijo", "strong_wolfe"])
def test_line_search_needs_a_closure(line_search):
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="closure"):
        CGD([p], line_search=line_search).step()


# --- line-search bookkeeping ------------------------------------------------------------------------

def test_line_search_leaves_gradient_of_accepted_point_and_reuses_it():
    a, b = spd_problem()
    x = torch.zeros(N, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([x], line_search="strong_wolfe")
    inner = quadratic_closure(x, a, b, optimizer)
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        return inner()

    first_loss = optimizer.step(closure)
    assert float(first_loss.detach()) == 0.0  # the loss at the starting point x = 0
    accepted_grad = x.grad.clone()
    expected = torch.tensor(a) @ x.detach() - torch.tensor(b)
    torch.testing.assert_close(accepted_grad, expected)
    calls_after_first = calls
    optimizer.step(closure)
    assert calls - calls_after_first == optimizer.stats["n_evals"]  # no extra call at the same point
    assert calls == optimizer.stats["total_evals"] and optimizer.stats["n_evals"] <= optimizer.defaults["max_evals"]
    optimizer.zero_grad()  # touching the gradients forces a fresh evaluation
    before = calls
    optimizer.step(closure)
    assert calls - before == optimizer.stats["n_evals"] and optimizer.stats["n_evals"] >= 2
    before = calls
    optimizer.step(lambda: closure())  # so does a new closure (new data, as in the training loop)
    assert calls - before == optimizer.stats["n_evals"] and optimizer.stats["n_evals"] >= 2


def test_failed_line_search_falls_back():
    a, b = spd_problem()
    x = torch.zeros(N, dtype=torch.float64, requires_grad=True)
    # Two evaluations: the start and one trial; t0 = lr = 100 overshoots, nothing else can be tried.
    optimizer = CGD([x], lr=100.0, line_search="strong_wolfe", max_evals=2)
    closure = quadratic_closure(x, a, b, optimizer)
    optimizer.step(closure)
    assert optimizer.stats["line_search_failed"] and optimizer.stats["n_evals"] == 2
    # Back at the start (up to the rounding of moving there and back: x0 is not copied) ...
    torch.testing.assert_close(x.detach(), torch.zeros(N, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(x.grad, -torch.tensor(b))  # ... with the gradient there
    optimizer.param_groups[0]["lr"] = 1e-3
    optimizer.step(closure)  # a short step: sufficient decrease, but not the curvature condition
    assert optimizer.stats["restart_reason"] == "line search failed" and optimizer.stats["line_search_failed"]
    assert x.abs().min() > 1e-8  # kept the sufficient-decrease point ...
    torch.testing.assert_close(x.grad, torch.tensor(a) @ x.detach() - torch.tensor(b))  # ... and its gradient


def test_small_gradient_stops_without_update():
    p = torch.ones(3, requires_grad=True)
    optimizer = CGD([p], tolerance_grad=1e-6)
    p.grad = torch.full((3,), 1e-7)
    optimizer.step()
    assert torch.equal(p, torch.ones(3)) and "direction" not in optimizer.state[p]


# --- 8. a small regression with fixed steps --------------------------------------------------------

def test_fixed_step_trains_linear_regression():
    model = torch.nn.Linear(5, 1)
    inputs = torch.randn(64, 5)
    targets = inputs @ torch.randn(5, 1) + 0.1 * torch.randn(64, 1)
    optimizer = CGD(model.parameters(), lr=0.05)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        return loss

    losses = [float(optimizer.step(closure).detach()) for _ in range(50)]
    print(f"linear regression: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert losses[-1] < 0.1 * losses[0]


# --- 9. float resolution: an ill-conditioned quadratic (kappa = 1e4, n = 50) -------------------------

KAPPA_N, GTOL = 50, 1e-4


def ill_conditioned_run(dtype, max_steps, stop_at_gtol=False):
    """Strong-Wolfe PR+ CGD from x = 0; per step (gradient norm, step record)."""
    a, b = spd_problem(n=KAPPA_N, log10_condition=4.0)
    x = torch.zeros(KAPPA_N, dtype=dtype, requires_grad=True)
    optimizer = CGD([x], line_search="strong_wolfe")
    closure = quadratic_closure(x, a, b, optimizer)
    history = []
    for _ in range(max_steps):
        optimizer.step(closure)
        history.append((float(x.grad.norm()), optimizer.step_record()))
        if stop_at_gtol and history[-1][0] <= GTOL:
            break
    return history, optimizer, (a, b)


def test_ill_conditioned_float64_keeps_pace_with_scipy():
    history, _, (a, b) = ill_conditioned_run(torch.float64, max_steps=2000, stop_at_gtol=True)
    reference = minimize(lambda v: 0.5 * v @ a @ v - b @ v, np.zeros(KAPPA_N), jac=lambda v: a @ v - b,
                         method="CG", options=dict(gtol=GTOL, norm=2, maxiter=10_000))
    assert reference.success
    print(f"kappa 1e4 float64: ours {len(history)} steps, scipy {reference.nit}")
    assert history[-1][0] <= GTOL and len(history) <= 1.1 * reference.nit


def test_ill_conditioned_float32_stalls_without_wasting_evaluations():
    # float32 cannot resolve this problem's line searches from about step 200 on (gradient norm
    # ~0.2): each search used to spend all max_evals = 25 evaluations narrowing its bracket to 1e-15.
    history, optimizer, _ = ill_conditioned_run(torch.float32, max_steps=500)
    tail = [record for _, record in history[-100:]]
    print(f"kappa 1e4 float32: gradient norm {history[-1][0]:.3g}, "
          f"{np.mean([r['n_evals'] for r in tail]):.2f} evals/step over the last 100 steps")
    assert history[-1][0] > 1e-2  # the stall is float32's: no search gets below it
    assert np.mean([r["n_evals"] for r in tail]) <= 5
    stalled = [record["line_search_stalled"] for _, record in history]
    assert sum(stalled) == optimizer.stats["n_stalled"] and sum(stalled[-100:]) >= 90
    assert all(r["restarted"] and r["beta"] is None for r, s in zip(tail[1:], stalled[-100:-1]) if s)


# --- 10. the per-step record ------------------------------------------------------------------------

def test_step_record_beta_and_restarts_by_hand():
    # PR+: beta = g.(g - g_prev) / |g_prev|^2, exact in binary for these gradients:
    # (1,1).(0,1)/1 = 1; (0,2).(-1,1)/2 = 1; (1,0).(1,-2)/4 = 0.25; (.5,0).(-.5,0)/1 < 0: restart.
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta="pr+", restart_every=100)
    gradients = [[1.0, 0.0], [1.0, 1.0], [0.0, 2.0], [1.0, 0.0], [0.5, 0.0]]
    records = []
    for g in gradients:
        hand_step(optimizer, p, g)
        records.append(optimizer.step_record())
    assert [r["beta"] for r in records] == [None, 1.0, 1.0, 0.25, None]
    assert [r["restart_reason"] for r in records] == ["first step", None, None, None, "negative beta"]
    assert [r["restarted"] for r in records] == [True, False, False, False, True]
    assert all(r["n_evals"] == 0 and r["line_search_stalled"] is False for r in records)
    assert optimizer.stats["n_restarts"] == 1 and optimizer.stats["n_stalled"] == 0


def test_step_record_of_a_step_stopped_by_the_gradient_tolerance():
    p = torch.ones(2, dtype=torch.float64, requires_grad=True)
    optimizer = CGD([p], beta="fr", tolerance_grad=1e-6)
    hand_step(optimizer, p, [1.0, 1.0])
    hand_step(optimizer, p, [1.0, 1.0])
    assert optimizer.step_record()["beta"] == 1.0
    hand_step(optimizer, p, [1e-7, 0.0])  # no update: neither a beta nor a restart
    assert optimizer.step_record() == dict(beta=None, restarted=False, restart_reason=None, n_evals=0,
                                           line_search_stalled=False)


def test_state_dict_from_before_the_step_record_loads():
    p = torch.zeros(2, requires_grad=True)
    optimizer = CGD([p], beta="fr")
    hand_step_float32 = torch.tensor([1.0, 2.0])
    p.grad = hand_step_float32
    optimizer.step()
    saved = optimizer.state_dict()
    for key in ("beta", "n_stalled", "line_search_stalled"):  # the keys this record added
        del saved["state"]["global"][key]
    twin = CGD([p.detach().clone().requires_grad_()], beta="fr")
    twin.load_state_dict(saved)
    assert twin.stats["n_stalled"] == 0 and twin.step_record()["beta"] is None


# --- 11. same_batch_y: y from one batch (fixed step) --------------------------------------------------

def least_squares_closure(x, optimizer, rows, targets):
    def closure():
        optimizer.zero_grad()
        loss = 0.5 * torch.sum((rows @ x - targets) ** 2)
        loss.backward()
        return loss

    return closure


def test_same_batch_y_takes_both_gradients_on_the_new_batch():
    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((6, 4)), rng.standard_normal(6)) for _ in range(2)]
    lr, x0 = 0.1, rng.standard_normal(4)
    x = torch.tensor(x0, requires_grad=True)
    optimizer = CGD([x], lr=lr, beta="pr+", same_batch_y=True, restart_every=100)
    for a, b in batches:
        optimizer.step(least_squares_closure(x, optimizer, torch.tensor(a), torch.tensor(b)))
    # By hand: step 1 on batch 1 from x0; step 2's y compares batch 2's gradients at x1 and at x0.
    gradient = [lambda v, a=a, b=b: a.T @ (a @ v - b) for a, b in batches]
    d1 = -gradient[0](x0)
    x1 = x0 + lr * d1
    g, g_prev = gradient[1](x1), gradient[1](x0)
    beta = g @ (g - g_prev) / (g_prev @ g_prev)
    assert beta > 0 and g @ (-g + beta * d1) < 0  # guards the test: no restart
    record = optimizer.step_record()
    assert record["beta"] == pytest.approx(beta, rel=1e-12) and record["n_evals"] == 2
    np.testing.assert_allclose(x.detach().numpy(), x1 + lr * (-g + beta * d1), rtol=1e-12, atol=1e-14)


def test_same_batch_y_on_one_batch_is_the_default():
    # With one batch every step, g_prev on "this batch" is the stored g_prev: same iterates.
    a, b = spd_problem()
    rows, targets = torch.tensor(a), torch.tensor(b)
    iterates = []
    for same_batch_y in (False, True):
        x = torch.zeros(N, dtype=torch.float64, requires_grad=True)
        optimizer = CGD([x], lr=0.01, same_batch_y=same_batch_y)
        closure = least_squares_closure(x, optimizer, rows, targets)
        for _ in range(10):
            optimizer.step(closure)
        iterates.append(x.detach().clone())
    torch.testing.assert_close(iterates[1], iterates[0], rtol=1e-9, atol=1e-12)


def test_same_batch_y_needs_a_closure():
    p = torch.zeros(2, requires_grad=True)
    optimizer = CGD([p], same_batch_y=True)
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="closure"):
        optimizer.step()


def _armijo_history(*idle):
    """Armijo CGD on a small quadratic over x, with `idle` parameters that are not in the loss."""
    a, b = spd_problem(n=10, log10_condition=1.0)
    x = torch.zeros(10, dtype=torch.float32, requires_grad=True)
    optimizer = CGD([x, *idle], line_search="armijo")
    closure = quadratic_closure(x, a, b, optimizer)
    return [(optimizer.step(closure).item(), x.detach().clone(), optimizer.step_record()) for _ in range(12)]


def test_a_large_parameter_that_does_not_move_does_not_stall_the_others():
    """The resolution bound is per element: a parameter of 1e8 with zero gradient (its direction 0)
    leaves the search exactly as without it (a bound eps max|x| / max|d| over all tensors stalled
    every search from the sixth step on)."""
    idle = torch.full((3,), 1e8, requires_grad=True)
    alone, beside = _armijo_history(), _armijo_history(idle)
    for (loss, x, record), (loss_beside, x_beside, record_beside) in zip(alone, beside):
        assert loss == loss_beside and torch.equal(x, x_beside) and record == record_beside
    assert not any(record["line_search_stalled"] for _, _, record in beside)
    assert torch.equal(idle.detach(), torch.full((3,), 1e8))
