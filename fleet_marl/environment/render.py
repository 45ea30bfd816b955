"""Rendering of ``FleetParallelEnv``: an ANSI table and a matplotlib picture, drawn from the
env's public read-only views only (``last_outcome``, ``last_credit``, ``node_temperatures``,
``fairness``, ``kernel_static``, ``config``).

* ``ansi``: one line per tenant -- kind, model, GPUs granted / requested, precision per layer
  group, batch, throughput, memory use, the hottest node it runs on, starvation streak and
  utility -- under a header with the round, the welfare and the rack power.
* ``rgb_array``: three panels -- the nodes x GPUs grid coloured by the tenant holding each GPU,
  node temperatures against the throttle and shutdown lines, and per-tenant throughput. Drawn
  with matplotlib, the ``[plot]`` extra; without it a frame raises
  :class:`~fleet_marl.errors.MissingExtra` (an ImportError) that says how to install it.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from fleet_marl import catalog
from fleet_marl.errors import require

#: Who needs matplotlib, in the message of a missing [plot] extra.
_RGB = 'render_mode="rgb_array"'

_SHORT = {"fp32": "32", "bf16": "bf", "fp8": "f8", "int8": "i8", "int4": "i4"}


def _fmt_rate(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def _node_hosts(env) -> np.ndarray:
    """(T, K) GPUs of each tenant on each node, last round (zeros before the first)."""
    o = env.last_outcome
    st = env.kernel_static
    return np.zeros((st.T, st.K), np.int64) if o is None else np.asarray(o.gpus_on_node)


def render_ansi(env) -> str:
    st, cfg, o = env.kernel_static, env.config, env.last_outcome
    credit, temp_c, fairness = env.last_credit, env.node_temperatures, env.fairness
    lines = []
    welfare = "-" if credit is None else f"{credit.welfare:+.3f}"
    racks = "-" if o is None else " ".join(f"{p / 1000:.1f}kW" for p in o.rack_power_w)
    lines.append(
        f"fleet_v0 {env.task or 'custom'}  round {env.round}/{cfg.max_cycles}  welfare {welfare}  racks {racks} (cap {st.rack_power_cap_w / 1000:.1f}kW)  live {len(env.agents)}/{st.T}"
    )
    head = f"{'tenant':<10} {'kind':<5} {'model':<13} {'gpu':<10} {'gpus':>6} {'precision':<15} {'batch':>5} {'tok/s':>7} {'mem':>5} {'temp':>6} {'starve':>6} {'u':>7}"
    lines.append(head)
    lines.append("-" * len(head))
    hosts = _node_hosts(env)
    for i, a in enumerate(env.possible_agents):
        t = cfg.tenants[i]
        if o is None:
            gp, prec, batch, tps, mem, temp, u = "-", "-", "-", "-", "-", "-", "-"
        else:
            gp = f"{int(o.alloc[i])}/{int(o.requested[i])}"
            prec = "/".join(_SHORT[catalog.PRECISIONS[p]] for p in o.precision[i])
            batch = str(int(o.batch[i]))
            tps = _fmt_rate(float(o.tokens_per_s[i]))
            mem = f"{100 * o.mem_total[i] / o.mem_capacity[i]:.0f}%" if o.alloc[i] > 0 else "-"
            nodes = np.flatnonzero(hosts[i])
            temp = f"{temp_c[nodes].max():.0f}C" if nodes.size else "-"
            u = f"{o.utility[i]:+.3f}"
            flag = "OOM" if o.oom[i] else "VETO" if o.vetoed[i] else "TRIP" if o.tripped[i] else ""
            if flag:
                tps = flag
        status = "" if a in env.agents else " (done)"
        streak = int(fairness.streak[i])
        starve = f"{streak}{'!' if fairness.starved[i] else ''}"
        lines.append(
            f"{a + status:<10} {t.kind:<5} {t.model[:13]:<13} {t.gpu_type[:10]:<10} {gp:>6} {prec:<15} {batch:>5} {tps:>7} {mem:>5} {temp:>6} {starve:>6} {u:>7}"
        )
    return "\n".join(lines)


def new_figure():
    """An Agg figure for :func:`render_rgb` (no pyplot global state); the env keeps one and
    passes it to each frame."""
    require("matplotlib", "plot", _RGB)
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: only for rgb_array frames
    from matplotlib.figure import Figure  # matplotlib: only for rgb_array frames

    fig = Figure(figsize=(9, 4), dpi=80)
    FigureCanvasAgg(fig)
    return fig


def render_rgb(env, fig=None) -> np.ndarray:
    """An (H, W, 3) uint8 picture of the cluster, drawn into ``fig`` (cleared first; a new
    figure from :func:`new_figure` by default)."""
    require("matplotlib", "plot", _RGB)
    import matplotlib  # matplotlib: only for rgb_array frames

    st, o = env.kernel_static, env.last_outcome
    fig = new_figure() if fig is None else fig
    fig.clf()
    ax_grid, ax_temp, ax_thr = fig.subplots(1, 3, gridspec_kw={"width_ratios": [2, 1, 2]})
    colors = matplotlib.colormaps["tab20"].resampled(max(st.T, 1))
    grid = np.full((st.K, st.gpus_per_node), np.nan)
    hosts = _node_hosts(env)
    for k in range(st.K):
        col = 0
        for i in range(st.T):
            n = int(hosts[i, k])
            grid[k, col : col + n] = i
            col += n
    ax_grid.imshow(np.ma.masked_invalid(grid), cmap=colors, vmin=-0.5, vmax=st.T - 0.5, aspect="auto")
    ax_grid.set_title(f"GPUs by tenant, round {env.round}", fontsize=9)
    ax_grid.set_xlabel("GPU")
    ax_grid.set_ylabel("node")
    ax_grid.set_yticks(range(st.K))
    ax_grid.set_yticklabels([f"{k}:{st.pools[st.node_pool[k]][:6]}" for k in range(st.K)], fontsize=7)
    temp = env.node_temperatures
    ax_temp.barh(range(st.K), temp, color=["tab:red" if x >= st.throttle_temp_c else "tab:orange" for x in temp])
    ax_temp.axvline(st.throttle_temp_c, color="k", ls="--", lw=0.8)
    ax_temp.axvline(st.critical_temp_c, color="r", ls=":", lw=0.8)
    ax_temp.set_xlim(min(st.ambient_c, temp.min()) - 5, st.critical_temp_c + 5)
    ax_temp.invert_yaxis()
    ax_temp.set_title("node temp (C)", fontsize=9)
    ax_temp.set_yticks([])
    thr = np.zeros(st.T) if o is None else np.asarray(o.tokens_per_s)
    ax_thr.bar(range(st.T), thr, color=[colors(i) for i in range(st.T)])
    ax_thr.set_yscale("symlog", linthresh=1.0)
    ax_thr.set_title("tokens/s by tenant", fontsize=9)
    ax_thr.set_xticks(range(st.T))
    ax_thr.set_xticklabels([str(i) for i in range(st.T)], fontsize=7)
    fig.tight_layout()
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    return np.ascontiguousarray(rgba[..., :3])


def render_frame(mode: str | None, env, figure=None, note: str = ""):
    """What an env's ``render()`` returns in ``mode``, and the figure to keep for the next frame:
    ``(frame, figure)``. ``None`` mode warns and draws nothing; ``rgb_array`` draws into
    ``figure`` (a new one the first time); ``ansi`` returns the table (with ``note`` as a last
    line), ``human`` prints it."""
    if mode is None:
        gymnasium.logger.warn("render() called without a render_mode; pass render_mode='ansi', 'rgb_array' or 'human'.")
        return None, figure
    if mode == "rgb_array":
        figure = new_figure() if figure is None else figure
        return render_rgb(env, figure), figure
    text = render_ansi(env) + (f"\n{note}" if note else "")
    if mode == "human":
        print(text)
        return None, figure
    return text, figure


__all__ = ["new_figure", "render_ansi", "render_frame", "render_rgb"]
