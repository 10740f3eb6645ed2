"""Nonlinear conjugate gradient descent (CGD) as a torch optimizer.

Directions d = -g + beta * d_prev, with beta from one of four textbook formulas, and
either a fixed step (one stochastic gradient per step, like SGD) or a line search on a
closure (like torch.optim.LBFGS): Armijo backtracking or strong Wolfe, following
Nocedal & Wright, Numerical Optimization, 2nd ed., ch. 3 and 5.

All parameters form one vector for the dot products, but the state stays per tensor:
state[p] holds exactly "prev_grad" and "direction" (2x the parameter bytes); the scalar
bookkeeping lives in state["global"] as plain Python numbers. Under FSDP2 (parameters are
DTensor shards) the dot products and norms combine the ranks' parts, so every rank agrees.
"""

import math
import weakref
from functools import reduce

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..choices import check_choice, require as _require

BETA_RULES = ("pr+", "fr", "hs", "dy")
LINE_SEARCHES = (None, "armijo", "strong_wolfe")
ARMIJO_SHRINK = 0.5
ARMIJO_GROWTH = 2.0         # backtracking only shrinks, so its first trial must be able to grow the step
ZOOM_MARGIN = 0.1           # keep interpolated trials this fraction of the bracket away from its ends
EXTRAPOLATE = (1.1, 10.0)   # while bracketing, the next trial lies in [1.1 t, 10 t]
STEP_RATIO_BOUNDS = (1e-2, 1e2)  # bounds on the N&W initial-step ratio, so one odd slope cannot blow t up
_FRESH_STATS = dict(step=0, n_evals=0, total_evals=0, n_restarts=0, since_restart=0, restart_reason=None,
                    beta=None, last_move=0.0, line_search_failed=False, line_search_stalled=False, n_stalled=0,
                    t=None, slope=None)  # t, slope: last accepted step, for t0
# What one step did, for a per-step training record; restart_reason is None when the step used beta.
STEP_RECORD_KEYS = ("beta", "restarted", "restart_reason", "n_evals", "line_search_stalled")


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """What this process holds of a tensor: under FSDP2 a parameter is a DTensor, and that is its shard."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _dot(xs, ys) -> float:
    """Dot product of two tensor lists seen as flat vectors, without flattening copies."""
    total = torch.zeros((), dtype=torch.float64, device=local_shard(xs[0]).device)
    for x, y in zip(xs, ys):
        total += torch.dot(local_shard(x).reshape(-1), local_shard(y).reshape(-1)).to(total)
    return float(_over_shards(total, xs, dist.ReduceOp.SUM))


def _max_abs(xs) -> float:
    norms = torch._foreach_norm([local_shard(x) for x in xs], math.inf)
    return float(_over_shards(reduce(torch.maximum, [n.to(norms[0].device) for n in norms]), xs, dist.ReduceOp.MAX))


def _over_shards(value: torch.Tensor, xs, op) -> torch.Tensor:
    """Combine the ranks' parts when the tensors are FSDP2 shards (DTensors), so every rank
    gets the same number and takes the same decision; plain tensors are whole already."""
    sharded = [isinstance(x, DTensor) for x in xs]
    if not any(sharded):
        return value
    if not all(sharded):
        raise RuntimeError("CGD needs all its parameters sharded alike (all DTensors, or none)")
    dist.all_reduce(value, op=op, group=xs[0].device_mesh.get_group())
    return value


def _cubic_minimizer(t1, f1, s1, t2, f2, s2):
    """Minimizer of the cubic matching f and slope s at t1 and t2 (N&W sec. 3.5), or None."""
    d1 = s1 + s2 - 3 * (f1 - f2) / (t1 - t2)
    disc = d1 * d1 - s1 * s2
    if not math.isfinite(disc) or disc < 0:
        return None
    d2 = math.copysign(math.sqrt(disc), t2 - t1)
    denom = s2 - s1 + 2 * d2
    t = t2 - (t2 - t1) * (s2 + d2 - d1) / denom if denom != 0 else math.nan
    return t if math.isfinite(t) else None


def _zoom_trial(lo, hi):
    """Cubic interpolation inside the bracket, kept off its ends; bisection if the cubic fails."""
    a, b = min(lo[0], hi[0]), max(lo[0], hi[0])
    t = _cubic_minimizer(*lo, *hi)
    if t is None or not a < t < b:
        return (a + b) / 2
    margin = ZOOM_MARGIN * (b - a)
    return min(max(t, a + margin), b - margin)


def _extrapolation_trial(prev, cur):
    """Next bracketing trial beyond t = cur[0]: the cubic's minimizer, bounded in [1.1 t, 10 t]."""
    t = _cubic_minimizer(*prev, *cur)
    low, high = EXTRAPOLATE[0] * cur[0], EXTRAPOLATE[1] * cur[0]
    return high if t is None else min(max(t, low), high)


