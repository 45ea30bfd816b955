"""The traces fleet_marl knows, and how a trace name becomes a file.

``TRACES`` maps a name (``fleet-marl traces list``) to a :class:`TraceInfo`: its format, the
sample shipped in ``fleet_marl/traces/data`` (if any), where the full trace is downloaded from,
the size and SHA-256 (or git object id) the source repository pins for that download, its
licence and the paper to cite. docs/traces.md describes each; ``data/LICENSES.md`` gives the
attribution of every shipped sample.

:func:`resolve_trace` turns a ``WorkloadSpec.trace`` value into a file, trying in order:

1. the value itself, if it is an existing file;
2. ``$FLEET_MARL_TRACES/<value>``, if that variable is set;
3. the shipped sample of that name: ``data/<value>``, or the sample of the registry entry
   ``<value>``;
4. the fetched cache (``$FLEET_MARL_CACHE/traces``, default ``~/.cache/fleet_marl/traces``):
   ``<cache>/<value>``, or the full file of the registry entry ``<value>``
   (``fleet-marl traces fetch <value>`` puts it there).

So ``pollux_workload-1.csv`` and ``azure_llm_inference_conv_2023.csv``, the names the ``trace``
task replays, resolve to shipped samples with nothing beside the package.

The ``read_*`` functions take a path or a name, resolve it and parse the file with the
format's cached parser (:mod:`fleet_marl.traces.readers`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fleet_marl.traces.readers import (
    FORMATS,
    AzureTrace,
    BurstGPTTrace,
    JobTrace,
    PolluxTrace,
    RequestTrace,
    parse_azure,
    parse_burstgpt,
    parse_helios,
    parse_pai,
    parse_philly,
    parse_pollux,
    sniff,
)

#: Folder of the shipped samples and their licences.
DATA_DIR = Path(__file__).resolve().parent / "data"
#: A folder of your own traces, searched before the shipped samples.
TRACES_ENV = "FLEET_MARL_TRACES"
#: fleet_marl's cache root (also the grader's); fetched traces go to its ``traces`` folder.
CACHE_ENV = "FLEET_MARL_CACHE"

CC_BY = "CC-BY-4.0"


@dataclass(frozen=True)
class TraceInfo:
    """One public trace. Sizes are bytes; ``sha256`` and ``git_blob`` are hex digests of the
    download (``git_blob`` is the git object id of that file in ``source``'s repository)."""

    name: str  # registry name: `fleet-marl traces fetch NAME`, and a WorkloadSpec.trace value
    format: str  # a key of readers.FORMATS
    title: str  # one line: what the trace is
    file: str  # file name of the full trace in $FLEET_MARL_TRACES or the cache
    url: str  # where `fleet-marl traces fetch` downloads it from
    source: str  # repository, path and commit the registry's facts were read from
    licence: str  # SPDX identifier
    citation: str  # the paper the trace's authors ask users to cite
    size: int | None = None  # bytes of the download, when the source pins it
    sha256: str | None = None  # SHA-256 of the download, when the source pins it
    git_blob: str | None = None  # git object id (SHA-1) of the download, when that is all the source pins
    download: str | None = None  # file name the download is saved as, when it is an archive holding `file`
    member: str | None = None  # path (or path suffix) of the trace inside that archive
    sample: str | None = None  # file in fleet_marl/traces/data; None when no sample ships
    cut: str = ""  # how the sample was cut from the full trace (or why none ships)

    @property
    def kind(self) -> str:
        """``jobs`` (replayed by training tenants) or ``requests`` (by serving tenants)."""
        return FORMATS[self.format].kind

    @property
    def sample_path(self) -> Path | None:
        """The shipped sample, or None."""
        return DATA_DIR / self.sample if self.sample else None

    @property
    def download_name(self) -> str:
        """File name of the download in the cache: the archive, or the trace itself."""
        return self.download or self.file


_ADAPTDL = "c793c7089bd307462686339d29707925c461f9a9"  # petuum/adaptdl, branch osdi21-artifact
_AZURE = "b469a113cedca53ddc3bdea71a143dc4b7d8700c"  # Azure/AzurePublicDataset, master, 2025-10-20
_POLLUX_SHA = {
    1: (4770, "0bff9c3a36b52c7025484b666d788001b1478cc4d84be409ca04b28f58f9d162"),
    2: (4855, "83bec266667ec209a202c10975ab321e52eb4989e5ba420d18003ed03cf15c4e"),
    3: (4691, "d76d5d1e3f9143b5453083de5c7a4c6576e884b41e86434a624b08f2c4277dc0"),
    4: (4760, "22c400f59637ba0fc2c9be3b491f67e0765d1bf33d0a57d76101d770e4443f21"),
}
_POLLUX_CITE = (
    'Qiao, Choe, Subramanya, Neiswanger, Ho, Zhang, Ganger, Xing. "Pollux: Co-adaptive Cluster Scheduling '
    'for Goodput-Optimized Deep Learning", OSDI 2021'
)
_SPLITWISE = (
    'Patel, Choukse, Zhang, Shah, Goiri, Maleki, Bianchini. "Splitwise: Efficient generative LLM inference '
    'using phase splitting", ISCA 2024'
)
_DYNAMOLLM = (
    'Stojkovic, Zhang, Goiri, Torrellas, Choukse. "DynamoLLM: Designing LLM Inference Clusters for '
    'Performance and Energy Efficiency", HPCA 2025'
)
_HELIOS_COMMIT = "159f0caeec16600b9b6017862952a36aae01c43f"
_NOT_REACHED = "no sample ships: the full trace could not be read when the samples were cut (see docs/traces.md)"

_ENTRIES = [
    *(
        TraceInfo(
            name=f"pollux-{i}",
            format="pollux",
            title=f"Pollux workload {i}: 160 jobs of 6 DL models, 8 h, sampled from Philly",
            file=f"pollux_workload-{i}.csv",
            url=f"https://raw.githubusercontent.com/petuum/adaptdl/{_ADAPTDL}/simulator/workloads/workload-{i}.csv",
            source=f"petuum/adaptdl@{_ADAPTDL} (branch osdi21-artifact) simulator/workloads/workload-{i}.csv",
            licence="Apache-2.0",
            citation=_POLLUX_CITE,
            size=_POLLUX_SHA[i][0],
            sha256=_POLLUX_SHA[i][1],
            sample=f"pollux_workload-{i}.csv",
            cut="the whole file (160 jobs), byte for byte",
        )
        for i in range(1, 5)
    ),
    TraceInfo(
        name="azure-conv-2023",
        format="azure",
        title="Azure LLM inference, conversation service, 1 hour of 2023-11-16",
        file="azure_llm_inference_conv_2023.csv",
        url=f"https://raw.githubusercontent.com/Azure/AzurePublicDataset/{_AZURE}/data/AzureLLMInferenceTrace_conv.csv",
        source=f"Azure/AzurePublicDataset@{_AZURE} data/AzureLLMInferenceTrace_conv.csv",
        licence=CC_BY,
        citation=_SPLITWISE,
        size=719_188,
        sha256="2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
        sample="azure_llm_inference_conv_2023.csv",
        cut="the whole file (19,366 requests), byte for byte: the trace task replays every row",
    ),
    TraceInfo(
        name="azure-code-2023",
        format="azure",
        title="Azure LLM inference, coding service, 1 hour of 2023-11-16",
        file="azure_llm_inference_code_2023.csv",
        url=f"https://raw.githubusercontent.com/Azure/AzurePublicDataset/{_AZURE}/data/AzureLLMInferenceTrace_code.csv",
        source=f"Azure/AzurePublicDataset@{_AZURE} data/AzureLLMInferenceTrace_code.csv",
        licence=CC_BY,
        citation=_SPLITWISE,
        size=320_117,
        sha256="54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
        sample="azure_llm_inference_code_2023_first30min.csv",
        cut="the header and the rows with TIMESTAMP in the first 30 minutes ([first, first + 1800 s)): "
        "lines 1-5741 of the file, byte for byte",
    ),
    *(
        TraceInfo(
            name=f"azure-{service}-2024",
            format="azure",
            title=f"Azure LLM inference, {what} service, one week of May 2024",
            file=f"AzureLLMInferenceTrace_{service}_1week.csv",
            url=f"https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace/AzureLLMInferenceTrace_{service}_1week.csv",
            source=f"Azure/AzurePublicDataset@{_AZURE} AzureLLMInferenceDataset2024.md (the file is hosted outside the repository)",
            licence=CC_BY,
            citation=_DYNAMOLLM,
            cut=_NOT_REACHED,
        )
        for service, what in (("conv", "conversation"), ("code", "coding"))
    ),
    TraceInfo(
        name="burstgpt-1",
        format="burstgpt",
        title="BurstGPT: ChatGPT and GPT-4 requests via Azure, first 2 months (1.43M rows)",
        file="BurstGPT_1.csv",
        url="https://media.githubusercontent.com/media/HPMLL/BurstGPT/1f52bc81aab7392cc30cc10b244396d9480b245d/data/BurstGPT_1.csv",
        source="HPMLL/BurstGPT@1f52bc81aab7392cc30cc10b244396d9480b245d data/BurstGPT_1.csv (Git LFS pointer)",
        licence=CC_BY,
        size=52_283_111,
        sha256="4bb3783693d0a435686fbfc885615d2349bd067239079fa4b749f2e679e12122",
        citation=(
            'Wang, Chen, Li, Kang, Fang, Zhou, Zheng, Tang, He, Guo, Wang, Wang, Zhou, Chu. "BurstGPT: A Real-World '
            'Workload Dataset to Optimize LLM Serving Systems", KDD 2025'
        ),
        cut=_NOT_REACHED,
    ),
    TraceInfo(
        name="philly",
        format="philly",
        title="Microsoft Philly: 117,325 DNN training jobs, Aug-Dec 2017",
        file="philly_cluster_job_log.json",
        url="https://media.githubusercontent.com/media/msr-fiddle/philly-traces/29a1b87fa2d9ed80b83c9e3a37f3a88d382b031d/trace-data.tar.gz",
        source="msr-fiddle/philly-traces@29a1b87fa2d9ed80b83c9e3a37f3a88d382b031d trace-data.tar.gz (Git LFS pointer)",
        licence=CC_BY,
        size=1_055_988_361,
        sha256="2037ccf63a725a02be718b0e1aeee6142c90b7f62d0d849295120e9f6ba13d2c",
        download="philly-trace-data.tar.gz",
        member="trace-data/cluster_job_log",
        citation=(
            'Jeon, Venkataraman, Phanishayee, Qian, Xiao, Yang. "Analysis of Large-Scale Multi-Tenant GPU Clusters '
            'for DNN Training Workloads", USENIX ATC 2019'
        ),
        cut=_NOT_REACHED,
    ),
    TraceInfo(
        name="pai-2020",
        format="pai",
        title="Alibaba PAI GPU cluster (6,500 GPUs): tasks of its training and inference jobs, July-August 2020",
        file="pai_task_table.csv",
        url="https://aliopentrace.oss-cn-beijing.aliyuncs.com/v2020GPUTraces/pai_task_table.tar.gz",
        source="alibaba/clusterdata@7a6c496e4f4b6ce6150be8f881cb051bf2abff42 cluster-trace-gpu-v2020/README.md (checksums)",
        licence=CC_BY,
        sha256="cd1d6dc3215d2a8607ccf6b6dd952b5db776df86926c73259fea7c1499ac40e5",
        download="pai_task_table.tar.gz",
        member="pai_task_table.csv",
        citation=(
            'Weng, Xiao, Yu, Wang, Wang, He, Li, Zhang, Lin, Ding. "MLaaS in the Wild: Workload Analysis and '
            'Scheduling in Large-Scale Heterogeneous GPU Clusters", NSDI 2022'
        ),
        cut=_NOT_REACHED,
    ),
    *(
        TraceInfo(
            name=f"helios-{c.lower()}",
            format="helios",
            title=f"SenseTime Helios, cluster {c}: Slurm jobs, April-September 2020",
            file=f"helios_{c.lower()}_cluster_log.csv",
            url=f"https://raw.githubusercontent.com/S-Lab-System-Group/HeliosData/{_HELIOS_COMMIT}/data.zip",
            source=f"S-Lab-System-Group/HeliosData@{_HELIOS_COMMIT} data.zip",
            licence=CC_BY,
            git_blob="1a48d5e0fb816fe9bbf1ad7086e7dec90923e5c6",
            download="HeliosData-data.zip",
            member=f"{c}/cluster_log.csv",
            citation=(
                'Hu, Sun, Yan, Wen, Zhang. "Characterization and Prediction of Deep Learning Workloads in Large-Scale '
                'GPU Datacenters", SC 2021'
            ),
            cut=_NOT_REACHED,
        )
        for c in ("Earth", "Saturn", "Uranus", "Venus")
    ),
]
#: Registry name -> trace, in the order ``fleet-marl traces list`` shows them.
TRACES: dict[str, TraceInfo] = {t.name: t for t in _ENTRIES}


def traces_dir() -> Path:
    """The folder a bare trace file name is looked up in first: ``$FLEET_MARL_TRACES`` if set,
    else the shipped samples (``fleet_marl/traces/data``)."""
    env = os.environ.get(TRACES_ENV)
    return Path(env).expanduser() if env else DATA_DIR


def cache_dir() -> Path:
    """Where ``fleet-marl traces fetch`` puts full traces: ``$FLEET_MARL_CACHE/traces``
    (default ``~/.cache/fleet_marl/traces``)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fleet_marl").expanduser() / "traces"


def _candidates(key: str) -> list[Path]:
    """Where a trace name is looked up, in order, after the value itself (steps 2-4 of the
    module docstring)."""
    info = TRACES.get(key)
    tried = []
    env = os.environ.get(TRACES_ENV)
    if env:
        tried.append(Path(env).expanduser() / key)
    tried += [DATA_DIR / key] + ([info.sample_path] if info and info.sample_path else [])
    tried += [cache_dir() / key] + ([cache_dir() / info.file] if info else [])
    return tried


def resolve_trace(name: str | os.PathLike) -> Path:
    """The file of a trace path or name, found in the order of the module docstring."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    key = str(name)
    info = TRACES.get(key)
    tried = [given.resolve(), *_candidates(key)]
    for path in tried[1:]:
        if path.is_file():
            return path
    if info:
        hint = f"run 'fleet-marl traces fetch {key}' to download it ({info.url})"
    else:
        hint = f"set {TRACES_ENV} to the folder that holds it, or use a name of 'fleet-marl traces list' ({', '.join(TRACES)})"
    raise FileNotFoundError(f"trace {key!r} not found: tried {', '.join(map(str, dict.fromkeys(tried)))}; {hint}")


def registry_names() -> tuple[str, ...]:
    """Every value that names a trace of the registry and no path: each entry's name
    (``pollux-1``), its full file's name and its sample's name (``pollux_workload-1.csv``, the
    names the built-in tasks use)."""
    names = []
    for info in TRACES.values():
        names += [info.name, info.file] + ([info.sample] if info.sample else [])
    return tuple(dict.fromkeys(names))


def registry_file(name: str) -> Path | None:
    """The file of the registry trace ``name`` (a value of :func:`registry_names`), looked up only
    in the registry's folders (``$FLEET_MARL_TRACES``, the shipped samples, the fetched cache), or
    None when ``name`` is no registry name, is not on this machine, or a file of the same name in
    the working directory would be read in its place by :func:`resolve_trace`. Nothing a caller
    passes here is opened: a server checks a client's trace value with it (docs/llm_agents.md,
    "Security")."""
    if not isinstance(name, str) or name not in registry_names() or Path(name).is_file():
        return None  # not a registry name, or shadowed by a file in the working directory
    return next((path for path in _candidates(name) if path.is_file()), None)


def _key(path: str | os.PathLike) -> tuple[str, int, int]:
    p = resolve_trace(path).resolve()
    st = p.stat()
    return str(p), st.st_mtime_ns, st.st_size


def read_trace(path: str | os.PathLike) -> JobTrace | RequestTrace:
    """Parse a trace of any format (told apart by its first line: :func:`readers.sniff`)."""
    key = _key(path)
    return FORMATS[sniff(key[0])].parse(*key)


_Trace = TypeVar("_Trace")


def _reader(parse: Callable[[str, int, int], _Trace], name: str, what: str) -> Callable[[str | os.PathLike], _Trace]:
    """The reader ``name`` of one format: its parser ``parse`` on a path or a trace name."""

    def read(path: str | os.PathLike) -> _Trace:
        return parse(*_key(path))

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"Parse and validate {what} (a path or a trace name)."
    return read


read_pollux: Callable[[str | os.PathLike], PolluxTrace] = _reader(parse_pollux, "read_pollux", "a Pollux job trace")
read_azure: Callable[[str | os.PathLike], AzureTrace] = _reader(parse_azure, "read_azure", "an Azure LLM inference trace, 2023 or 2024")
read_burstgpt: Callable[[str | os.PathLike], BurstGPTTrace] = _reader(parse_burstgpt, "read_burstgpt", "a BurstGPT trace")
read_philly = _reader(parse_philly, "read_philly", "Philly's ``cluster_job_log``")
read_pai = _reader(parse_pai, "read_pai", "Alibaba PAI 2020's ``pai_task_table.csv``")
read_helios = _reader(parse_helios, "read_helios", "a Helios ``cluster_log.csv``")


def trace_stats(path: str | os.PathLike) -> dict:
    """Summary figures of a trace; durations run from 0 to the last entry's time.

    Requests: ``requests``, ``duration_s``, ``rate_per_s``, ``mean_context_tokens``,
    ``mean_generated_tokens``. Jobs: ``jobs``, ``gpu_jobs`` (jobs asking for >= 1 GPU, the ones
    a training tenant replays), ``duration_s``, ``jobs_per_hour`` (of all jobs) and
    ``mean_gpus`` (over the GPU jobs).
    """
    tr = read_trace(path)
    dur = float(tr.time_s[-1])
    n = len(tr.time_s)
    per_s = n / dur if dur > 0 else float("nan")
    if isinstance(tr, RequestTrace):
        return {
            "requests": n,
            "duration_s": dur,
            "rate_per_s": per_s,
            "mean_context_tokens": float(tr.context_tokens.mean()),
            "mean_generated_tokens": float(tr.generated_tokens.mean()),
        }
    gpu = tr.gpus[tr.gpus >= 1]
    return {
        "jobs": n,
        "gpu_jobs": len(gpu),
        "duration_s": dur,
        "jobs_per_hour": per_s * 3600,
        "mean_gpus": float(gpu.mean()) if len(gpu) else float("nan"),
    }


__all__ = [
    "CACHE_ENV",
    "DATA_DIR",
    "TRACES",
    "TRACES_ENV",
    "TraceInfo",
    "cache_dir",
    "read_azure",
    "read_burstgpt",
    "read_helios",
    "read_pai",
    "read_philly",
    "read_pollux",
    "read_trace",
    "registry_file",
    "registry_names",
    "resolve_trace",
    "trace_stats",
    "traces_dir",
]
