"""Real traces out of the box: readers, a registry, shipped samples and a fetcher.

Tenants with ``WorkloadSpec(pattern="trace", trace=NAME)`` replay a public trace
(:func:`fleet_marl.workloads.arrival_schedule`): training tenants replay the submit times of a
**job** trace, serving tenants the arrival times of a **request** trace.

================  ========  ==========  =====================================================
name              kind      sample      source (licence)
================  ========  ==========  =====================================================
pollux-1 .. -4    jobs      whole file  Pollux, OSDI 2021: jobs sampled from Philly (Apache-2.0)
azure-conv-2023   requests  whole file  Azure LLM inference 2023, Splitwise (CC-BY-4.0)
azure-code-2023   requests  first 30 m  Azure LLM inference 2023, Splitwise (CC-BY-4.0)
azure-conv-2024   requests  none        Azure LLM inference 2024, DynamoLLM (CC-BY-4.0)
azure-code-2024   requests  none        Azure LLM inference 2024, DynamoLLM (CC-BY-4.0)
burstgpt-1        requests  none        BurstGPT, KDD 2025 (CC-BY-4.0)
philly            jobs      none        Microsoft Philly, ATC 2019 (CC-BY-4.0)
pai-2020          jobs      none        Alibaba PAI GPU 2020, NSDI 2022 (CC-BY-4.0)
helios-<cluster>  jobs      none        SenseTime Helios, SC 2021 (CC-BY-4.0)
================  ========  ==========  =====================================================

Modules: :mod:`~fleet_marl.traces.readers` (the formats, ``FORMATS`` and ``sniff``; one validating
parser per format in :mod:`~fleet_marl.traces.job_traces` and :mod:`~fleet_marl.traces.request_traces`,
over :mod:`~fleet_marl.traces.fields`),
:mod:`~fleet_marl.traces.registry` (``TRACES``), :mod:`~fleet_marl.traces.locate` (name resolution),
:mod:`~fleet_marl.traces.loading` (``read_*``, ``trace_stats``),
:mod:`~fleet_marl.traces.download` (``fetch``: resumable, verified downloads) and
:mod:`~fleet_marl.traces.command` (``fleet-marl traces list`` / ``fetch``). The samples and
their licences are in ``data/`` (``data/LICENSES.md``); docs/traces.md describes every trace,
its columns and how they map onto tenants.

>>> from fleet_marl.traces import read_trace, trace_stats
>>> read_trace("azure_llm_inference_conv_2023.csv").context_tokens.shape
(19366,)
"""

from fleet_marl.traces import loading, locate, registry
from fleet_marl.traces.loading import *  # noqa: F403 -- the package re-exports the loaders' public names, their __all__
from fleet_marl.traces.locate import *  # noqa: F403 -- and name resolution's
from fleet_marl.traces.readers import FORMATS, AzureTrace, BurstGPTTrace, JobTrace, PolluxTrace, RequestTrace, TraceError
from fleet_marl.traces.registry import *  # noqa: F403 -- and the registry's

#: The formats' names, the registry's, name resolution's and the loaders'.
__all__ = ["FORMATS", "AzureTrace", "BurstGPTTrace", "JobTrace", "PolluxTrace", "RequestTrace", "TraceError"]
__all__ += registry.__all__ + locate.__all__ + loading.__all__
