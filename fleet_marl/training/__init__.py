"""What every training engine does the same way, below the engines' adapters
(``fleet_marl.rllib``, ``fleet_marl.torchrl``): an engine keeps only what is its framework's.

=============  ============================================================================
module         what it owns
=============  ============================================================================
``config``     :class:`TrainConfigError`, the config fields every engine checks the same way
               (``check_common``, ``check_env``), a resumed run's iterations left, ``--config NAME``,
               the source checkout (``checkout``), a config with fields changed (``replaced``) and
               the config ``fleet-marl train``'s options give (``from_command``)
``folder``     the run folder: the engine's checkpoint name and sidecar (:class:`Engine`),
               checking and claiming the folder (``prepare_run``, ``start_run``), the atomic
               checkpoint swap, ``metrics.csv`` (:class:`MetricsLog`), the progress bar,
               :class:`TrainResult`
``results``    the engines' grader loaders (``engine_loader``) and their check that a run
               learned the env it is graded on (``check_trained_on``), the final evaluation, ``results.md``/``.json`` and the
               learning curve (``finish``), the end-of-run summary
``engines``    the registry of engines (:data:`~fleet_marl.training.engines.ENGINES`): each
               one's command and study modules, its checkpoints, which engine a config, a
               run folder or a command line names
=============  ============================================================================

To add an engine: an adapter package with its config (fields checked by ``check_common``), a
``train()`` that uses the folder and results here, a ``command`` module (``fleet-marl train
--engine NAME``), its entry in ``engines.ENGINES``, and a grader loader that calls
``check_trained_on`` (an entry point of ``fleet_marl.policy_loaders``); see
``docs/architecture.md``. No training framework is imported here.
"""

from fleet_marl.training.config import (
    TrainConfigError,
    check_common,
    check_env,
    check_integers,
    check_iterations_left,
    check_numbers,
    checkout,
    config_env,
    config_path,
    from_command,
    replaced,
    unreachable,
)
from fleet_marl.training.folder import (
    CHECKPOINT,
    OUTPUTS,
    Engine,
    MetricsLog,
    TrainResult,
    claim_run_folder,
    prepare_run,
    progress_bar,
    show_progress,
    start_run,
    swap_in_checkpoint,
)
from fleet_marl.training.results import (
    check_trained_on,
    engine_loader,
    final_evaluation,
    finish,
    learning_curve,
    print_result,
    print_summary,
    usage_error,
)

__all__ = [
    "CHECKPOINT",
    "OUTPUTS",
    "Engine",
    "MetricsLog",
    "TrainConfigError",
    "TrainResult",
    "check_common",
    "check_env",
    "check_integers",
    "check_iterations_left",
    "check_numbers",
    "check_trained_on",
    "checkout",
    "claim_run_folder",
    "config_env",
    "config_path",
    "engine_loader",
    "final_evaluation",
    "finish",
    "from_command",
    "learning_curve",
    "prepare_run",
    "print_result",
    "print_summary",
    "progress_bar",
    "replaced",
    "show_progress",
    "start_run",
    "swap_in_checkpoint",
    "unreachable",
    "usage_error",
]
