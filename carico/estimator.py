"""Per-pod cost and capacity from the capacity signal (DESIGN §3.6–3.7).

Model: k ≈ c − p·n, with n the node's workload pods, c the signal of the empty node (its
*capacity*) and p > 0 the signal one pod costs (its *per_pod_cost*). Two scalar Kalman filters:

* **capacity** (random walk, H = 1) is fed z = k + p̂·n every observation;
* **cost** is fed only the differenced measurement p_meas = (k̄_before − k̄_after)/Δn across a change
  of n, where k̄ are means over settled windows. While n stays constant only c − p·n is observable,
  and two filters fed the same sample trade error between c and p; differencing separates them.

Halting rules, each visible in the read-only state: no update during a churn hold (from the first
pod event until ``hold_seconds`` after the last, covering the EMA's settling and one batch); none
when k ≤ ε (the clamp at 0 censors the measurement, so a full node would teach a too-low cost); the
cost filter is never updated from a window at n = 0; innovations beyond ``gate_sigmas``·√S are
rejected, and after ``max_rejects`` consecutive rejects P is inflated (the workload changed);
p̂ ≥ ``min_per_pod_cost`` > 0 and ĉ ≥ 0.

Noise: R is the variance of k over a quiet window (constant n, no churn, uncensored), refreshed as
windows complete; until then the configured ``noise_var``. Process noise follows from the wanted
steady-state gain K: Q = K²R/(1−K). The cost starts from a prior: the fleet prior published by the
aggregator (``set_prior``) or else the configured ``prior_per_pod_cost``.

Pure: no I/O, time comes in as ``now`` (seconds, any monotonic origin).
Neighbours: ``carico.signal`` provides k; the agent passes pods and churn and reports ``avail``.
"""

from __future__ import annotations

import math
from collections import deque

MODES = ("live", "estimate")