def _resolution_step(params, directions) -> float:
    """The step length below which x + t d rounds to x in every element, in the parameters' dtype: like
    scipy's xtol, but from the dtype's eps and element by element, min over i of eps |x_i| / |d_i| (0
    where a moving element is 0). An element that does not move (d_i = 0) bounds nothing, however large."""
    bounds = []
    for x, d in zip(params, directions):
        x, d = local_shard(x).detach(), local_shard(d)
        ratio = d.abs().reciprocal_().mul_(x.abs()).nan_to_num_(nan=math.inf, posinf=math.inf)  # 0/0: never moves
        bounds.append(torch.finfo(x.dtype).eps * ratio.amin() if ratio.numel() else torch.tensor(math.inf))
    smallest = reduce(torch.minimum, [b.to(bounds[0].device) for b in bounds])
    smallest = float(_over_shards(smallest, params, dist.ReduceOp.MIN))
    return smallest if math.isfinite(smallest) else 0.0


class _Line:
    """phi(t) = f(x + t d) and its slope g(x + t d).d, moving the parameters in place.

    Moving by increments avoids keeping a copy of x (memory); the rounding drift is
    one add per trial. The budget keeps one evaluation back so a failed search can
    always return to its best point and restore the gradient there.
    """

    def __init__(self, optimizer, closure, directions, budget):
        self.opt, self.closure, self.d, self.budget = optimizer, closure, directions, budget
        self.t, self.evals, self.loss = 0.0, 0, None
        self.stalled, self.unresolved_step = False, None  # the far end of the bracket it gave up on
        self.min_step = _resolution_step(optimizer._params, directions)
        self.f_eps = None  # the loss dtype's eps, set by the first evaluation

    def unresolved(self, a, b) -> bool:
        """True (and the search marked stalled) when the bracket between trials a and b can no
        longer change x, or f by more than its rounding, representably: a further trial is waste."""
        width = abs(b[0] - a[0])
        f_change = width * max(abs(a[2]), abs(b[2]))  # first-order change of f across the bracket
        self.stalled = (width <= 1e-15 * max(a[0], b[0]) or width <= self.min_step
                        or f_change <= self.f_eps * max(abs(a[1]), abs(b[1])))
        self.unresolved_step = max(a[0], b[0])
        return self.stalled

    def move_to(self, t):
        if t != self.t:
            torch._foreach_add_(self.opt._params, self.d, alpha=t - self.t)
            self.t = t

    def __call__(self, t):
        self.move_to(t)
        self.loss = self.opt._evaluate(self.closure)
        self.evals += 1
        if self.f_eps is None:
            self.f_eps = _float_eps(self.loss)
        f = _as_float(self.loss)
        return (t, f if math.isfinite(f) else math.inf, _dot(self.opt._gradients(), self.d))

    def can_try(self, best):
        left = self.budget - self.evals
        return left >= 2 or (left == 1 and best is None)


