"""The catalog: facts as data, each with its source.

The numbers live in YAML files beside this module (``gpus.yaml``, ``models.yaml``,
``precisions.yaml``, ``topologies.yaml``: reference cluster designs); this module only loads and checks them. Every number is cited in the
YAML ``source`` field and again, with the equation that uses it, in ``docs/model.md``.

>>> from fleet_marl import catalog
>>> catalog.gpu("h100-sxm").memory_gb
80.0
>>> round(catalog.model("llama-3.1-8b").total_params / 1e9, 2)
8.03
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import yaml

_HERE = Path(__file__).resolve().parent


def _load(name: str) -> dict:
    with open(_HERE / name, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


_PREC = _load("precisions.yaml")

#: Precision names in kernel code order (``PRECISIONS[code]``).
PRECISIONS: tuple[str, ...] = tuple(sorted(_PREC["formats"], key=lambda k: _PREC["formats"][k]["code"]))
#: Precision name -> integer code used by the kernel.
PRECISION_CODE: dict[str, int] = {p: i for i, p in enumerate(PRECISIONS)}
#: Bytes per value, indexed by precision code. (P,) float64
PRECISION_BYTES: np.ndarray = np.array([_PREC["formats"][p]["bytes"] for p in PRECISIONS], dtype=np.float64)
#: True where the format is weight-only (serving only). (P,) bool
WEIGHT_ONLY: np.ndarray = np.array([_PREC["formats"][p]["weight_only"] for p in PRECISIONS], dtype=bool)
#: Layer groups in kernel order.
GROUPS: tuple[str, ...] = tuple(_PREC["groups"])
#: unsafe[g, p] is True when precision p is numerically unsafe on layer group g. (G, P) bool
UNSAFE: np.ndarray = np.array([[p in _PREC["unsafe"][g] for p in PRECISIONS] for g in GROUPS], dtype=bool)
N_PRECISIONS = len(PRECISIONS)
N_GROUPS = len(GROUPS)


#: The message sizes, in bytes, through which :meth:`GPUType.allreduce_fit` draws its line: 4 MiB
#: (below it the serving engines' custom all-reduce on NVLink is the faster path, and NCCL's own
#: protocols change) to 1 GiB, the range of a tensor-parallel step's hidden states (one token's
#: ``h`` BF16 values times the step's tokens).
ALLREDUCE_FIT_BYTES = (4 * 2**20, 2**30)


class CatalogError(KeyError):
    """An unknown catalog key. The message lists the valid keys."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


