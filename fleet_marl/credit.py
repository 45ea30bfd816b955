"""Credit assignment: every reward scheme of one round from ONE batched kernel call.

Pure numpy over tenant arrays; agent-ID dicts live only in ``fleet_marl.environment``. With ``u_i`` the
utility of tenant i, ``G(z) = sum_i u_i`` the welfare of the joint action ``z`` and ``L`` the
live tenants (Wolpert and Tumer 2001; Agogino and Tumer 2008; Shapley 1953)::

    local               r_i = u_i
    global              r_i = G(z) - penalty * (number of starved tenants)
    mixed               r_i = w * local_i + (1 - w) * global_i
    difference          r_i = G(z) - G(z_-i)            z_-i: tenant i removed, its GPUs freed
    difference_default  r_i = G(z) - G(z_i<-c_i)        c_i: i's documented default action
    shapley             r_i = sum_{S in L\\{i}} |S|! (n-|S|-1)! / n! (G(S + i) - G(S))

``G(S)`` is the welfare of the round with only the tenants of ``S`` present (the others ask
for nothing and count 0), under the same state and the same random draws. Shapley is exact
over all ``2^n`` coalitions up to ``EXACT_SHAPLEY_MAX`` live tenants; above that it averages
the marginal contributions along ``M`` random permutations (Castro et al. 2009), which keeps
the efficiency property ``sum_i r_i = G(L) - G(empty)`` exactly.

Every row needed -- the grand coalition, each removal, each default substitution, each
coalition -- goes into the kernel as one batch: one ``evaluate_welfare`` call per round, which
keeps the whole outcome of the grand coalition and only the welfare of the other rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import factorial

import numpy as np

from fleet_marl.config import REWARD_SCHEMES, RewardSpec
from fleet_marl.kernel import Actions, Draws, KernelStatic, Outcome, RoundState, evaluate_welfare

EXACT_SHAPLEY_MAX = 8
#: What each scheme needs from the kernel beyond the grand coalition.
_NEEDS = {"difference": "removal", "difference_default": "default", "shapley": "coalitions"}


@dataclass
class Credit:
    """The round's result: the grand-coalition outcome (batch axis removed) and every scheme."""

    outcome: Outcome  # leading shape () -- fields (T,), (T, G), (K,)
    welfare: float  # G(z)
    rewards: dict[str, np.ndarray]  # scheme -> (T,) float64, 0 for tenants not live
    rows: int  # kernel rows evaluated this round