def _armijo(line, f0, s0, t, c1, c2):
    """Backtracking: shrink t until sufficient decrease f(x+td) <= f0 + c1 t g.d."""
    while line.can_try(None):
        cur = line(t)
        if cur[1] <= f0 + c1 * t * s0:
            return t, None
        if line.unresolved((0.0, f0, s0), cur):  # shorter steps cannot show a representable decrease
            break
        t *= ARMIJO_SHRINK
    return None, None


def _strong_wolfe(line, f0, s0, t, c1, c2):
    """N&W Algorithm 3.5: grow t until a bracket holds a strong Wolfe point, then zoom.

    Returns (accepted t or None, best point satisfying sufficient decrease or None).
    """
    prev, best = (0.0, f0, s0), None
    while line.can_try(best):
        cur = line(t)
        sufficient = cur[1] <= f0 + c1 * t * s0
        if sufficient and (best is None or cur[1] < best[1]):
            best = cur
        if not sufficient or (prev[0] > 0 and cur[1] >= prev[1]):
            return _zoom(line, f0, s0, prev, cur, c1, c2, best)
        if abs(cur[2]) <= -c2 * s0:
            return t, best
        if cur[2] >= 0:
            return _zoom(line, f0, s0, cur, prev, c1, c2, best)
        prev, t = cur, _extrapolation_trial(prev, cur)
    return None, best


def _zoom(line, f0, s0, lo, hi, c1, c2, best):
    """N&W Algorithm 3.6; lo has sufficient decrease and the lowest f seen in the bracket."""
    while line.can_try(best) and not line.unresolved(lo, hi):
        cur = line(_zoom_trial(lo, hi))
        t, f, s = cur
        if f > f0 + c1 * t * s0 or f >= lo[1]:
            hi = cur
            continue
        if best is None or f < best[1]:
            best = cur
        if abs(s) <= -c2 * s0:
            return t, best
        if s * (hi[0] - lo[0]) >= 0:
            hi = lo
        lo = cur
    return None, best