@dataclass(frozen=True)
class GPUType:
    """One GPU type. Throughput is dense (no sparsity), in TFLOPS/TOPS."""

    name: str
    memory_gb: float
    memory_bytes: float  # what CUDA reports (totalGlobalMem): the capacity a job gets
    bandwidth_tbs: float
    tflops: dict[str, float]  # keys: fp32 (TF32 tensor), bf16, fp8 (Hopper/Ada), int8
    fp32_vector_tflops: float
    tdp_w: float
    idle_w: float
    price_per_hour: float
    interconnect_gbs: float
    precisions: tuple[str, ...]
    source: str = field(repr=False)
    idle_source: str = field(repr=False, default="")
    price_source: str = field(repr=False, default="")
    memory_bytes_source: str = field(repr=False, default="")
    #: True where the GPUs of a node are joined by NVLink (serving engines' custom all-reduce
    #: kernels read their peers' buffers over it); False for PCIe-only parts.
    nvlink: bool = False
    #: A published NCCL all-reduce sweep inside one node of ``allreduce_gpus`` of these GPUs:
    #: ``(bytes, algbw GB/s)`` rows as ``nccl-tests``' ``all_reduce_perf`` prints them; the
    #: kernel's all-reduce time is :meth:`allreduce_fit`'s line through it.
    allreduce_sweep: tuple[tuple[float, float], ...] = field(repr=False, default=())
    allreduce_gpus: float = 8.0
    allreduce_source: str = field(repr=False, default="")

    def supports(self, precision: str) -> bool:
        return precision in self.precisions

    def allreduce_fit(self) -> tuple[float, float]:
        """``(latency s, bus bandwidth B/s)`` of an NCCL all-reduce on this GPU type: the line
        ``t(S) = latency + S / algbw`` through :attr:`allreduce_sweep`'s rows from
        :data:`ALLREDUCE_FIT_BYTES` (least squares in relative error), with the bus bandwidth
        ``algbw x 2 (n - 1) / n`` at the sweep's ``n`` GPUs (nccl-tests' all-reduce factor,
        NVIDIA/nccl-tests ``doc/PERFORMANCE.md``) -- a tensor-parallel group of ``n`` GPUs then
        moves ``S`` bytes in ``latency + 2 (n - 1) / n x S / busbw``."""
        rows = np.array(self.allreduce_sweep, dtype=np.float64)
        size, algbw = rows[:, 0], rows[:, 1] * 1e9
        keep = (size >= ALLREDUCE_FIT_BYTES[0]) & (size <= ALLREDUCE_FIT_BYTES[1])
        t = size[keep] / algbw[keep]
        a = np.stack([1.0 / t, size[keep] / t], axis=1)
        (latency, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        n = self.allreduce_gpus
        return float(latency), float(2.0 * (n - 1.0) / n / inv_bw)

    def peak_flops(self) -> np.ndarray:
        """Peak FLOP/s by precision code (P,); weight-only formats run at the BF16 peak,
        unsupported ones are 0."""
        out = np.zeros(N_PRECISIONS)
        for i, p in enumerate(PRECISIONS):
            if p not in self.precisions:
                continue
            key = "bf16" if WEIGHT_ONLY[i] else p
            out[i] = self.tflops[key] * 1e12
        return out


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer given by its dimensions (``config.json`` fields)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied_embeddings: bool
    mlp: str  # "gated" (SwiGLU) or "dense"
    norm: str  # "rmsnorm" or "layernorm"
    qkv_bias: bool
    linear_bias: bool
    learned_positions: int
    max_seq: int
    published_params: float
    source: str = field(repr=False)
    #: config.json's ``head_dim`` where the model sets it (Qwen3: 128 with ``hidden / heads`` = 64);
    #: 0 (``null`` in the YAML) derives it as ``hidden // heads``. After construction it is the
    #: head dimension in use.
    head_dim: int = 0
    #: config.json's ``sliding_window`` where the model attends to at most that many past tokens
    #: (Mistral-7B-v0.1: 4096); None for full attention.
    sliding_window: int | None = None
    #: RMSNorm on each head's q and k (Qwen3): ``2 x head_dim`` weights per layer.
    qk_norm: bool = False

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    def kv_tokens(self, context: float) -> float:
        """Tokens of ``context`` whose K and V a sequence keeps: all of them, or the last
        ``sliding_window`` (the rolling buffer cache of Jiang et al. 2023, sec. 2)."""
        return float(context if self.sliding_window is None else min(context, self.sliding_window))

    @property
    def params_by_group(self) -> dict[str, int]:
        """Parameters per layer group, computed from the dimensions."""
        h, L, d = self.hidden, self.layers, self.head_dim
        q_dim, kv_dim = self.heads * d, self.kv_heads * d
        attn = h * q_dim + 2 * h * kv_dim + q_dim * h
        if self.qkv_bias or self.linear_bias:
            attn += q_dim + 2 * kv_dim
        if self.linear_bias:
            attn += h
        if self.mlp == "gated":
            mlp = 3 * h * self.ffn
        else:
            mlp = 2 * h * self.ffn
        if self.linear_bias:
            mlp += self.ffn + h
        per_norm = 2 * h if self.norm == "layernorm" else h
        qk = 2 * d if self.qk_norm else 0  # RMSNorm weights on q and k, per layer
        return {
            "embedding": self.vocab * h + self.learned_positions * h,
            "attention": L * attn,
            "mlp": L * mlp,
            "norm": (2 * L + 1) * per_norm + L * qk,
            "head": 0 if self.tied_embeddings else self.vocab * h,
        }

    @property
    def params_vector(self) -> np.ndarray:
        """Parameters per group in ``GROUPS`` order. (G,) float64"""
        pg = self.params_by_group
        return np.array([pg[g] for g in GROUPS], dtype=np.float64)

    @property
    def total_params(self) -> int:
        return int(sum(self.params_by_group.values()))

    def kv_bytes_per_token(self, kv_bytes: float = 2.0) -> float:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * kv_bytes


_GPU_FIELDS = {f for f in GPUType.__dataclass_fields__ if f != "name"}
_MODEL_FIELDS = {f for f in ModelArch.__dataclass_fields__ if f != "name"}


def _build(cls, fields: set[str], name: str, raw: dict, file: str):
    missing = fields - set(raw)
    extra = set(raw) - fields
    if missing or extra:
        raise ValueError(f"{file}: entry {name!r} has missing fields {sorted(missing)} and unknown fields {sorted(extra)}")
    kw = dict(raw)
    if "precisions" in kw:
        kw["precisions"] = tuple(kw["precisions"])
        bad = [p for p in kw["precisions"] if p not in PRECISION_CODE]
        if bad:
            raise ValueError(f"{file}: {name}.precisions has unknown formats {bad}")
    for k, v in kw.items():
        if isinstance(v, int) and not isinstance(v, bool) and cls is GPUType:
            kw[k] = float(v)
    if "tflops" in kw:
        kw["tflops"] = {k: float(v) for k, v in kw["tflops"].items()}
    if cls is GPUType:
        if not isinstance(kw["nvlink"], bool):
            raise ValueError(f"{file}: {name}.nvlink = {kw['nvlink']!r}: expected true or false")
        rows = kw["allreduce_sweep"]
        if not rows or any(len(r) != 2 or min(r) <= 0 for r in rows):
            raise ValueError(f"{file}: {name}.allreduce_sweep: expected [bytes, algbw GB/s] rows of positive numbers")
        kw["allreduce_sweep"] = tuple((float(a), float(b)) for a, b in rows)
    if cls is ModelArch:
        for key in ("head_dim", "sliding_window"):
            v = kw[key]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{file}: {name}.{key} = {v!r}: expected a positive integer, or null (config.json does not set it)")
        if not isinstance(kw["qk_norm"], bool):
            raise ValueError(f"{file}: {name}.qk_norm = {kw['qk_norm']!r}: expected true or false")
        if kw["head_dim"] is None:
            kw["head_dim"] = 0  # derived from hidden / heads
    obj = cls(name=name, **kw)
    return obj


@cache
def gpus() -> dict[str, GPUType]:
    """All GPU types by catalog key."""
    raw = _load("gpus.yaml")
    return {k: _build(GPUType, _GPU_FIELDS, k, v, "gpus.yaml") for k, v in raw.items()}


@cache
def models() -> dict[str, ModelArch]:
    """All model architectures by catalog key."""
    raw = _load("models.yaml")
    return {k: _build(ModelArch, _MODEL_FIELDS, k, v, "models.yaml") for k, v in raw.items()}


def gpu(name: str) -> GPUType:
    """The GPU type ``name``; an unknown key raises :class:`CatalogError` listing valid keys."""
    table = gpus()
    if name not in table:
        raise CatalogError(f"unknown GPU type {name!r}; expected one of: {', '.join(sorted(table))}")
    return table[name]


def model(name: str) -> ModelArch:
    """The model ``name``; an unknown key raises :class:`CatalogError` listing valid keys."""
    table = models()
    if name not in table:
        raise CatalogError(f"unknown model {name!r}; expected one of: {', '.join(sorted(table))}")
    return table[name]


@dataclass(frozen=True)
class Topology:
    """A reference cluster design (``topologies.yaml``): the topology fields of a
    ``ClusterSpec`` (``ClusterSpec.from_topology``) with their sources."""

    name: str
    description: str
    gpu_type: str
    gpus_per_node: int
    nodes_per_rack: int
    nodes_per_leaf: int
    network_gbs_per_gpu: float
    uplink_oversubscription: float
    storage_gbs: float | None  # None: not published (no shared limit)
    nodes: int
    source: tuple[str, ...]
    fitted: str | None  # which published case a number was fitted on

    def cluster_fields(self) -> dict:
        """The ``ClusterSpec`` fields this design sets (``gpu_types`` for its ``nodes``)."""
        return dict(
            gpu_types=(self.gpu_type,) * self.nodes,
            gpus_per_node=self.gpus_per_node,
            nodes_per_rack=self.nodes_per_rack,
            nodes_per_leaf=self.nodes_per_leaf,
            network_gbs_per_gpu=self.network_gbs_per_gpu,
            uplink_oversubscription=self.uplink_oversubscription,
            storage_gbs=self.storage_gbs,
        )


_TOPOLOGY_FIELDS = {f for f in Topology.__dataclass_fields__ if f != "name"}


def _topology(name: str, raw: dict) -> Topology:
    missing, extra = _TOPOLOGY_FIELDS - set(raw), set(raw) - _TOPOLOGY_FIELDS
    if missing or extra:
        raise ValueError(f"topologies.yaml: entry {name!r} has missing fields {sorted(missing)} and unknown fields {sorted(extra)}")
    if raw["gpu_type"] not in gpus():
        raise ValueError(f"topologies.yaml: {name}.gpu_type = {raw['gpu_type']!r}: expected a GPU type of gpus.yaml")
    for key in ("gpus_per_node", "nodes_per_rack", "nodes_per_leaf", "nodes"):
        if isinstance(raw[key], bool) or not isinstance(raw[key], int) or raw[key] < 1:
            raise ValueError(f"topologies.yaml: {name}.{key} = {raw[key]!r}: expected a positive integer")
    if raw["uplink_oversubscription"] < 1:
        raise ValueError(f"topologies.yaml: {name}.uplink_oversubscription = {raw['uplink_oversubscription']!r}: expected a number >= 1")
    storage = raw["storage_gbs"]
    if storage is not None and not storage > 0:
        raise ValueError(f"topologies.yaml: {name}.storage_gbs = {storage!r}: expected a positive number, or null (not published)")
    if not raw["source"]:
        raise ValueError(f"topologies.yaml: {name}.source: expected at least one source")
    return Topology(
        name=name,
        **{k: raw[k] for k in ("description", "gpu_type", "gpus_per_node", "nodes_per_rack", "nodes_per_leaf", "nodes", "fitted")},
        network_gbs_per_gpu=float(raw["network_gbs_per_gpu"]),
        uplink_oversubscription=float(raw["uplink_oversubscription"]),
        storage_gbs=None if storage is None else float(storage),
        source=tuple(raw["source"]),
    )


@cache
def topologies() -> dict[str, Topology]:
    """All reference cluster designs by catalog key."""
    return {k: _topology(k, v) for k, v in _load("topologies.yaml").items()}


def topology(name: str) -> Topology:
    """The reference design ``name``; an unknown key raises :class:`CatalogError` listing valid keys."""
    table = topologies()
    if name not in table:
        raise CatalogError(f"unknown topology {name!r}; expected one of: {', '.join(sorted(table))}")
    return table[name]


__all__ = [
    "ALLREDUCE_FIT_BYTES",
    "GROUPS",
    "N_GROUPS",
    "N_PRECISIONS",
    "PRECISIONS",
    "PRECISION_BYTES",
    "PRECISION_CODE",
    "UNSAFE",
    "WEIGHT_ONLY",
    "CatalogError",
    "GPUType",
    "ModelArch",
    "Topology",
    "gpu",
    "gpus",
    "model",
    "models",
    "topologies",
    "topology",
]
