"""The traces fleet_marl knows: ``TRACES`` maps a name (``fleet-marl traces list``) to a
:class:`TraceInfo`.

Each entry gives its format, the sample shipped in ``fleet_marl/traces/data`` (if any), where the
full trace is downloaded from, the size and SHA-256 (or git object id) the source repository pins
for that download, its licence and the paper to cite. docs/traces.md describes each;
``data/LICENSES.md`` gives the attribution of every shipped sample. How a trace name becomes a
file is :mod:`fleet_marl.traces.locate`'s; reading one by path or name is
:mod:`fleet_marl.traces.loading`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleet_marl.traces.readers import FORMATS

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


__all__ = ["CACHE_ENV", "DATA_DIR", "TRACES", "TRACES_ENV", "TraceInfo"]