class CGD(torch.optim.Optimizer):
    """Nonlinear conjugate gradient descent over exactly one parameter group.

    beta: "pr+" (Polak-Ribiere+), "fr" (Fletcher-Reeves), "hs" (Hestenes-Stiefel), "dy" (Dai-Yuan).
    line_search: None (fixed step p += lr d on the gradients already in p.grad), "armijo" or
    "strong_wolfe" (step(closure) searches along d, at most max_evals closure calls per step).
    The direction restarts at -g on the first step, when beta < 0 or is undefined, when d is not
    a descent direction, after a failed line search, and every `restart_every` steps (None:
    every n steps, n = number of parameter elements, the textbook choice).

    With a line search, a step reuses the previous step's final evaluation (loss and p.grad)
    only when it gets the very same closure object and neither the parameters nor their
    gradients changed since; pass a new closure (or call zero_grad()) when the data changes.
    """

    def __init__(self, params, lr=1e-2, beta="pr+", line_search=None, restart_every=None,
                 c1=1e-4, c2=0.1, max_evals=25, tolerance_grad=1e-10, same_batch_y=False):
        check_choice("beta rule", beta, BETA_RULES)
        check_choice("line search", line_search, LINE_SEARCHES)
        _require(_is_number(lr) and lr > 0, f"lr must be a number > 0, got {lr!r}")
        _require(_is_number(c1) and _is_number(c2) and 0 < c1 < c2 < 1,
                 f"need 0 < c1 < c2 < 1 (Wolfe constants), got c1={c1!r}, c2={c2!r}")
        _require(restart_every is None or (_is_int(restart_every) and restart_every >= 1),
                 f"restart_every must be None or an int >= 1, got {restart_every!r}")
        _require(_is_int(max_evals) and max_evals >= 2, f"max_evals must be an int >= 2, got {max_evals!r}")
        _require(_is_number(tolerance_grad) and tolerance_grad >= 0,
                 f"tolerance_grad must be a number >= 0, got {tolerance_grad!r}")
        _require(isinstance(same_batch_y, bool) and not (same_batch_y and line_search is not None),
                 f"same_batch_y must be True or False, and True only with line_search=None, got {same_batch_y!r}")
        defaults = dict(lr=lr, beta=beta, line_search=line_search, restart_every=restart_every,
                        c1=c1, c2=c2, max_evals=max_evals, tolerance_grad=tolerance_grad, same_batch_y=same_batch_y)
        super().__init__(params, defaults)
        self._params = self.param_groups[0]["params"]
        self._reuse = None  # what step k+1 needs to trust step k's final evaluation

    def add_param_group(self, param_group):
        if self.param_groups:
            raise ValueError("CGD supports exactly one parameter group (like LBFGS)")
        super().add_param_group(param_group)

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        if "global" in self.state:  # torch copies per-parameter state only; don't share the counters
            self.state["global"] = {**_FRESH_STATS, **self.state["global"]}  # older saves lack newer keys
        self._reuse = None

    @property
    def stats(self) -> dict:
        """state["global"]: the Python scalars of _FRESH_STATS (n_evals is the last step's count)."""
        return self.state.setdefault("global", dict(_FRESH_STATS))

    def step_record(self) -> dict:
        """What the last step did, for a training record: the beta it used (None when the direction
        restarted at -g, or when no step was taken), whether and why it restarted (the first step
        counts as a restart), its closure evaluations, and whether its line search ran out of float
        resolution (then it also failed, and the next direction restarts)."""
        stats = self.stats
        record = {key: stats[key] for key in STEP_RECORD_KEYS if key in stats}
        record["restarted"] = stats["restart_reason"] is not None
        return record

    @torch.no_grad()
    def step(self, closure=None):
        group = self.param_groups[0]
        self.stats.update(beta=None, restart_reason=None, line_search_stalled=False)  # this step's own
        if group["line_search"] is None:
            return self._fixed_step(group, closure)
        if closure is None:
            raise ValueError("CGD with a line search needs a closure that zeroes the grads, "
                             "computes the loss, calls backward() and returns the loss")
        return self._line_search_step(group, closure)

    # --- the two modes -------------------------------------------------------------------

    def _fixed_step(self, group, closure):
        self._reuse = None
        evals = 0
        if group.get("same_batch_y") and self._previous_move(closure):
            self._prev_grad_on_this_batch(closure)
            evals = 1
        loss = None if closure is None else self._evaluate(closure)
        self._count_evals(evals + (closure is not None))
        grads = self._gradients()
        if _max_abs(grads) <= group["tolerance_grad"]:
            self.stats["last_move"] = 0.0
            return loss
        directions, _ = self._next_direction(grads, group)
        torch._foreach_add_(self._params, directions, alpha=group["lr"])
        self.stats["last_move"] = group["lr"]
        return loss

    def _previous_move(self, closure) -> float:
        """The step length that led from the previous point along the stored direction (0: none yet)."""
        if closure is None:
            raise ValueError("CGD with same_batch_y needs a closure: it evaluates the previous point on this batch")
        has_direction = all("direction" in self.state[p] for p in self._params)
        return self.stats.get("last_move", 0.0) if has_direction else 0.0

    def _prev_grad_on_this_batch(self, closure):
        """prev_grad := the gradient at the previous point x - lr d on this step's batch, so that
        y = g - prev_grad measures curvature, not the difference of two batches. One more closure
        call; the parameters move there and back in place (no copy of x, one rounding each way)."""
        back, directions = self.stats["last_move"], [self.state[p]["direction"] for p in self._params]
        torch._foreach_add_(self._params, directions, alpha=-back)
        self._evaluate(closure)
        for p, g in zip(self._params, self._gradients()):
            local_shard(self.state[p]["prev_grad"]).copy_(local_shard(g))
        torch._foreach_add_(self._params, directions, alpha=back)

    def _line_search_step(self, group, closure):
        loss, evals = self._reusable_loss(closure), 0
        if loss is None:
            loss, evals = self._evaluate(closure), 1
        grads = self._gradients()
        if _max_abs(grads) <= group["tolerance_grad"]:
            self._count_evals(evals)
            self._remember(closure, loss)
            return loss
        directions, slope = self._next_direction(grads, group)
        # prev_grad now holds a copy of the gradients: let the closure's zero_grad free them, or every
        # trial's forward/backward holds one more parameter-sized copy (11 % of a tiny Llama's peak).
        del grads
        line = _Line(self, closure, directions, budget=group["max_evals"] - evals)
        search = _armijo if group["line_search"] == "armijo" else _strong_wolfe
        t, best = search(line, _as_float(loss), slope, self._initial_step(group, slope), group["c1"], group["c2"])
        final_loss = self._settle(line, t, best, loss)
        self._count_evals(evals + line.evals)
        stats = self.stats
        stats["line_search_failed"] = t is None
        stats["line_search_stalled"] = line.stalled and t is None
        stats["n_stalled"] += stats["line_search_stalled"]
        stats["t"], stats["slope"] = self._step_for_next_search(line, slope)
        self._remember(closure, final_loss)
        return loss

    @staticmethod
    def _step_for_next_search(line, slope):
        """(t, slope) the next search scales its first trial from: the accepted step; after a search
        that stalled at the start, one extrapolation factor above the step it could not resolve (from
        lr, each stalled search would spend its trials shrinking back down to that scale); else none."""
        if line.t > 0:
            return line.t, slope
        if line.stalled:
            return EXTRAPOLATE[1] * line.unresolved_step, slope
        return None, None

    def _settle(self, line, t, best, start_loss):
        """Leave the parameters at the accepted point with p.grad holding the gradient there."""
        if t is not None:
            return line.loss
        if best is not None:  # failed search: fall back to its best sufficient-decrease point
            if best[0] != line.t:
                line(best[0])
            return line.loss
        line.move_to(0.0)     # nothing acceptable: back to the start, whose gradient is prev_grad
        for p in self._params:
            if p.grad is None:
                p.grad = self.state[p]["prev_grad"].clone()
            else:
                p.grad.copy_(self.state[p]["prev_grad"])
        return start_loss

    # --- direction and step length -------------------------------------------------------

    def _next_direction(self, grads, group):
        """d = -g + beta d_prev in place, or d = -g on a restart; returns (d, g.d)."""
        stats, params = self.stats, self._params
        stats["step"] += 1
        gg = _dot(grads, grads)
        if any("direction" not in self.state[p] for p in params):
            for p, g in zip(params, grads):
                self.state[p]["prev_grad"] = g.detach().clone()
                self.state[p]["direction"] = torch.neg(g)
            stats.update(since_restart=1, restart_reason="first step")
            return [self.state[p]["direction"] for p in params], -gg
        prev_grads = [self.state[p]["prev_grad"] for p in params]
        directions = [self.state[p]["direction"] for p in params]
        beta, reason = None, self._scheduled_restart(group)
        if reason is None:
            beta = self._beta(group["beta"], grads, prev_grads, directions, gg)
            if beta is None or not math.isfinite(beta):
                reason = "beta undefined"
            elif beta < 0:
                reason = "negative beta"
        if reason is None:
            slope = -gg + beta * _dot(grads, directions)
            if not slope < 0:
                reason = "not a descent direction"
        if reason is None:
            torch._foreach_mul_(directions, beta)
            stats.update(since_restart=stats["since_restart"] + 1, restart_reason=None, beta=beta)
        else:
            torch._foreach_zero_(directions)
            slope = -gg
            stats.update(since_restart=1, restart_reason=reason, n_restarts=stats["n_restarts"] + 1)
        torch._foreach_sub_(directions, grads)
        torch._foreach_copy_([local_shard(g) for g in prev_grads], [local_shard(g) for g in grads])  # DTensor has no foreach copy
        return directions, slope

    def _scheduled_restart(self, group):
        stats = self.stats
        if stats["line_search_failed"]:
            return "line search failed"
        every = group["restart_every"] or sum(p.numel() for p in self._params)
        return "schedule" if stats["since_restart"] >= every else None

    @staticmethod
    def _beta(rule, g, g_prev, d_prev, gg):
        """N&W sec. 5.2 (FR, PR, HS) and Dai-Yuan, with y = g - g_prev; None on a zero denominator."""
        if rule in ("fr", "pr+"):
            denom = _dot(g_prev, g_prev)
            numer = gg if rule == "fr" else gg - _dot(g, g_prev)
        else:
            denom = _dot(d_prev, g) - _dot(d_prev, g_prev)
            numer = gg if rule == "dy" else gg - _dot(g, g_prev)
        return numer / denom if denom != 0 else None  # pr+'s max(0, .) is the negative-beta restart

    def _initial_step(self, group, slope):
        """N&W heuristic t0 = t_prev (g_prev.d_prev) / (g.d), falling back to lr.

        For Armijo it is doubled: otherwise accepted steps could only ever shrink.
        """
        t_prev, slope_prev = self.stats["t"], self.stats["slope"]
        if t_prev is None or slope_prev is None:
            return group["lr"]
        ratio = min(max(slope_prev / slope, STEP_RATIO_BOUNDS[0]), STEP_RATIO_BOUNDS[1])
        t0 = t_prev * ratio * (ARMIJO_GROWTH if group["line_search"] == "armijo" else 1.0)
        return t0 if math.isfinite(t0) and t0 > 0 else group["lr"]

    # --- evaluations and their reuse -----------------------------------------------------

    def _gradients(self):
        grads = []
        for p in self._params:
            if p.grad is not None and p.grad.is_sparse:
                raise RuntimeError("CGD does not support sparse gradients")
            grads.append(p.grad if p.grad is not None else torch.zeros_like(p))
        return grads

    @staticmethod
    def _evaluate(closure):
        with torch.enable_grad():
            return closure()

    def _count_evals(self, n):
        self.stats["n_evals"] = n
        self.stats["total_evals"] += n

    def _marks(self):
        """Version counters that change whenever a parameter or gradient is written in place."""
        return [(p._version, None if p.grad is None else (weakref.ref(p.grad), p.grad._version))
                for p in self._params]

    def _remember(self, closure, loss):
        try:
            closure_ref = weakref.ref(closure)
        except TypeError:  # e.g. a builtin: no reuse, evaluate afresh next step
            self._reuse = None
            return
        loss = loss.detach() if isinstance(loss, torch.Tensor) else loss
        self._reuse = (closure_ref, loss, self._marks())

    def _reusable_loss(self, closure):
        if self._reuse is None:
            return None
        closure_ref, loss, marks = self._reuse
        self._reuse = None
        for p, (version, grad_mark) in zip(self._params, marks):
            grad_ok = p.grad is None if grad_mark is None else (
                p.grad is not None and grad_mark[0]() is p.grad and p.grad._version == grad_mark[1])
            if p._version != version or not grad_ok:
                return None
        return loss if closure_ref() is closure else None


def _float_eps(loss) -> float:
    """Relative resolution of the loss as the closure computes it (a Python float: float64's)."""
    floating = isinstance(loss, torch.Tensor) and loss.is_floating_point()
    return torch.finfo(loss.dtype if floating else torch.float64).eps


def _as_float(loss) -> float:
    return float(loss.detach() if isinstance(loss, torch.Tensor) else loss)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
