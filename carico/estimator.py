"""Per-pod cost and capacity from the capacity signal.

Design: docs/architecture.md#cost-and-capacity and docs/architecture.md#avail.

Model: k ≈ c − p·n, with n the node's workload pods, c the signal of the empty node (its
*capacity*) and p > 0 the signal one pod costs (its *per_pod_cost*). Two scalar Kalman filters:

* **capacity** (random walk, H = 1) is fed z = k + p̂·n every observation;
* **cost** is fed only the differenced measurement p_meas = (k̄_before − k̄_after)/Δn across a change
  of n, where k̄ are means over settled windows. While n stays constant only c − p·n is observable,
  and two filters fed the same sample trade error between c and p; differencing separates them.

Under **continuous churn** (a node running a Job changes its pod count several times a second) the
hold never ends and no settled window ever comes. Inside holds a third filter, the **churn
filter**, runs: a joint 2-state Kalman filter x = (c, p) with H = [1, −n̄], fed with n̄ the pod
count lag-matched to the smoothed signal. The pod count varies between its observations, which
separates c from p; it starts from ĉ, p̂ at each churn episode and hands its (c, p) back to the
scalar filters once its observations span at least two pod counts and p is known to
``churn_max_rel_std``. The unit of k is the fleet's typical workload, which moves with the model:
``rescale`` keeps the state in the unit of the next k, ``new_line`` restarts the churn filter
when another resource starts to limit k.

Halting rules, each visible in the read-only state: no update of the scalar filters during a
churn hold (from the first pod event until ``hold_seconds`` after the last, covering the EMA's
settling and one batch; the churn filter takes those observations); none at all when k ≤ ε or
the caller flags k as censored (the clamp at 0 censors the measurement, so a full node would
teach a too-low cost); the cost is never learned from a window (or a churn observation) at n = 0;
innovations beyond ``gate_sigmas``·√S are rejected, and after ``max_rejects`` consecutive rejects
P is inflated (the workload changed); a differenced measurement p_meas ≤ 0 (k did not fall as
pods came) is set aside, not rejected: it says the pods do not load what limits k, not what they
cost; p̂ ≥ ``min_per_pod_cost`` > 0, a learned p̂ ≥ ĉ/``max_pods`` (the node holds at most
``max_pods`` pods, kubelet's ``--max-pods``) and ĉ ≥ 0; avail is at most ``max_pods`` − n.

A fleet prior that arrives during churn pivots the line where the churn filter saw it (or through
the last observation): ĉ is stale while the capacity filter halts.

Noise: R is the variance of k over a quiet window (constant n, no churn, uncensored), refreshed as
windows complete; until then the configured ``noise_var``. Process noise follows from the wanted
steady-state gain K: Q = K²R/(1−K). The cost starts from a prior: the fleet prior published by the
aggregator (``set_prior``) or else the configured ``prior_per_pod_cost``.

Pure: no I/O, time comes in as ``now`` (seconds, any monotonic origin).
Neighbours: ``carico.signal`` provides k; the agent passes pods and churn and reports ``avail``.
(About 600 lines: the three filters share their state, noise model and halting rules, so they
stay one class.)
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
        churn_drift: float = 0.025,
        churn_lag_pods: float = 1.0,
        churn_min_span: float = 1.0,
        churn_max_rel_std: float = 0.2,
        max_pods: int = 110,
    ) -> None:
        _positive("prior_per_pod_cost", prior_per_pod_cost)
        _positive("prior_rel_std", prior_rel_std)
        _positive("noise_var", noise_var)
        _positive("min_noise_var", min_noise_var)
        _positive("hold_seconds", hold_seconds, allow_zero=True)
        _positive("eps", eps, allow_zero=True)
        _positive("gate_sigmas", gate_sigmas)
        _positive("min_per_pod_cost", min_per_pod_cost)
        _positive("churn_drift", churn_drift, allow_zero=True)
        _positive("churn_lag_pods", churn_lag_pods, allow_zero=True)
        _positive("churn_min_span", churn_min_span)
        _positive("churn_max_rel_std", churn_max_rel_std)
        for name, gain in (("capacity_gain", capacity_gain), ("cost_gain", cost_gain)):
            if not 0.0 < gain < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {gain}")
        for name, count, low in (
            ("window", window, 2),
            ("min_window", min_window, 2),
            ("quiet_window", quiet_window, 3),
            ("max_rejects", max_rejects, 1),
            ("max_cost_rejects", max_cost_rejects, 1),
            ("max_pods", max_pods, 1),
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
        self._max_pods = max_pods
        self._drift2 = float(churn_drift) ** 2
        self._lag_pods = float(churn_lag_pods)
        self._min_span = float(churn_min_span)
        self._max_rel_var = float(churn_max_rel_std) ** 2

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
        self._uninformative = 0

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

        # churn filter: joint (c, p) with H = [1, −n̄], run only inside churn holds
        self._jc = self._jp = math.nan
        self._jcc = self._jcp = self._jpp = 0.0
        self._j_lo = math.inf
        self._j_hi = -math.inf
        self._j_rejects = 0
        self._j_wide = False
        self._j_nsum = 0.0
        self._j_count = 0
        self._last_k = math.nan
        self._last_nbar = 0.0
        self._churn_updates = 0

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
        p, p_var = max(float(per_pod_cost), self._min_p), (rel * per_pod_cost) ** 2
        if self._churn_hold and math.isfinite(self._jc) and self._j_count > 0:
            # Inside churn ĉ is stale (the capacity filter halts), but the churn filter knows
            # where its line passes: at the mean pod count it saw. Pivot there, not at n.
            n_ref = self._j_nsum / self._j_count
            self._jc = max(self._jc + (p - self._jp) * n_ref, 0.0)
            self._jcc += n_ref * n_ref * p_var
            self._jp, self._jpp, self._jcp = p, p_var, 0.0
            self._c, self._c_var = self._jc, self._jcc
            self._p, self._p_var = p, p_var
        elif self._churn_hold and math.isfinite(self._last_k):
            # Nothing learned on the current line yet: the line through the last observation
            # (a full node, k ≈ 0, then gets ĉ/p̂ ≈ n̄: no room, as it should).
            n_ref = self._last_nbar
            self._c = max(self._last_k + p * n_ref, 0.0)
            self._c_var = self._r + n_ref * n_ref * p_var
            self._p, self._p_var = p, p_var
            self._jc = math.nan
        else:
            self._set_cost(p, p_var)
        self._cost_source = "fleet"
        return True

    def rescale(self, factor: float) -> None:
        """The unit of k changed: what was 1 is now ``factor`` (state in k units follows).

        k counts typical workloads w = σ₁u₁ of the fleet's model, and w moves with the model:
        when an idle fleet starts a Job, σ₁ grows several-fold within seconds, so the same pod
        costs fewer typical workloads. The caller knows w before and after a model update; with
        j the resource that limits k, one old unit is w_old[j]/w_new[j] new units. Rescaling
        ĉ, p̂, their variances, R and the windows keeps every estimate in the unit of the next k
        (avail, a ratio of two of them, does not change).
        """
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be a finite number > 0, got {factor!r}")
        if factor == 1.0:
            return
        f2 = factor * factor
        self._c *= factor
        self._c_var *= f2
        self._p = max(self._p * factor, self._min_p)
        self._p_var *= f2
        self._r = max(self._r * f2, self._min_noise_var)
        self._window_vars = deque(((v * f2, c * f2) for v, c in self._window_vars), maxlen=10)
        self._window = deque((v * factor for v in self._window), maxlen=self._window_size)
        self._quiet = deque((v * factor for v in self._quiet), maxlen=self._quiet.maxlen)
        if self._before is not None:
            n, mean, count = self._before
            self._before = (n, mean * factor, count)
        self._jc *= factor
        self._jp *= factor
        self._jcc, self._jcp, self._jpp = self._jcc * f2, self._jcp * f2, self._jpp * f2

    def new_line(self) -> None:
        """Another resource now limits k: k(n) continues on another line.

        k is the minimum over resources of (1 − y_j)/w_j, so k(n) is a concave broken line: on an
        idle node memory may limit k (a nearly flat line in n) and CPU once pods run (a steep
        one). Observations from before the break would bend the churn filter's line; it restarts
        from p̂ with ĉ as a wide guess (the empty node's k on the new line is not yet known).
        """
        self._jc = math.nan
        self._j_wide = True

    def observe(
        self,
        now: float,
        k: float,
        pods: int,
        churn: bool,
        *,
        censored: bool = False,
        pods_lagged: float | None = None,
    ) -> None:
        """One observation: the signal ``k`` at time ``now`` with ``pods`` workload pods running.

        ``churn`` is true while a pod event is in progress: a containerd/cgroup hint, or the
        Dynamic EMA not yet settled (``not ema.settled``). A change of ``pods`` also starts the
        churn hold. The hold lasts until ``hold_seconds`` after the last such observation (2.5 s by
        default: the EMA's settling after a start-up burst plus one 1 s batch).

        ``censored`` says the caller knows k sits at its floor although it is above ε (the
        telemetry of a full node is clipped at 1, so its smoothed level stops a little short of
        it). ``pods_lagged`` is the pod count as the smoothed signal sees it (the count some
        hundreds of ms ago, matched to the EMA's delay); only the churn filter uses it, and
        ``pods`` stands in for it when it is not given.
        """
        if not math.isfinite(now) or now < self._now:
            raise ValueError(f"now must be finite and non-decreasing, got {now} after {self._now}")
        if not math.isfinite(k) or k < 0:
            raise ValueError(f"k must be a finite number >= 0, got {k}")
        if isinstance(pods, bool) or int(pods) != pods or pods < 0:
            raise ValueError(f"pods must be an integer >= 0, got {pods!r}")
        pods = int(pods)
        if pods_lagged is not None and not (math.isfinite(pods_lagged) and pods_lagged >= 0):
            raise ValueError(f"pods_lagged must be a finite number >= 0, got {pods_lagged}")
        self._now = float(now)
        self._observations += 1
        self._last_k = float(k)
        self._last_nbar = float(pods) if pods_lagged is None else float(pods_lagged)
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
        self._censored = censored or k <= self._eps
        self._gated = False
        if self._churn_hold:
            if not self._censored:
                self._update_churn(k, float(pods) if pods_lagged is None else pods_lagged)
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
        if not self._churn_hold:
            self._jc = math.nan  # a new churn episode: the churn filter starts from ĉ, p̂
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
            # never learn the cost from a window at n = 0 (docs/architecture.md#cost-and-capacity)
            return
        w_after = len(self._window)
        dn = n - n_before
        p_meas = (k_before - _mean(self._window)) / dn
        self._last_p_meas = p_meas
        if p_meas <= 0.0:
            # k did not fall as pods came (or rose as they went): these pods do not load the
            # resource that limits k, or other load moved meanwhile. It says nothing about what
            # a pod costs, and taken (after the rejects) it drove p̂ to its floor and avail past
            # a million pods (docs/architecture.md#cost-and-capacity).
            self._uninformative += 1
            return
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
        self._set_cost(max(self._p + gain * nu, self._line_floor()), p_var * (1.0 - gain))
        self._cost_source = "learned"
        self._cost_updates += 1

    def _update_churn(self, k: float, n: float) -> None:
        """The churn filter: one observation of k = c − p·n̄ inside a churn hold.

        Under continuous churn (a node of a running Job changes its pod count several times a
        second) the hold never ends and the differenced update never gets its settled windows.
        The pod count then varies from one observation to the next, and a joint 2-state filter
        x = (c, p) with H = [1, −n̄] separates c from p by that variation. It starts from the
        scalar filters' ĉ, p̂ at the first event of the episode (no cross-covariance), so what the
        settled windows taught is its prior; it hands its (c, p) back to them only once its
        observations span ``churn_min_span`` pods and p's relative std is at most
        ``churn_max_rel_std`` (a constant n̄ cannot separate them, and a churn that does settle
        leaves the learning to the differenced update). Measurement noise: R plus
        (``churn_lag_pods``·p)², the error of a pod count that is one pod out of step with the
        smoothed signal. Each observation, c and p walk by ``churn_drift`` of their value: the
        unit of k is the fleet's typical workload, which moves with the model (half-life 30 s:
        ln 2/30 ≈ 2.3 % a second at most). Gate, reject count, P inflation and clamps as for
        the capacity filter; never an observation at n̄ = 0.
        """
        if n <= 0.0:
            return
        if not math.isfinite(self._jc):
            if math.isfinite(self._c):
                self._jc, self._jcc = self._c, self._c_var
            else:
                self._jc = k + self._p * n
                self._jcc = self._r + (n * self._p * self._prior_rel_std) ** 2
            if self._j_wide:
                self._jcc = max(self._jcc, (self._prior_rel_std * self._jc) ** 2)
                self._j_wide = False
            self._jp, self._jpp, self._jcp = self._p, self._p_var, 0.0
            self._j_lo, self._j_hi = math.inf, -math.inf
            self._j_rejects = 0
            self._j_nsum, self._j_count = 0.0, 0
        c, p = self._jc, self._jp
        self._jcc += self._drift2 * c * c
        self._jpp += self._drift2 * p * p
        r = self._r + (self._lag_pods * p) ** 2
        nu = k - (c - p * n)
        ph_c = self._jcc - n * self._jcp  # P·Hᵀ
        ph_p = self._jcp - n * self._jpp
        hph = ph_c - n * ph_p
        s = hph + r
        if nu * nu > self._gate2 * s:
            self._j_rejects += 1
            if self._j_rejects < self._max_rejects:
                return
            # Several rejects in a row: the line moved. Widen P so this sample passes.
            f = nu * nu / hph if hph > 0 else 1.0
            self._jcc, self._jcp, self._jpp = self._jcc * f, self._jcp * f, self._jpp * f
            ph_c, ph_p, hph = ph_c * f, ph_p * f, hph * f
            s = hph + r
        self._j_rejects = 0
        g_c, g_p = ph_c / s, ph_p / s
        self._jc = max(c + g_c * nu, 0.0)
        self._jp = max(p + g_p * nu, self._min_p, self._jc / self._max_pods)
        self._jcc -= g_c * ph_c
        self._jcp -= g_c * ph_p
        self._jpp -= g_p * ph_p
        self._j_lo, self._j_hi = min(self._j_lo, n), max(self._j_hi, n)
        self._j_nsum += n
        self._j_count += 1
        self._churn_updates += 1
        if self._j_hi - self._j_lo >= self._min_span and (
            self._jpp <= self._max_rel_var * self._jp**2
        ):
            self._c, self._c_var = self._jc, self._jcc
            self._p, self._p_var = self._jp, self._jpp
            self._cost_source = "learned"

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

    def _line_floor(self) -> float:
        """The least p̂ that keeps ĉ/p̂ ≤ ``max_pods`` once ``_set_cost`` pivots the line.

        A node runs at most ``max_pods`` pods, so the empty node holds at most that many: one pod
        costs at least ĉ/max_pods. ``_set_cost`` keeps the line through the current operating
        point, ĉ' = ĉ + (p − p̂)·n, so ĉ'/p ≤ M means p ≥ (ĉ − p̂·n)/(M − n): the room the line
        predicts now, shared among the pods that may still start.
        """
        n = self._n or 0
        if not math.isfinite(self._c) or n >= self._max_pods:
            return self._min_p
        return max((self._c - self._p * n) / (self._max_pods - n), self._min_p)

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

        Either is at most ``max_pods`` − pods. ``"estimate"`` is NaN until the first usable
        observation has initialised ĉ.
        """
        if isinstance(pods, bool) or int(pods) != pods or pods < 0:
            raise ValueError(f"pods must be an integer >= 0, got {pods!r}")
        # no more than max_pods − pods can start, whatever the signal says (the kubelet's limit)
        room = max(self._max_pods - pods, 0)
        if mode == "live":
            if not math.isfinite(k) or k < 0:
                raise ValueError(f"k must be a finite number >= 0, got {k}")
            return min(k / self._p, room)
        if mode == "estimate":
            if not math.isfinite(self._c):
                return math.nan
            return min(max(self._c / self._p - pods, 0.0), room)
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
    def churn_updates(self) -> int:
        """Observations the churn filter took (inside churn holds)."""
        return self._churn_updates

    @property
    def uninformative_cost_measurements(self) -> int:
        """Differenced measurements p_meas ≤ 0 that were set aside (pods that did not lower k)."""
        return self._uninformative

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