def _shapley_plan(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For n players over bitmask coalitions: (without (n, 2^(n-1)), with_, weight)."""
    masks = np.arange(1 << n, dtype=np.int64)
    size = np.array([bin(m).count("1") for m in masks])
    fact = np.array([factorial(k) for k in range(n + 1)], dtype=np.float64)
    without, with_, weight = [], [], []
    for j in range(n):
        s = masks[(masks >> j) & 1 == 0]
        without.append(s)
        with_.append(s | (1 << j))
        weight.append(fact[size[s]] * fact[n - size[s] - 1] / fact[n])
    return np.array(without), np.array(with_), np.array(weight)


class CreditEngine:
    """Computes the requested reward schemes for one round.

    ``schemes`` is the set to compute (the chosen one, or all of them). ``rng`` draws the
    Shapley permutations; it is separate from the environment's generator so the trajectory
    never depends on which schemes are computed.
    """

    def __init__(self, st: KernelStatic, spec: RewardSpec, schemes: tuple[str, ...], rng: np.random.Generator):
        unknown = [s for s in schemes if s not in REWARD_SCHEMES]
        if unknown:
            raise ValueError(f"reward scheme {unknown[0]!r}: expected one of {', '.join(REWARD_SCHEMES)}")
        self.st = st
        self.spec = spec
        self.schemes = tuple(schemes)
        self.rng = rng
        self._plans: dict[int, tuple] = {}

    def _plan(self, n: int):
        if n not in self._plans:
            self._plans[n] = _shapley_plan(n)
        return self._plans[n]

    def compute(
        self,
        actions: Actions,
        state: RoundState,
        draws: Draws,
        live: np.ndarray,
        default: Actions | None = None,
    ) -> Credit:
        """actions, state, draws: fields with no batch axis, already validated. live: (T,) bool.
        default: the default action of every tenant (needed for ``difference_default``).
        The starvation penalty needs this round's allocation, so it is applied afterwards by
        :meth:`apply_starvation`."""
        st, T = self.st, self.st.T
        need = {_NEEDS[s] for s in self.schemes if s in _NEEDS}
        idx = np.flatnonzero(live)
        n = idx.size
        masks = [live[None, :]]
        spans: dict[str, slice] = {}
        r = 1
        if "removal" in need and n:
            rem = np.repeat(live[None, :], n, axis=0)
            rem[np.arange(n), idx] = False
            masks.append(rem)
            spans["removal"] = slice(r, r + n)
            r += n
        if "default" in need and n:
            if default is None:
                raise ValueError("difference_default needs the default actions")
            masks.append(np.repeat(live[None, :], n, axis=0))
            spans["default"] = slice(r, r + n)
            r += n
        perm_rank = None
        if "coalitions" in need and n:
            if n <= EXACT_SHAPLEY_MAX:
                bits = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1
                co = np.zeros((1 << n, T), bool)
                co[:, idx] = bits.astype(bool)
                masks.append(co)
                spans["coalitions"] = slice(r, r + (1 << n))
                r += 1 << n
            else:
                M = self.spec.shapley_samples
                perms = self.rng.permuted(np.tile(np.arange(n), (M, 1)), axis=1)
                perm_rank = np.argsort(perms, axis=1)  # position of player j in permutation m
                k = np.arange(1, n)  # proper, non-empty prefixes
                pre = perm_rank[:, None, :] < k[None, :, None]  # (M, n-1, n)
                co = np.zeros((M * (n - 1), T), bool)
                co[:, idx] = pre.reshape(-1, n)
                masks.append(co)
                spans["coalitions"] = slice(r, r + M * (n - 1))
                r += M * (n - 1)
        present = np.concatenate(masks) if len(masks) > 1 else masks[0]
        R = present.shape[0]
        acts = actions
        if "default" in spans:
            rows = spans["default"]

            def sub(base, dflt):
                a = np.repeat(np.asarray(base)[None], R, axis=0)
                a[np.arange(rows.start, rows.stop), idx] = np.asarray(dflt)[idx]
                return a

            acts = Actions(
                gpus=sub(actions.gpus, default.gpus),
                bid=sub(actions.bid, default.bid),
                precision=sub(actions.precision, default.precision),
                batch=sub(actions.batch, default.batch),
            )
        out, W = evaluate_welfare(st, acts, state, draws, present, full_every=R)  # the whole outcome of row 0 only
        G = float(W[0])
        main = out.row(0)
        rewards: dict[str, np.ndarray] = {}
        u = np.where(live, main.utility, 0.0)
        for s in self.schemes:
            if s == "local":
                rewards[s] = u
            elif s == "global":
                rewards[s] = np.where(live, G, 0.0)
            elif s == "mixed":
                w = self.spec.mixed_weight
                rewards[s] = w * u + (1.0 - w) * np.where(live, G, 0.0)
            elif s == "difference":
                d = np.zeros(T)
                if n:
                    d[idx] = G - W[spans["removal"]]
                rewards[s] = d
            elif s == "difference_default":
                d = np.zeros(T)
                if n:
                    d[idx] = G - W[spans["default"]]
                rewards[s] = d
            elif s == "shapley":
                phi = np.zeros(T)
                if n:
                    v = W[spans["coalitions"]]
                    if perm_rank is None:
                        without, with_, weight = self._plan(n)
                        phi[idx] = (weight * (v[with_] - v[without])).sum(-1)
                    else:
                        M = perm_rank.shape[0]
                        full = np.empty((M, n + 1))
                        full[:, 0] = 0.0
                        full[:, n] = G
                        full[:, 1:n] = v.reshape(M, n - 1)
                        m = np.arange(M)[:, None]
                        phi[idx] = (full[m, perm_rank + 1] - full[m, perm_rank]).mean(0)
                rewards[s] = phi
        return Credit(outcome=main, welfare=G, rewards=rewards, rows=R)

    def apply_starvation(self, credit: Credit, live: np.ndarray, starved: np.ndarray) -> None:
        """Subtract ``starvation_penalty`` per starved live tenant from ``global`` (and from
        the global part of ``mixed``), in place."""
        pen = self.spec.starvation_penalty * float(np.count_nonzero(starved & live))
        if not pen:
            return
        if "global" in credit.rewards:
            credit.rewards["global"] = np.where(live, credit.rewards["global"] - pen, 0.0)
        if "mixed" in credit.rewards:
            w = self.spec.mixed_weight
            credit.rewards["mixed"] = np.where(live, credit.rewards["mixed"] - (1.0 - w) * pen, 0.0)


__all__ = ["Credit", "CreditEngine", "EXACT_SHAPLEY_MAX"]