class CostCapacityEstimator:
    """Tracks capacity ĉ and per_pod_cost p̂ of one node from (now, k, pods, churn) observations.

    A node with capacity 4 and cost 0.2 per pod, observed at 1 Hz, learns the cost from one
    settled window on each side of a change from 5 to 8 pods:

    >>> est = CostCapacityEstimator(prior_per_pod_cost=0.1, window=10)
    >>> now = 0.0
    >>> for pods in (5, 8):
    ...     for _ in range(20):
    ...         now += 1.0
    ...         est.observe(now, 4.0 - 0.2 * pods, pods, churn=False)
    >>> round(est.per_pod_cost, 3), round(est.capacity, 2), est.cost_source
    (0.2, 4.0, 'learned')
    >>> round(est.avail(2.4, 8, "live"), 1), round(est.avail(2.4, 8, "estimate"), 1)
    (12.0, 12.0)
    """

    def __init__(
        self,
        *,
        prior_per_pod_cost: float = 0.1,
        prior_rel_std: float = 1.0,
        noise_var: float = 1e-3,
        min_noise_var: float = 1e-8,
        capacity_gain: float = 0.02,
        cost_gain: float = 0.2,
        window: int = 20,
        min_window: int = 5,
        quiet_window: int = 30,
        hold_seconds: float = 2.5,
        eps: float = 1e-6,
        gate_sigmas: float = 3.0,
        max_rejects: int = 5,
        max_cost_rejects: int = 2,
        min_per_pod_cost: float = 1e-6,
    ) -> None:
        _positive("prior_per_pod_cost", prior_per_pod_cost)
        _positive("prior_rel_std", prior_rel_std)
        _positive("noise_var", noise_var)
        _positive("min_noise_var", min_noise_var)
        _positive("hold_seconds", hold_seconds, allow_zero=True)
        _positive("eps", eps, allow_zero=True)
        _positive("gate_sigmas", gate_sigmas)
        _positive("min_per_pod_cost", min_per_pod_cost)
        for name, gain in (("capacity_gain", capacity_gain), ("cost_gain", cost_gain)):
            if not 0.0 < gain < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {gain}")
        for name, count, low in (
            ("window", window, 2),
            ("min_window", min_window, 2),
            ("quiet_window", quiet_window, 3),
            ("max_rejects", max_rejects, 1),
            ("max_cost_rejects", max_cost_rejects, 1),
        ):
            if not isinstance(count, int) or count < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {count!r}")
        if min_window > window:
            raise ValueError(f"min_window ({min_window}) must not exceed window ({window})")
        self._prior_rel_std = float(prior_rel_std)
        self._min_noise_var = float(min_noise_var)
        self._k_gain = float(capacity_gain)
        self._p_gain = float(cost_gain)
        self._window_size = window
        self._min_window = min_window
        self._hold_seconds = float(hold_seconds)
        self._eps = float(eps)
        self._gate2 = float(gate_sigmas) ** 2
        self._max_rejects = max_rejects
        self._max_cost_rejects = max_cost_rejects
        self._min_p = float(min_per_pod_cost)

        # noise: R and the lag-1 autocorrelation ρ of k, from quiet windows
        self._r = float(noise_var)
        self._rho = 0.0
        self._r_learned = False
        self._quiet: deque[float] = deque(maxlen=quiet_window)
        # one window's variance has a relative error of √(2/(W−1)) ≈ 26 % at W = 30; averaging the
        # last few windows brings that under 10 % while still following a change within minutes
        self._window_vars: deque[tuple[float, float]] = deque(maxlen=10)

        # cost filter
        self._p = max(float(prior_per_pod_cost), self._min_p)
        self._p_var = (self._prior_rel_std * self._p) ** 2
        self._cost_source = "config"
        self._cost_updates = 0
        self._cost_rejects = 0
        self._last_p_meas = math.nan

        # capacity filter (initialised by the first usable observation)
        self._c = math.nan
        self._c_var = math.nan
        self._rejects = 0

        # observation bookkeeping
        self._now = -math.inf
        self._n: int | None = None
        self._hold_until = -math.inf
        self._churn_hold = False
        self._censored = False
        self._gated = False
        self._window: deque[float] = deque(maxlen=window)
        self._before: tuple[int, float, int] | None = None  # (n, mean k, samples)
        self._observations = 0
        self._updates = 0

    # -- input --------------------------------------------------------------------------------

    def set_prior(self, per_pod_cost: float, rel_std: float | None = None) -> bool:
        """Use the aggregator's fleet prior for the cost until this node has learned its own.

        Returns whether it was applied (a learned cost is never replaced by a prior).
        """
        _positive("per_pod_cost", per_pod_cost)
        if self._cost_source == "learned":
            return False
        rel = self._prior_rel_std if rel_std is None else float(rel_std)
        _positive("rel_std", rel)
        self._set_cost(max(float(per_pod_cost), self._min_p), (rel * per_pod_cost) ** 2)
        self._cost_source = "fleet"
        return True

    def observe(self, now: float, k: float, pods: int, churn: bool) -> None:
        """One observation: the signal ``k`` at time ``now`` with ``pods`` workload pods running.

        ``churn`` is true while a pod event is in progress: a containerd/cgroup hint, or the
        Dynamic EMA not yet settled (``not ema.settled``). A change of ``pods`` also starts the
        churn hold. The hold lasts until ``hold_seconds`` after the last such observation (2.5 s by
        default: the EMA's settling after a start-up burst plus one 1 s batch).
        """
        if not math.isfinite(now) or now < self._now:
            raise ValueError(f"now must be finite and non-decreasing, got {now} after {self._now}")
        if not math.isfinite(k) or k < 0:
            raise ValueError(f"k must be a finite number >= 0, got {k}")
        if isinstance(pods, bool) or int(pods) != pods or pods < 0:
            raise ValueError(f"pods must be an integer >= 0, got {pods!r}")
        pods = int(pods)
        self._now = float(now)
        self._observations += 1
        if self._n is not None and pods != self._n:
            self._on_event(pods)
            churn = True
        elif churn and self._hold_until < now:
            self._on_event(pods)  # the first churn hint of a new event
        self._n = pods
        if churn:
            self._hold_until = now + self._hold_seconds
        # Uncertainty grows with every tick, also while halted, so that after a long halt the
        # filters listen more to fresh data.
        q_c = self._k_gain**2 * self._r / (1.0 - self._k_gain)
        if math.isfinite(self._c_var):
            self._c_var += q_c
        self._churn_hold = now < self._hold_until
        self._censored = k <= self._eps
        self._gated = False
        if self._churn_hold:
            return
        if self._censored:
            # A censored sample cannot belong to a settled window: start the window afresh.
            self._window.clear()
            self._quiet.clear()
            return
        self._window.append(k)
        self._quiet.append(k)
        self._learn_noise()
        self._update_capacity(k + self._p * pods)
        if len(self._window) == self._window_size:
            self._try_cost_update()

    # -- the filters --------------------------------------------------------------------------

    def _on_event(self, pods: int) -> None:
        """A pod event begins: keep the settled window before it as the 'before' side."""
        self._quiet.clear()
        if len(self._window) >= self._min_window and self._n is not None:
            if self._before is not None and self._before[0] != self._n:
                # Events came too fast for a full window: difference against what we have.
                self._try_cost_update()
            self._before = (self._n, _mean(self._window), len(self._window))
        self._window.clear()

    def _update_capacity(self, z: float) -> None:
        if not math.isfinite(self._c):
            self._c = max(z, 0.0)
            self._c_var = self._r + (self._n or 0) ** 2 * self._p_var
            self._updates += 1
            return
        nu = z - self._c
        s = self._c_var + self._r
        if nu * nu > self._gate2 * s:
            self._rejects += 1
            if self._rejects < self._max_rejects:
                self._gated = True
                return
            # Several rejects in a row: the workload changed. Inflate P so this sample passes.
            self._c_var = max(self._c_var, nu * nu)
            s = self._c_var + self._r
        self._rejects = 0
        gain = self._c_var / s
        self._c = max(self._c + gain * nu, 0.0)
        self._c_var *= 1.0 - gain
        self._updates += 1

    def _try_cost_update(self) -> None:
        before = self._before
        n = self._n
        if before is None or n is None or len(self._window) < self._min_window:
            return
        n_before, k_before, w_before = before
        if n == n_before:
            return
        self._before = None
        if n_before == 0 or n == 0:
            return  # never learn the cost from a window at n = 0 (DESIGN §3.6)
        w_after = len(self._window)
        dn = n - n_before
        p_meas = (k_before - _mean(self._window)) / dn
        self._last_p_meas = p_meas
        # Variance of a mean of W autocorrelated samples ≈ R·(1+ρ)/((1−ρ)·W) (AR(1) approximation).
        inflate = (1.0 + self._rho) / (1.0 - self._rho)
        r_p = self._r * inflate * (1.0 / w_before + 1.0 / w_after) / (dn * dn)
        r_nominal = self._r * inflate * 2.0 / self._window_size
        p_var = self._p_var + self._p_gain**2 * r_nominal / (1.0 - self._p_gain)
        nu = p_meas - self._p
        s = p_var + r_p
        if nu * nu > self._gate2 * s:
            self._cost_rejects += 1
            if self._cost_rejects < self._max_cost_rejects:
                self._p_var = p_var
                return
            p_var = max(p_var, nu * nu)
            s = p_var + r_p
        self._cost_rejects = 0
        gain = p_var / s
        self._set_cost(max(self._p + gain * nu, self._min_p), p_var * (1.0 - gain))
        self._cost_source = "learned"
        self._cost_updates += 1

    def _set_cost(self, p: float, p_var: float) -> None:
        """Change p̂ and keep the capacity line through the current operating point.

        The capacity filter has been tracking ĉ − p̂·n ≈ k at the current n; shifting ĉ by Δp̂·n
        keeps that prediction while the slope changes, instead of waiting for ĉ to drift there.
        """
        if math.isfinite(self._c) and self._n is not None:
            self._c = max(self._c + (p - self._p) * self._n, 0.0)
            self._c_var += self._n**2 * p_var
        self._p = p
        self._p_var = p_var

    def _learn_noise(self) -> None:
        """R and ρ from a completed quiet window; the window then starts afresh."""
        if len(self._quiet) < (self._quiet.maxlen or 0):
            return
        values = list(self._quiet)
        self._quiet.clear()
        mean = _mean(values)
        dev = [v - mean for v in values]
        var = sum(d * d for d in dev) / (len(dev) - 1)
        lag1 = sum(a * b for a, b in zip(dev, dev[1:], strict=False)) / (len(dev) - 1)
        self._window_vars.append((var, lag1))
        var_mean = _mean([v for v, _ in self._window_vars])
        lag1_mean = _mean([c for _, c in self._window_vars])
        self._rho = min(max(lag1_mean / var_mean, 0.0), 0.95) if var_mean > 0 else 0.0
        self._r = max(var_mean, self._min_noise_var)
        self._r_learned = True

    # -- output -------------------------------------------------------------------------------

    def avail(self, k: float, pods: int, mode: str) -> float:
        """Available capacity in pods: ``"live"`` k / p̂, ``"estimate"`` ĉ / p̂ − pods (≥ 0).

        ``"estimate"`` is NaN until the first usable observation has initialised ĉ.
        """
        if mode == "live":
            if not math.isfinite(k) or k < 0:
                raise ValueError(f"k must be a finite number >= 0, got {k}")
            return k / self._p
        if mode == "estimate":
            if isinstance(pods, bool) or int(pods) != pods or pods < 0:
                raise ValueError(f"pods must be an integer >= 0, got {pods!r}")
            return max(self._c / self._p - pods, 0.0) if math.isfinite(self._c) else math.nan
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")

    @property
    def capacity(self) -> float:
        """ĉ, the signal of the empty node (NaN before the first usable observation)."""
        return self._c

    @property
    def per_pod_cost(self) -> float:
        """p̂ > 0, the signal one pod costs."""
        return self._p

    @property
    def capacity_var(self) -> float:
        return self._c_var

    @property
    def per_pod_cost_var(self) -> float:
        return self._p_var

    @property
    def noise_var(self) -> float:
        """R, the variance of k: learned from quiet windows, else the configured value."""
        return self._r

    @property
    def noise_learned(self) -> bool:
        return self._r_learned

    @property
    def cost_source(self) -> str:
        """Where p̂ comes from: ``"config"``, ``"fleet"`` (aggregator prior) or ``"learned"``."""
        return self._cost_source

    @property
    def cost_learned(self) -> bool:
        return self._cost_source == "learned"

    @property
    def cost_updates(self) -> int:
        """Accepted differenced cost measurements so far."""
        return self._cost_updates

    @property
    def last_cost_measurement(self) -> float:
        """The last differenced measurement p_meas (NaN before the first)."""
        return self._last_p_meas

    @property
    def churn_hold(self) -> bool:
        """Whether the last observation fell in a churn hold."""
        return self._churn_hold

    @property
    def censored(self) -> bool:
        """Whether the last observation had k ≤ ε (a full node: the signal is clamped)."""
        return self._censored

    @property
    def gated(self) -> bool:
        """Whether the last observation was rejected by the capacity filter's innovation gate."""
        return self._gated

    @property
    def halted(self) -> bool:
        """Whether the last observation was not used (churn hold, censored or gated)."""
        return self._churn_hold or self._censored or self._gated

    @property
    def suggested_mode(self) -> str:
        """``"estimate"`` while churn or the gate halts the filters (k is suspect), else ``"live"``.

        A censored k = 0 is true information (the node is full), so it stays ``"live"``; so does
        a node whose capacity is not yet known.
        """
        if math.isfinite(self._c) and (self._churn_hold or self._gated):
            return "estimate"
        return "live"

    @property
    def observations(self) -> int:
        return self._observations

    @property
    def capacity_updates(self) -> int:
        """Observations that updated (or initialised) the capacity filter."""
        return self._updates


def _mean(values: deque[float] | list[float]) -> float:
    return sum(values) / len(values)


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and math.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
