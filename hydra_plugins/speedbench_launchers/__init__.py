"""speedbench's submitit launchers, where Hydra takes launchers from (a launcher's ``_target_``
must be a class of a ``hydra_plugins`` module); the code lives in :mod:`speedbench.launchers.submitit`."""
from hydra_plugins.hydra_submitit_launcher import submitit_launcher as plugin

from speedbench.launchers.submitit import Stoppable


class LocalLauncher(Stoppable, plugin.LocalLauncher):
    """``hydra/launcher=local``: every job a process of its own on this machine."""


class SlurmLauncher(Stoppable, plugin.SlurmLauncher):
    """``hydra/launcher=slurm``: every job a task of one Slurm array."""


def register_launchers() -> None:
    """Register these launchers with Hydra by class, not by discovery: Hydra finds plugins by
    listing the ``hydra_plugins`` namespace, which an editable install (``pip install -e``) does not
    expose outside the checkout, so ``hydra/launcher=local|slurm`` would be an "Unknown plugin class"."""
    from hydra.core.plugins import Plugins

    for launcher in (LocalLauncher, SlurmLauncher):
        Plugins.instance().register(launcher)
